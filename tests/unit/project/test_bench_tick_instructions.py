"""The tick bench counted in instructions (bench/bench_tick_instructions.py): what it
refuses, and the arithmetic of its two callgrind runs (valgrind itself is faked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo: bench.*

from bench import bench_tick_instructions as bti


def _run(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["bench_tick_instructions.py", *args])
    return bti.main()


def test_without_valgrind_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bti.shutil, "which", lambda _: None)
    assert _run(monkeypatch) == 2
    assert "apt-get install valgrind" in capsys.readouterr().err


def test_an_unknown_policy_is_refused_by_name(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bti.shutil, "which", lambda _: "/usr/bin/valgrind")
    assert _run(monkeypatch, "--policies", "plan,nosuch") == 2
    assert "['nosuch']" in capsys.readouterr().err


def test_one_tick_is_the_difference_of_the_two_runs_over_their_ticks(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        ticks = int(cmd[-1])
        collected = 1_000_000_000 + ticks * 80_000_000  # setup + 80 M a tick
        return subprocess.CompletedProcess(cmd, 0, "", f"==1== Collected : {collected}\n")

    monkeypatch.setattr(bti.shutil, "which", lambda _: "/usr/bin/valgrind")
    monkeypatch.setattr(bti.subprocess, "run", fake_run)
    assert _run(monkeypatch, "--policies", "plan") == 0
    assert "80.0 M instructions a tick" in capsys.readouterr().out
    assert [c[-3:] for c in calls] == [["--inner", "plan", str(bti.MANY)],
                                      ["--inner", "plan", str(bti.FEW)]]
    assert calls[0][:2] == ["/usr/bin/valgrind", "--tool=callgrind"]


def test_a_failed_callgrind_run_stops_the_bench_with_its_output(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bti.shutil, "which", lambda _: "/usr/bin/valgrind")
    monkeypatch.setattr(bti.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "valgrind: cannot start"))
    with pytest.raises(SystemExit, match="cannot start"):
        _run(monkeypatch, "--policies", "plan")
