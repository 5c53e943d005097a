"""Figures that can be compared: every bench that prints figures prints the shared host line
(bench/hostinfo.py: host, date, a calibration loop's time)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo: bench.*

from bench import hostinfo

ROOT = Path(__file__).resolve().parents[3]
BENCHES = sorted(p for p in (ROOT / "bench").glob("*.py")
                 if "__main__" in p.read_text() and "print(" in p.read_text())
HOST_LINE = re.compile(r"host \S+ \([^,]+, \d+ cores\), \d{4}-\d{2}-\d{2}; "
                       r"calibration \d+ ms; load \d+\.\d")


def _calls(tree: ast.AST) -> set[str]:
    return {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            for n in ast.walk(tree) if isinstance(n, ast.Call)}


def test_the_host_line_names_the_host_the_date_and_the_calibration() -> None:
    line = hostinfo.host_line()
    assert HOST_LINE.fullmatch(line), line
    assert 0 < hostinfo.calibration_ms() < 60_000


def test_the_benches_are_found() -> None:
    names = {p.name for p in BENCHES}
    assert {"bench_api.py", "bench_tick.py", "bench_trace.py", "bench_shared_reads.py"} <= names
    assert not names & {"hostinfo.py", "tracegen.py", "tracesim.py"}


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.name)
def test_every_bench_that_prints_figures_prints_the_shared_host_line(bench: Path) -> None:
    tree = ast.parse(bench.read_text())
    imports = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "bench.hostinfo" in imports, f"{bench.name}: import host_line from bench.hostinfo"
    assert "host_line" in _calls(tree), f"{bench.name}: print(host_line()) beside the figures"
    own = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert "calibration_ms" not in own, f"{bench.name}: one calibration loop, bench/hostinfo.py"

