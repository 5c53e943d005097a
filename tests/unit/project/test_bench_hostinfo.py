"""Figures that can be compared: every bench that prints figures prints the shared host line
(bench/hostinfo.py: host, date, a calibration loop's time), and every row of the README's
figures table is one short line naming its date and host, with the same rows opening
docs/benchmarks.md."""

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
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
MAX_ROW = 400  # characters: one short line, not a paragraph of history


def _calls(tree: ast.AST) -> set[str]:
    return {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            for n in ast.walk(tree) if isinstance(n, ast.Call)}


def _table(text: str) -> list[list[str]]:
    """The rows (cells) of the first Markdown table in ``text``, header and rule left out."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
        elif rows:
            break
    return rows[2:]


def _figures_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("\n## Figures\n", 1)[1].split("\n## ", 1)[0]


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


def test_each_readme_figures_row_is_one_short_line_with_its_date_and_host() -> None:
    section = _figures_section()
    assert "docs/benchmarks.md" in section
    rows = _table(section)
    assert len(rows) >= 15
    for cells in rows:
        line = " | ".join(cells)
        assert len(cells) == 4, line
        assert len(line) <= MAX_ROW, f"{len(line)} characters: {cells[0]}"
        measured = cells[3]
        assert DATE.search(measured), f"no YYYY-MM-DD: {cells[0]}"
        assert "host" in measured, f"no host: {cells[0]}"


def test_docs_benchmarks_opens_with_the_same_rows() -> None:
    readme = [cells[0] for cells in _table(_figures_section())]
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    current = text.split("\n## ", 2)[1]
    assert current.startswith("Current figures"), "docs/benchmarks.md opens with the table"
    docs = [cells[0] for cells in _table(current)]
    assert docs == readme
    for cells in _table(current):
        assert DATE.search(cells[-1]) and "host" in cells[-1], cells[0]
