"""The netns launcher's FORWARD rule: added once per bridge, removed on ``down``.

iptables is replaced by a fake that keeps the FORWARD chain as a list, so the tests run
anywhere; the runtime tier runs the real rule next to a Docker engine.
"""

from __future__ import annotations

import subprocess

import pytest

from raypool.local import netns as local


class FakeIptables:
    def __init__(self) -> None:
        self.chain: list[tuple[str, ...]] = [("-i", "docker0", "-j", "ACCEPT")]
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert argv[:2] == ("iptables", "-w"), argv
        op, chain, *rule = argv[2:]
        assert chain == "FORWARD"
        self.calls.append((op, *rule))
        spec = tuple(rule)
        rc = 0
        if op == "-C":
            rc = 0 if spec in self.chain else 1
        elif op == "-I":
            self.chain.insert(0, spec)
        elif op == "-D":
            if spec in self.chain:
                self.chain.remove(spec)
            else:
                rc = 1
        if check and rc:
            raise local.LocalError(f"{argv} failed")
        return subprocess.CompletedProcess(list(argv), rc, "", "")


@pytest.fixture
def iptables(monkeypatch: pytest.MonkeyPatch) -> FakeIptables:
    fake = FakeIptables()
    monkeypatch.setattr(local, "_sh", fake)
    monkeypatch.setattr(local.shutil, "which", lambda name: f"/usr/sbin/{name}")
    return fake


RULE = ("-i", "arbr1a2b", "-o", "arbr1a2b", "-j", "ACCEPT")


def test_rule_goes_first_and_only_once(iptables: FakeIptables) -> None:
    local.allow_bridge_forwarding("arbr1a2b")
    local.allow_bridge_forwarding("arbr1a2b")
    assert iptables.chain[0] == RULE
    assert iptables.chain.count(RULE) == 1


def test_down_removes_only_its_own_bridge_rule(iptables: FakeIptables) -> None:
    local.allow_bridge_forwarding("arbr1a2b")
    local.allow_bridge_forwarding("arbr9999")
    local.drop_bridge_forwarding("arbr1a2b")
    assert RULE not in iptables.chain
    assert ("-i", "arbr9999", "-o", "arbr9999", "-j", "ACCEPT") in iptables.chain
    assert ("-i", "docker0", "-j", "ACCEPT") in iptables.chain
    local.drop_bridge_forwarding("arbr1a2b")  # nothing left to remove: no error


def test_without_iptables_nothing_is_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_call(*argv: str, check: bool = True) -> None:
        raise AssertionError(f"ran {argv}")

    monkeypatch.setattr(local, "_sh", no_call)
    monkeypatch.setattr(local.shutil, "which", lambda name: None)
    local.allow_bridge_forwarding("arbr1a2b")
    local.drop_bridge_forwarding("arbr1a2b")
