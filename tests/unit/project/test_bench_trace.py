"""The scheduling-quality benchmark's simulation (bench/tracesim.py) and its arithmetic."""

from __future__ import annotations

import inspect
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo: bench.*

from bench.tracegen import (
    CLASSES,
    FAILFAST_AFTER_S,
    TraceTask,
    jain,
    lower_bound,
    make_trace,
    percentile,
    task_id,
)
from bench.tracesim import (
    POLICIES,
    POLICY_BY_NAME,
    T0,
    Fairness,
    RunResult,
    SimCluster,
    scheduler_settings,
    simulate,
)
from service.cluster.boundary import SubmitRequest
from service.domain.states import RayStatus


def _task(i: int, user: str, cls: str, arrival: float, duration: float) -> TraceTask:
    return TraceTask(task_id(user, cls, i), user, CLASSES[cls], arrival, duration)


def _run(trace: list[TraceTask], policy: str, **kw: object) -> RunResult:
    return simulate(trace, POLICY_BY_NAME[policy], **kw)  # type: ignore[arg-type]


# -- arithmetic ------------------------------------------------------------------------------

def test_jain_and_percentile() -> None:
    assert jain([5.0, 5.0, 5.0]) == 1.0
    assert jain([1.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain([1.0, 3.0]) == pytest.approx(16 / 20)
    assert math.isnan(jain([0.0, 0.0]))
    assert percentile([3.0, 1.0, 2.0, 4.0], 95) == 4.0
    assert percentile(list(map(float, range(1, 101))), 95) == 95.0
    assert math.isnan(percentile([], 95))


def _three() -> list[TraceTask]:
    return [_task(0, "alice", "small", 0, 100), _task(1, "bob", "large", 10, 50),
            _task(2, "carol", "medium", 20, 30)]


def test_lower_bound_terms_on_three_tasks() -> None:
    lb = lower_bound(_three())
    assert lb.terms["work/GPUs"] == pytest.approx((100 + 16 * 50 + 4 * 30) / 32)
    assert lb.terms["longest task"] == 100
    assert lb.terms["arrival+duration"] == 100
    assert lb.terms["work after t"] == pytest.approx(10 + (800 + 120) / 32)
    assert (lb.value, lb.term) == (100, "longest task")


def test_metrics_of_a_hand_made_schedule() -> None:
    """Everything fits at arrival: no waits, exact utilization and Jain over 20..50 s."""
    r = _run(_three(), "backfill")
    assert (r.unfinished, r.hung, r.preemptions) == (0, 0, 0)
    assert r.makespan_s == pytest.approx(100)
    assert r.ratio == pytest.approx(1.0)
    assert r.utilization == pytest.approx(1020 / (32 * 100))
    assert [r.wait(c, "max") for c in ("small", "large", "medium")] == [0, 0, 0]
    assert r.idle_fit_gpu_h == 0
    assert r.all_busy_h * 3600 == pytest.approx(30)
    held = [1 * 30, 16 * 30, 4 * 30]  # GPU-seconds each user held while all had work
    assert r.jain == pytest.approx(jain(held))
    assert r.jain_window == r.jain_short == pytest.approx(r.jain)  # one window
    assert math.isnan(r.jain_waiting) and r.all_waiting_h == 0  # nobody ever waited


def test_fairness_windows_split_intervals_and_weigh_by_time() -> None:
    f = Fairness(["a", "b"], window_s=3600)
    f.add(3000, 1200, {"a": 2, "b": 2})  # 600 s in window 0, 600 s in window 1
    f.add(4200, 2400, {"a": 4})  # the rest of window 1: only a holds GPUs
    assert f.seconds == 3600
    assert f.window_time == {0: 600, 1: 3000}
    assert f.windows[1] == {"a": 2 * 600 + 4 * 2400, "b": 2 * 600}
    w1 = jain([2 * 600 + 4 * 2400, 2 * 600])
    assert f.windowed() == pytest.approx((1.0 * 600 + w1 * 3000) / 3600)
    assert f.whole() == pytest.approx(jain([2 * 1200 + 4 * 2400, 2 * 1200]))


def test_trace_is_seeded_and_offers_the_load() -> None:
    a, b = make_trace(200, 0.95, 3), make_trace(200, 0.95, 3)
    assert a == b
    assert a != make_trace(200, 0.95, 4)
    work = {u: sum(t.work for t in a.tasks if t.user == u) for u in a.scale}
    for w in work.values():
        assert w / (32 / 3 * a.horizon) == pytest.approx(0.95)
    assert all(t.arrival <= a.horizon for t in a.tasks)
    assert [t.arrival for t in a.tasks] == sorted(t.arrival for t in a.tasks)


# -- the simulation ----------------------------------------------------------------------------

def _blocking_trace() -> list[TraceTask]:
    """A 2x8 gang (C) that must wait 1000 s, two 1x4 tasks behind it that fit at once."""
    return [_task(0, "alice", "large", 0, 1000), _task(1, "bob", "small", 1, 1000),
            _task(2, "carol", "large", 2, 100), _task(3, "alice", "medium", 3, 400),
            _task(4, "bob", "medium", 4, 400)]


def test_fifo_makespan_is_longer_than_backfill_on_a_blocking_trace() -> None:
    fifo = _run(_blocking_trace(), "fifo")
    backfill = _run(_blocking_trace(), "backfill")
    assert fifo.makespan_s == pytest.approx(1400)  # D, E only start with C at t=1000
    assert backfill.makespan_s == pytest.approx(1100)  # D, E backfill at 3 and 4
    assert fifo.wait("medium", "max") == pytest.approx(997)
    assert backfill.wait("medium", "max") == 0
    assert fifo.idle_fit_gpu_h * 3600 == pytest.approx(15 * 997)  # w2 7 + w3 8 GPUs free
    assert backfill.idle_fit_gpu_h == 0  # only C waits, and it does not fit


def test_fail_fast_attempt_is_retried_on_the_timer() -> None:
    trace = [_task(0, "alice", "failfast", 0, 600)]
    r = _run(trace, "backfill")  # retry_interval_s 60
    assert r.unfinished == 0
    assert r.wait("failfast", "max") == pytest.approx(FAILFAST_AFTER_S + 60)
    assert r.makespan_s == pytest.approx(FAILFAST_AFTER_S + 60 + 600)


def test_preemption_stops_a_lower_priority_checkpointing_gang_for_a_waiting_one() -> None:
    """Two prio-0 2x8 gangs fill the cluster; a prio-10 1x4 task arrives at 10 s. With
    preemption (grace 300 s) the latest-started gang is stopped (no whole checkpoint
    interval done: all 300 s of its work lost), the 1x4 runs, then the gang starts over."""
    trace = [_task(0, "alice", "large", 0, 7200), _task(1, "bob", "large", 1, 7200),
             TraceTask(task_id("carol", "medium", 2), "carol", CLASSES["medium"], 10, 600, 10)]
    without = _run(trace, "fairshare")
    assert without.preemptions == 0
    assert without.wait("high", "max") == pytest.approx(7200 - 10)
    r = _run(trace, "preempt")
    assert (r.preemptions, r.unfinished, r.hung) == (1, 0, 0)
    waited = r.wait("high", "max")
    assert 300 <= waited <= 300 + 10 + 1  # grace, then the next tick, then a 1 s re-tick
    assert r.lost_gpu_h * 3600 == pytest.approx(16 * (waited + 10 - 1), abs=16 * 11)
    assert r.makespan_s == pytest.approx(10 + waited + 600 + 7200, abs=2)


@pytest.mark.parametrize("policy", [p.name for p in POLICIES])
def test_small_trace_every_policy_finishes_everything(policy: str) -> None:
    trace = make_trace(30, 0.95, 5).tasks
    r = _run(trace, policy)
    assert r.tasks == len(trace) and r.unfinished == 0
    assert r.hung == 0
    assert 0 < r.utilization <= 1
    assert r.ratio >= 1 - 1e-9
    assert sum(len(v) for k, v in r.waits.items() if k != "high") == len(trace)
    assert all(w >= 0 for v in r.waits.values() for w in v)


def _req(task: TraceTask, attempt: int = 1) -> SubmitRequest:
    return SubmitRequest(submission_id=f"{task.task_id}--a{attempt:02d}", entrypoint="x",
                         runtime_env={}, entrypoint_num_cpus=1.0,
                         entrypoint_resources={"worker_node": 1.0},
                         metadata={"argus_task_id": task.task_id,
                                   "argus_attempt": str(attempt)})


def test_sim_cluster_counts_an_unplaceable_gang_as_hung_and_places_it_later() -> None:
    big, other = _task(0, "alice", "large", 0, 100), _task(1, "bob", "large", 0, 50)
    cluster = SimCluster({t.task_id: t for t in (big, other)})
    cluster.clock = T0
    cluster.occupy("w0", GPU=1, CPU=3)
    cluster.occupy("w1", GPU=1, CPU=3)
    cluster.submit(_req(other))
    cluster.submit(_req(big))
    cluster.advance(T0)  # other takes w2+w3 (best fit: the fully free ones), big hangs
    assert cluster.records[_req(other).submission_id].placed_at == T0
    rec = cluster.records[_req(big).submission_id]
    assert rec.hung and rec.placed_at is None
    assert cluster.snapshot([rec.sid]).pending_pg_since == {rec.sid: T0}
    cluster.advance(T0 + 50)  # other ends: big is placed at once, as Ray would
    assert rec.placed_at == T0 + 50
    assert cluster.job_info(rec.sid).status is RayStatus.RUNNING
    cluster.advance(T0 + 150)
    assert cluster.job_info(rec.sid).status is RayStatus.SUCCEEDED
    assert cluster.done == {big.task_id: T0 + 150, other.task_id: T0 + 50}


def test_sim_cluster_stop_keeps_whole_checkpoint_intervals_only() -> None:
    big = _task(0, "alice", "large", 0, 3000)
    cluster = SimCluster({big.task_id: big})
    cluster.clock = T0
    cluster.submit(_req(big))
    cluster.advance(T0)
    cluster.clock = T0 + 1500  # 2.5 checkpoint intervals of 600 s
    cluster.stop(_req(big).submission_id)
    assert cluster.saved[big.task_id] == 1200
    assert cluster.lost_gpu_s == pytest.approx(300 * 16)
    cluster.submit(_req(big, 2))
    cluster.advance(T0 + 1500)
    cluster.advance(T0 + 1500 + 1800)  # what was left after the checkpoint
    assert cluster.done == {big.task_id: T0 + 3300}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_task_declares_a_time_limit_its_run_stays_under(seed: int) -> None:
    """The trace's limits are what users who know their runs would write: above every
    run (with the fail-fast attempt's 30 s), never so tight that the bench's tasks fail."""
    tasks = make_trace(1000, 0.95, seed).tasks
    assert all(t.limit_s is not None and t.limit_s % 60 == 0 for t in tasks)
    assert all(t.duration + FAILFAST_AFTER_S < t.limit_s for t in tasks)
    assert min(t.limit_s / t.duration for t in tasks) > 1.0


def test_the_real_ray_check_runs_the_shipped_plan_on_tasks_with_limits() -> None:
    """``--real`` checks the simulation of the policy Argus ships, on tasks that declare
    limits as the big trace's do (it crashed unseen once the classes gained them): each
    limit covers the run and the stand-in driver's start, and the simulation of the check's
    own trace finishes every task (the Ray half is the bench's, not the unit tier's)."""
    from bench import tracereal

    assert inspect.signature(tracereal.real_check).parameters["policy_name"].default == "plan"
    trace = tracereal.real_trace(1)
    assert len(trace) == 20
    assert all(t.limit_s is not None
               and t.limit_s >= t.duration + tracereal.DRIVER_MARGIN_S for t in trace)
    plan = POLICY_BY_NAME["plan"]
    sim = tracereal._simulate(trace, plan, scheduler_settings(plan), 16.0)
    assert sim.unfinished == 0
    assert sim.makespan_s > max(t.arrival for t in trace) + 16.0


# -- variants ---------------------------------------------------------------------------------

def test_classes_on_smaller_nodes_never_ask_more_than_a_node() -> None:
    from bench.tracegen import classes_for

    small_nodes = classes_for(4)
    assert (small_nodes["large"].nnodes, small_nodes["large"].gpus_per_node) == (2, 4)
    assert small_nodes["medium"].gpus_per_node == 4 and small_nodes["small"].gpus == 1
    assert classes_for(8) == dict(CLASSES)
    trace = make_trace(60, 0.95, 1, gpus=16, classes=small_nodes)
    assert max(t.cls.gpus_per_node for t in trace.tasks) <= 4


def test_shapes_parse_and_bad_ones_are_refused() -> None:
    from bench.bench_trace import parse_args

    args = parse_args(["--shapes", "2x8,4x4", "--seeds", "1,2"])
    assert [(s.nodes, s.gpus_per_node) for s in args.shapes] == [(2, 8), (4, 4)]
    assert args.seed_list == [1, 2]
    with pytest.raises(SystemExit):
        parse_args(["--shapes", "8"])


def made_up_result(**changes: object) -> RunResult:
    """A run's figures, made up for the floors' arithmetic, ``changes`` applied."""
    figures: dict[str, object] = dict(
        policy="x", load=0.95, tasks=3, makespan_s=110.0, lb_s=100.0, lb_term="w",
        utilization=0.9, idle_fit_gpu_h=0.0, waits={"small": [60.0]}, jain=1.0,
        jain_window=1.0, jain_short=1.0, jain_waiting=1.0, all_busy_h=1.0, all_waiting_h=0.0,
        idle_guard_gpu_h=0.0, preemptions=0, hung=0, lost_gpu_h=0.0, tick_ms=[],
        unfinished=0, step_s=10.0, wall_s=1.0)
    return RunResult(**{**figures, **changes})


def test_variant_floors_compare_with_the_best_of_fifo_and_backfill() -> None:
    from dataclasses import replace

    from bench.bench_trace import variant_checks

    fifo = made_up_result(waits={"small": [60.0, 120.0], "large": [600.0, 1200.0]})
    backfill = replace(fifo, utilization=0.92, makespan_s=105.0)
    good = replace(fifo, utilization=0.918, makespan_s=106.0)
    bad = replace(fifo, utilization=0.90, waits={"small": [60.0], "large": [3000.0]})
    ok = [passed for _, passed in variant_checks(
        {"fifo": fifo, "backfill": backfill, "plan": good}, "plan")]
    assert ok == [True, True, True, True]
    ok = [passed for _, passed in variant_checks(
        {"fifo": fifo, "backfill": backfill, "plan": bad}, "plan")]
    assert ok == [False, False, False, False]
    assert variant_checks({"fifo": fifo, "plan": good}, "plan") == []  # no backfill: no verdict


def test_start_estimates_are_a_floor_on_every_variant_that_has_them() -> None:
    from dataclasses import replace

    from bench.bench_trace import variant_checks

    fifo = made_up_result(waits={"small": [60.0, 120.0], "large": [600.0, 1200.0]})
    base = {"fifo": fifo, "backfill": fifo}
    # (wait, actual start - estimate): errors of 10%, 20% and 40% of the wait; the short
    # wait (under 10 min) is left out however far off it was
    close = replace(fifo, estimates=[(1000.0, 100.0), (2000.0, -400.0), (1000.0, 400.0),
                                     (300.0, 300.0)])
    far = replace(close, estimates=[(1000.0, 300.0), (2000.0, -600.0), (1000.0, 400.0)])

    def estimate_floors(plan: RunResult) -> list[tuple[str, bool]]:
        return [(text, ok) for text, ok in variant_checks({**base, "plan": plan}, "plan")
                if text.startswith("estimates")]

    [(text, ok)] = estimate_floors(close)
    assert ok and "20.0%" in text
    [(_, ok)] = estimate_floors(far)
    assert not ok  # median 30%
    assert estimate_floors(fifo) == []  # no estimates (not the plan): no such floor


def test_the_mean_gap_tells_a_steady_loss_from_one_variants_noise() -> None:
    from dataclasses import replace

    from bench.bench_trace import mean_gap

    fifo = made_up_result(waits={"small": [60.0]})
    backfill = replace(fifo, utilization=0.92, makespan_s=105.0)
    summary = []
    # the judged policy is 1 point under the best on one variant, 1 over on the other
    for util, makespan in ((0.91, 107.0), (0.93, 103.0)):
        plan = replace(fifo, utilization=util, makespan_s=makespan)
        summary.append(("v", {"fifo": fifo, "backfill": backfill, "plan": plan}))
    gap = mean_gap(summary, "plan")
    assert gap is not None and gap.variants == 2
    assert gap.util == pytest.approx(0.0) and gap.ratio == pytest.approx(0.0)
    assert gap.util_se == pytest.approx(0.01) and gap.ratio_se == pytest.approx(0.02)
    assert gap.jain is None  # fairshare did not run: no Jain floor to tell
    fair = replace(fifo, jain_window=0.85)
    with_fair = [(label, {**results, "fairshare": fair,
                          "plan": replace(results["plan"], jain_window=jain)})
                 for (label, results), jain in zip(summary, (0.80, 0.86), strict=True)]
    gap = mean_gap(with_fair, "plan")
    assert gap is not None and gap.jain == pytest.approx(-0.02)
    assert gap.jain_se == pytest.approx(0.03)
    assert mean_gap(summary[:1], "plan") is None  # one variant: no spread to tell
    assert mean_gap([("v", {"fifo": fifo, "plan": fifo})], "plan") is None  # no backfill


def test_variant_floors_add_jain_and_the_smallest_tenants_wait() -> None:
    from dataclasses import replace

    from bench.bench_trace import variant_checks

    fifo = made_up_result(load=0.9, tasks=4, waits={"small": [60.0], "large": [600.0]},
                          jain_window=0.8,
                          user_waits={"vca": [1000.0, 3000.0], "vcb": [60.0]})
    fair = replace(fifo, jain_window=0.85)
    protects = replace(fifo, jain_window=0.86, user_waits={"vca": [100.0, 300.0], "vcb": []})
    neglects = replace(fifo, jain_window=0.84, user_waits={"vca": [500.0, 500.0], "vcb": []})
    results = {"fifo": fifo, "backfill": fifo, "fairshare": fair}
    checks = variant_checks({**results, "plan": protects}, "plan", smallest="vca")
    assert [ok for _, ok in checks[-2:]] == [True, True]  # 200 s <= 2000 s / 5
    checks = variant_checks({**results, "plan": neglects}, "plan", smallest="vca")
    assert [ok for _, ok in checks[-2:]] == [False, False]  # 500 s > 400 s
    assert len(variant_checks(results, "fairshare")) == 4  # no Jain floor against itself


# -- the replayed real trace (bench/tracereplay.py) -----------------------------------------

def test_replay_window_is_the_published_one() -> None:
    from bench.tracereplay import read_jobs

    jobs = read_jobs()
    assert len(jobs) == 1000 and jobs[0].arrival_s == 0
    arrivals = [j.arrival_s for j in jobs]
    assert arrivals == sorted(arrivals)
    assert {j.gpus for j in jobs} <= {1, 2, 4, 8, 16} and all(j.duration_s > 0 for j in jobs)
    assert len({j.tenant for j in jobs}) == 3


@pytest.mark.parametrize("gpus_per_node", [8, 4])
def test_replay_keeps_sizes_and_durations_and_offers_the_load(gpus_per_node: int) -> None:
    from bench.tracereplay import Job, make_replay, smallest_tenant

    jobs = [Job(0, 1, 600, "aa"), Job(100, 16, 3600, "bb"), Job(300, 4, 1200, "aa"),
            Job(400, 8, 60, "cc")]
    trace = make_replay(0.5, gpus=32, gpus_per_node=gpus_per_node, jobs=jobs)
    shapes = [(t.cls.name, t.cls.nnodes * t.cls.gpus_per_node) for t in trace.tasks]
    assert shapes == [("small", 1), ("large", 16), ("medium", 4),
                      ("medium" if gpus_per_node == 8 else "large", 8)]
    assert max(t.cls.gpus_per_node for t in trace.tasks) <= gpus_per_node
    assert [t.duration for t in trace.tasks] == [600, 3600, 1200, 60]
    work = sum(t.work for t in trace.tasks)
    assert math.isclose(work / (32 * trace.horizon), 0.5)  # exactly the load
    factor = trace.horizon / 400
    assert [t.arrival for t in trace.tasks] == pytest.approx([0, 100 * factor, 300 * factor,
                                                              400 * factor])
    assert all(t.limit_s is None and t.priority == 0 for t in trace.tasks)
    assert smallest_tenant(trace) == "vccc"  # 8 x 60 GPU-s
    with pytest.raises(ValueError):
        make_replay(0.0, jobs=jobs)


def test_trace_flag_picks_the_replay() -> None:
    from bench.bench_trace import parse_args

    args = parse_args(["--trace", "philly", "--seeds", "1,2"])
    assert args.trace == "philly" and args.seed_list == [1]  # one window, no seeds
    assert parse_args([]).trace == "synthetic"
    with pytest.raises(SystemExit):
        parse_args(["--trace", "alibaba"])


def test_a_short_replay_finishes_every_task() -> None:
    from bench.tracereplay import make_replay, read_jobs

    trace = make_replay(0.9, jobs=read_jobs()[:40])
    r = _run(trace.tasks, "plan", limits=False)
    assert r.unfinished == 0 and r.hung == 0
    assert sum(len(w) for w in r.user_waits.values()) == 40


def test_policy_names_take_reservations_and_setting_overrides() -> None:
    from bench.bench_trace import policy_named

    assert policy_named("plan") is not None and policy_named("plan").name == "plan"
    eight = policy_named("plan:8")
    assert eight is not None and eight.overrides["reservations"] == 8
    tuned = policy_named("plan:2+starvation_guard_s=1800+fair_share_half_life_s=null")
    assert tuned is not None
    assert tuned.overrides["reservations"] == 2
    assert tuned.overrides["starvation_guard_s"] == 1800
    assert tuned.overrides["fair_share_half_life_s"] is None
    assert tuned.overrides["fair_share"] is True  # the base policy's own settings stay
    assert policy_named("backfill+backfill=false").overrides["backfill"] is False
    for bad in ("plan:0", "plan:x", "fifo:3", "nope", "plan+no_such_setting=1",
                "plan+reservations", "plan+starvation_guard_s=-1", "plan+backfill=maybe"):
        assert policy_named(bad) is None, bad
