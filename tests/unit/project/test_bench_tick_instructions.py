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


def test_the_first_tick_and_a_steady_one_are_differences_of_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[list[str]] = []
    envs: list[object] = []
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as in CI containers

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        envs.append(kwargs.get("env"))
        ticks = int(cmd[-1]) + 1
        # setup, a first tick of 95 M, then 80 M a tick
        collected = 1_000_000_000 + min(ticks, 1) * 95_000_000 + max(ticks - 1, 0) * 80_000_000
        return subprocess.CompletedProcess(cmd, 0, "", f"==1== Collected : {collected}\n")

    monkeypatch.setattr(bti.shutil, "which", lambda _: "/usr/bin/valgrind")
    monkeypatch.setattr(bti.subprocess, "run", fake_run)
    assert _run(monkeypatch, "--policies", "plan") == 0
    assert "first    95.0 M, then    80.0 M instructions a tick" in capsys.readouterr().out
    assert [c[-3:] for c in calls] == [["--inner", "plan", str(t)] for t in
                                      (bti.FIRST, bti.MANY, bti.FEW, bti.FIRST, bti.NONE)]
    # compiles the bytecode outside callgrind, of what the first tick imports too: every
    # run writes it, so no measured run compiles a module
    assert calls[0][0] == sys.executable
    for env in envs:
        assert isinstance(env, dict) and "PYTHONDONTWRITEBYTECODE" not in env
        assert env["PYTHONHASHSEED"] == "0"
    assert all(c[:2] == ["/usr/bin/valgrind", "--tool=callgrind"] for c in calls[1:])


def test_a_failed_callgrind_run_stops_the_bench_with_its_output(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bti.shutil, "which", lambda _: "/usr/bin/valgrind")
    monkeypatch.setattr(bti.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 0, "", "") if cmd[0] == sys.executable else subprocess.CompletedProcess(
        cmd, 1, "", "valgrind: cannot start"))
    with pytest.raises(SystemExit, match=r"(?s)callgrind failed.*cannot start"):
        _run(monkeypatch, "--policies", "plan")


def test_a_failed_setup_stops_the_bench_before_callgrind(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ImportError: no module named x")

    monkeypatch.setattr(bti.shutil, "which", lambda _: "/usr/bin/valgrind")
    monkeypatch.setattr(bti.subprocess, "run", fake_run)
    with pytest.raises(SystemExit, match=r"(?s)setup failed.*ImportError"):
        _run(monkeypatch, "--policies", "plan")
    assert len(calls) == 1
