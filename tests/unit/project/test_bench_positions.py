"""The positions bench's setup (bench/bench_positions.py): the reads it times are the ones
it names, over the queue it says it fills (the first, middle and last waiting task, pages
of 50 waiting rows at the back and the front of the queue and of one user's part)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo: bench.*

from bench import bench_positions as bp
from service.domain.states import RUNNABLE


def test_the_reads_are_of_the_queue_the_bench_says(tmp_path: Path) -> None:
    reads = dict(bp.fill(str(tmp_path / "tasks.sqlite3"), waiting=1200, finished=60))
    first, middle, last = (reads[f"task page, {k}"]().task.queue_position
                           for k in ("first waiting", "middle", "last"))
    assert (first, middle, last) == (1, 601, 1200)
    newest, _ = reads["list, newest 50"]()
    oldest, _ = reads["list, oldest 50 waiting"]()
    mine, _ = reads["queue of one user, 50"]()
    for page in (newest, oldest, mine):  # the list's pages hold finished tasks too
        assert len(page) == 50 and sum(t.queue_position is not None for t in page) >= 40
        assert all((t.queue_position is None) == (t.state not in RUNNABLE) for t in page)
    assert {t.user for t in mine} == {"user07"}
    assert max(t.queue_position or 0 for t in newest) == 1200  # the back of the queue
    # the front: the oldest waiting rows; a higher priority's rows sit ahead of any of them
    assert min(t.queue_position or 1201 for t in oldest) < 50


def test_it_runs_and_prints_each_read(capsys) -> None:
    assert bp.main(["--waiting", "120", "--finished", "10", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    for name in ("task page, first waiting", "list, newest 50", "queue of one user, 50"):
        assert any(line.startswith(name) and line.endswith(" ms") for line in out.splitlines())
