"""The tick bench's setup (bench/bench_tick.py): with or without Argus's own running tasks,
every worker has exactly one GPU free, so no queued shape fits and a tick admits nothing;
with time limits the plan's start estimates run (without, it has none to find)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo: bench.*

from bench import bench_tick as bt
from service.domain.states import TaskState


@pytest.mark.parametrize(("running", "workers"), [(0, 4), (9, 4), (30, 5)])
def test_every_worker_keeps_one_gpu_free_and_the_running_tasks_are_seen_running(
        tmp_path: Path, running: int, workers: int) -> None:
    args = argparse.Namespace(ticks=1, runnable=40, finished=20, running=running,
                              limits=False)
    store, cluster, sched, now = bt.setup("plan", tmp_path, args, guard_s=0.0, fair=True,
                                          reservations=8)
    try:
        free = {n.node_id: n.free().get("GPU", 0.0) for n in cluster.nodes.values()}
        assert free == {"head": 0.0, **{f"worker{i}": 1.0 for i in range(workers)}}
        assert len(store.tasks.active([TaskState.RUNNING])) == running
        held = sorted(sum(h.get("GPU", 0.0) for h in job.holds.values())
                      for job in cluster.jobs.values())
        assert held == [1.0] * running
        report = sched.tick(now)
        assert report.submitted == 0
        assert report.pending == 40
    finally:
        store.close()


@pytest.mark.parametrize("limits", [False, True])
def test_with_limits_the_plan_finds_start_estimates(tmp_path: Path, limits: bool) -> None:
    args = argparse.Namespace(ticks=1, runnable=40, finished=20, running=28, limits=limits)
    store, _, sched, now = bt.setup("plan", tmp_path, args, guard_s=0.0, fair=True,
                                    reservations=8)
    try:
        assert {row.max_runtime_s for row in store.tasks.active([TaskState.RUNNING])} == \
            ({bt.RUNNING_LIMIT_S} if limits else {None})
        report = sched.tick(now)
        assert report.submitted == 0
        estimates = sched.last_estimates
        if limits:  # every waiting task is within the first 64: each has a start
            assert len(estimates) == 40
            assert all(e.start >= now + 3600 for e in estimates.values())
        else:
            assert estimates == {}
    finally:
        store.close()


def test_the_engine_option_defaults_to_sqlite_and_both_alternates_the_first() -> None:
    assert bt.parse_args([]).engine == "sqlite"
    assert bt.parse_args(["--engine", "both"]).engine == "both"
    assert bt.engine_order("sqlite", 3) == ["sqlite"]
    assert bt.engine_order("postgresql", 0) == ["postgresql"]
    orders = [bt.engine_order("both", k) for k in range(len(bt.POLICIES))]
    assert orders[0] == ["sqlite", "postgresql"] and orders[1] == ["postgresql", "sqlite"]
    firsts = [order[0] for order in orders]
    assert firsts.count("sqlite") == firsts.count("postgresql")  # each goes first as often


@pytest.mark.parametrize(("postgres_ms", "verdict"), [(15.0, "1.50x (floor 2.0) ok"),
                                                      (25.0, "2.50x (floor 2.0) MISSED")])
def test_the_engine_floor_is_the_plan_ticks_median_wall_time(postgres_ms: float,
                                                              verdict: str) -> None:
    sqlite = {"wall_median_ms": 10.0, "wall_max_ms": 30.0}
    line, ok = bt.engine_verdict(sqlite, {"wall_median_ms": postgres_ms, "wall_max_ms": 60.0})
    assert line.startswith(f"engine: tick {verdict}")
    assert ok is (postgres_ms <= 20.0)
