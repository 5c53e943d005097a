"""bench/bench_nodes.py on a small trace: a node cordoned for a window gets no gang, and a
bad node is quarantined with nothing placed there after (the floors of issue 55)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo: bench.*

from bench import bench_nodes


def test_a_small_trace_holds_the_floors(capsys: pytest.CaptureFixture[str]) -> None:
    code = bench_nodes.main(["--tasks", "40", "--cordon-from", "0.5", "--cordon-to", "1.5",
                             "--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "placed there before" in out and ", during 0," in out
    (last,) = [line for line in out.splitlines() if line.startswith("nodes: ")]
    assert last.endswith(", 0 placed there after the quarantine"), last
    off, on = ([line for line in out.splitlines() if line.startswith(name)]
               for name in ("quarantine off", "quarantine on"))
    assert off and on and off[0].split()[-3] == "-"  # never quarantined without it
    assert on[0].split()[-3] == "h"  # quarantined at some hour with it: "0.57 h"
