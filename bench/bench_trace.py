"""Scheduling quality on a seeded synthetic trace, in simulated time (issue 9).

The real ``Scheduler`` and ``Store`` (SQLite in /dev/shm) with a simulated 4 x 8-GPU cluster
(``bench/tracesim.py``) run ~1,000 tasks of three users (``bench/tracegen.py``: small 1x1,
medium 1x4, large 2x8 checkpointing, fail-fast 1x4) at offered loads 0.7 and 0.95, once
per policy:

* ``fifo``: FIFO without backfill (``starvation_guard_s: 0``), retries on the 60 s timer;
* ``backfill``: today's FIFO + backfill + starvation guard (300 s), 60 s retry timer;
* ``priority``: + the trace's priorities (10% of tasks at 10), retry as soon as it fits;
* ``fairshare``: + fair share (DRF among equal priorities);
* ``preempt``: + preemption of checkpointing tasks (grace 300 s);
* ``plan``: fair share + 8 reservations from the time limits and start estimates for
  the rest (``reservations: 8``, the shipped configuration); ``plan:N`` the same with N.

Per load, one table with
the policies side by side; then the floors of issue 9 at load 0.95, judged for
``plan`` (the shipped configuration) with ``fairshare`` and ``preempt`` for reference; with several
seeds or shapes, the floors of issue 21 on every variant; then ticks with 10k runnable
tasks. ``--trace philly`` replays a window of a real GPU trace instead
(``bench/tracereplay.py``).

Metrics: makespan (first arrival -> last end) over a lower bound, the largest of: total
GPU-time / 32, the longest task, max(arrival + duration), and max over t of (t + work
arriving at or after t / 32) (the binding term is printed); mean GPU utilization over the
makespan; GPU-hours left free while some runnable task (not in a retry backoff) would
have fit them (free GPUs x time, checked after every tick), and the part of those while a
task held the starvation guard; wait = arrival -> the first time the task held its gang
(a fail-fast attempt never holds it, so its retry delay counts as waiting), mean and p95
per class and for priority-10 tasks; Jain's index of the GPU-seconds each user held while
all three users had work (runnable or running), over the whole run (with equal offered
loads and every task finished this is ~1 for any policy) and as the time-weighted mean
over 4-h and 1-h windows, and over 4-h windows while every user had a task waiting;
preemptions = attempts ended PREEMPTED, and the GPU-hours of work they threw away (a
checkpointing task keeps whole 10-min intervals); hung = attempts whose gang could not be
placed when their driver started; scheduler CPU per tick (thread time around ``tick``).

Every task declares a time limit (``max_runtime_s``, see ``bench/tracegen.py``), which
lets a task that surely ends before the guard's kept nodes drain run there;
``--no-limits`` submits the same trace without them.

``--real`` adds a small check of the simulation on real Ray (``bench/tracereal.py``).
``--check`` exits 1 when a floor fails or could not be measured.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_trace.py [--quick] [--tasks N] [--seed S]
        [--loads 0.7,0.95] [--policies fifo,...] [--step 10] [--no-limits] [--real]
        [--check]
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hostinfo import host_line
from bench.tracegen import (
    CLASS_ORDER,
    Trace,
    classes_for,
    lower_bound,
    make_trace,
    percentile,
)
from bench.tracereplay import make_replay, smallest_tenant
from bench.tracesim import (
    POLICY_BY_NAME,
    T0,
    Policy,
    RunResult,
    Shape,
    scheduler_settings,
    shm_dir,
    simulate,
)
from service.cluster.fake import FakeCluster
from service.config import ConfigError, SchedulerSettings, Settings
from service.config_load import settings_from_mapping
from service.domain.newtask import NewTask
from service.domain.states import TaskState
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.jobspec.model import JobSpec
from service.store.checkpointer import Checkpointer
from service.store.writer import BulkTask, Store

FLOOR_LOAD = 0.95
# The floors are judged for the shipped configuration (the plan: fair share and 8
# reservations, preemption off); the guard alone (fairshare) and preemption for reference.
FLOOR_POLICIES = ("plan", "fairshare", "preempt")
JUDGED_POLICY = "plan"
TICK_FLOOR_MS = 20.0
COL = 11

Row = tuple[str, Callable[[RunResult], str]]


# -- the table ------------------------------------------------------------------------------

def _num(x: float, fmt: str = ".2f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _mins(r: RunResult, cls: str) -> str:
    return f"{_num(r.wait(cls, 'mean') / 60, '.0f')}/{_num(r.wait(cls, 'p95') / 60, '.0f')}"


# the estimates' floor: over tasks that waited this long, the median of |actual start - first
# estimate| / wait at most this (issue 21; judged on every variant, not seed 1's alone)
ESTIMATE_WAITED_S = 600.0
ESTIMATE_FLOOR = 0.25


def estimate_error(r: RunResult) -> tuple[float, float, float, int] | None:
    """Over tasks the plan estimated that waited >= 10 min: the median and p90 of
    |actual start - first planned start| / actual wait, the share that started later than
    planned, and how many; None without estimates."""
    waited = [(wait, err) for wait, err in r.estimates if wait >= ESTIMATE_WAITED_S]
    if not waited:
        return None
    rel = sorted(abs(err) / wait for wait, err in waited)
    late = sum(1 for _, err in waited if err > 0) / len(waited)
    return percentile(rel, 50), percentile(rel, 90), late, len(waited)


def _estimate_cell(r: RunResult) -> str:
    e = estimate_error(r)
    return "-" if e is None else f"{e[0] * 100:.0f}/{e[1] * 100:.0f}/{e[2] * 100:.0f}%"


def _user_cell(r: RunResult) -> str:
    return "/".join(_num(statistics.fmean(w) / 60 if w else math.nan, ".0f")
                    for _, w in sorted(r.user_waits.items()))


def rows() -> list[Row]:
    out: list[Row] = [
        ("makespan / LB", lambda r: _num(r.ratio, ".3f")),
        ("makespan (h)", lambda r: _num(r.makespan_s / 3600, ".1f")),
        ("mean GPU utilization", lambda r: _num(r.utilization, ".3f")),
        ("GPU-h idle while a task fit", lambda r: _num(r.idle_fit_gpu_h, ".1f")),
        ("  of which a guard held them", lambda r: _num(r.idle_guard_gpu_h, ".1f")),
    ]
    out += [(f"wait {c} mean/p95 (min)", lambda r, c=c: _mins(r, c)) for c in CLASS_ORDER]
    out += [
        ("wait prio-10 mean/p95 (min)", lambda r: _mins(r, "high")),
        ("largest large-gang wait (min)", lambda r: _num(r.wait("large", "max") / 60, ".0f")),
        ("wait per user mean (min)", _user_cell),
        ("Jain, whole run, all have work", lambda r: _num(r.jain, ".3f")),
        ("Jain, 4-h windows, all have work", lambda r: _num(r.jain_window, ".3f")),
        ("Jain, 1-h windows, all have work", lambda r: _num(r.jain_short, ".3f")),
        ("Jain, 4-h windows, all wait", lambda r: _num(r.jain_waiting, ".3f")),
        ("  hours all have work / wait",
         lambda r: f"{_num(r.all_busy_h, '.1f')}/{_num(r.all_waiting_h, '.1f')}"),
        ("preemptions", lambda r: str(r.preemptions)),
        ("GPU-h lost to stops", lambda r: _num(r.lost_gpu_h, ".1f")),
        ("start estimate error med/p90/late", _estimate_cell),
        ("hung attempts", lambda r: str(r.hung)),
        ("tasks not SUCCEEDED", lambda r: str(r.unfinished)),
        ("tick CPU mean/max (ms)",
         lambda r: f"{_num(statistics.fmean(r.tick_ms), '.2f')}/{_num(max(r.tick_ms), '.1f')}"),
        ("ticks", lambda r: str(len(r.tick_ms))),
        ("sim wall (s)", lambda r: _num(r.wall_s, ".1f")),
    ]
    return out


def print_table(load: float, trace_desc: str, results: dict[str, RunResult]) -> None:
    print(f"\n== load {load}: {trace_desc}")
    names = list(results)
    print(f"{'':32}" + "".join(f"{n:>{COL}}" for n in names))
    for label, cell in rows():
        print(f"{label:32}" + "".join(f"{cell(results[n]):>{COL}}" for n in names))


DEFAULT_SHAPE = Shape()


def describe(trace: Trace, step_s: float, shape: Shape = DEFAULT_SHAPE,
             replay: bool = False) -> str:
    counts = Counter(t.cls.name for t in trace.tasks)
    users = Counter(t.user for t in trace.tasks)
    lb = lower_bound(trace.tasks, shape.gpus)
    terms = ", ".join(f"{k} {v / 3600:.1f} h" for k, v in lb.terms.items())
    scale = ", ".join(f"{u} x{f:.2f}" for u, f in sorted(trace.scale.items()))
    how = (f"real durations, inter-arrival times x{next(iter(trace.scale.values())):.2f} "
           f"to offer exactly {trace.load} x {shape.gpus} GPUs, no time limits, "
           "no priorities" if replay else
           f"durations scaled per user to offer exactly {trace.load} x {shape.gpus} GPUs "
           f"({scale})")
    return (f"{len(trace.tasks)} tasks "
            f"({', '.join(f'{c} {counts[c]}' for c in CLASS_ORDER)}; "
            f"{', '.join(f'{u} {n}' for u, n in sorted(users.items()))}) arriving over "
            f"{trace.horizon / 3600:.1f} h, {how}, "
            f"{shape.nodes} workers x {shape.gpus_per_node} GPUs\n"
            f"   LB {lb.value / 3600:.2f} h, binding: {lb.term} [{terms}]\n"
            f"   tick at every arrival and job end, and every {step_s:g} s of simulated "
            f"time while a task waits")


# -- floors ---------------------------------------------------------------------------------

def floor_checks(results: dict[str, RunResult]) -> list[tuple[str, str, float | None,
                                                              bool | None]]:
    """(floor, policy, value, passed) at load 0.95; passed None: not measured (the policy,
    or FIFO for the wait floor, was left out with --policies). Jain's index over 4-h
    windows is this bench's own stricter measure, shown with the floors, not one of them."""
    fifo = results.get("fifo")
    fifo_p95 = fifo.wait("large", "p95") if fifo is not None else None
    out = []
    for name in FLOOR_POLICIES:
        r = results.get(name)
        if r is None:
            for floor in ("utilization >= 0.90", "makespan <= 1.10 x LB",
                          "Jain >= 0.95 (whole run)", "p95 large wait <= 2 x FIFO's",
                          "0 hung attempts"):
                out.append((floor, name, None, None))
            continue
        p95 = r.wait("large", "p95")
        out += [
            ("utilization >= 0.90", name, r.utilization, r.utilization >= 0.90),
            ("makespan <= 1.10 x LB", name, r.ratio, r.ratio <= 1.10),
            ("Jain >= 0.95 (whole run)", name, r.jain, r.jain >= 0.95),
            ("p95 large wait <= 2 x FIFO's", name,
             p95 / fifo_p95 if fifo_p95 else None,
             None if not fifo_p95 else p95 <= 2 * fifo_p95),
            ("0 hung attempts", name, float(r.hung), r.hung == 0),
        ]
    return out


def print_floors(checks: list[tuple[str, str, float | None, bool | None]],
                 results: dict[str, RunResult]) -> bool:
    """Print the floors; whether every one of the judged policy passed."""
    print(f"\n== floors at load {FLOOR_LOAD} (judged: {JUDGED_POLICY}, the shipped "
          "configuration; others for reference)")
    ok = True
    for floor, name, value, passed in checks:
        verdict = "NOT MEASURED" if passed is None else ("PASS" if passed else "FAIL")
        if name == JUDGED_POLICY:
            ok = ok and bool(passed)
        else:
            verdict += " (reference)"
        shown = "" if value is None else f"{value:.3f}"
        print(f"  {floor:32} {name:10} {shown:>8}  {verdict}")
    for name in FLOOR_POLICIES:
        if name in results:
            print(f"  {'(stricter) Jain, 4-h windows':32} {name:10} "
                  f"{results[name].jain_window:8.3f}  not a floor")
    return ok


# -- one tick with 10k runnable tasks -------------------------------------------------------

def _bulk(n: int, users: Sequence[str]) -> list[BulkTask]:
    shapes = ((1, 4), (2, 4), (1, 8), (2, 8))
    known = {f.name for f in fields(BulkTask)}
    out = []
    for i in range(n):
        nnodes, g = shapes[i % len(shapes)]
        extra: dict[str, float] = {"priority": 10 if i % 10 == 0 else 0} \
            if "priority" in known else {}
        if "max_runtime_s" in known:  # every one ends before the kept nodes drain
            extra["max_runtime_s"] = 3600.0
        out.append(BulkTask(task_id=f"mvp2-ppo-20251223-{i // 65536:06d}-{i % 65536:04x}",
                            workload="ppo", state=TaskState.QUEUED, created_at=T0 + i * 0.01,
                            nnodes=nnodes, n_gpus_per_node=g, user=users[i % len(users)],
                            **extra))
    return out


def _running(store: Store, root: Path, users: Sequence[str]) -> list[str]:
    """Six 1x4 tasks (two per user, 1-day time limits) created before the queue: they
    will run."""
    ids = []
    for i in range(6):
        tid = f"mvp2-{users[i % 3]}-ppo-20251223-000000-{i:04x}"
        spec = JobSpec(workload="ppo", code_path=f"{root}/verl", model_id="org/model",
                       train_file=f"{root}/t.parquet", val_file=f"{root}/v.parquet",
                       nnodes=1, n_gpus_per_node=4).to_dict()
        store.tasks.create_task(NewTask(
            id_prefix="mvp2", workload="ppo", text="", spec=spec, nnodes=1, n_gpus_per_node=4,
            user=users[i % 3], created_at=T0 - 100, priority=0, max_runtime_s=86400.0),
            task_id=tid)
        ids.append(tid)
    return ids


@dataclass
class TickTimes:
    examined: int
    wall_ms: list[float]  # report.duration_s: the first tick, then the others
    # thread CPU time of the same ticks: immune to other processes taking turns on the
    # core, not to a tenant running on its sibling hyperthread (``pace_ms`` shows that)
    cpu_ms: list[float]
    pace_ms: list[float]  # ``_pace`` just before each tick

    def pace(self) -> str:
        """The fixed loop's CPU ms beside the ticks: the fastest, the median and the one
        just before the slowest tick (the same loop, so a slower figure is a busier host)."""
        slowest = max(range(len(self.cpu_ms)), key=self.cpu_ms.__getitem__)
        return (f"a fixed loop took fastest {min(self.pace_ms):.2f} ms, median "
                f"{statistics.median(self.pace_ms):.2f}, before the slowest tick "
                f"{self.pace_ms[slowest]:.2f}")

    def stats(self, values: list[float]) -> str:
        rest = sorted(values[1:])
        p99 = rest[min(len(rest) - 1, int(len(rest) * 0.99))]
        return (f"first {values[0]:6.1f}  median {statistics.median(rest):6.1f}  "
                f"p99 {p99:6.1f}  max {max(rest):6.1f}")

    @property
    def worst_cpu(self) -> float:
        return max(self.cpu_ms)


PACE_LOOP = 20_000  # about 1 ms of CPU on the 2-core VM when no tenant shares its core


def _pace() -> float:
    """CPU ms of a fixed pure-Python loop: how fast this host runs Python just now. Thread
    CPU time still grows when another tenant shares the core (its hyperthread, its
    caches): on the 2-core VM the same plan took 8 ms and 15 ms a few seconds apart."""
    started = time.thread_time()
    total = 0
    for i in range(PACE_LOOP):
        total += i * i
    return (time.thread_time() - started) * 1000


def _timed(sched: Scheduler, now: float) -> tuple[float, float, int]:
    started = time.thread_time()
    report = sched.tick(now)
    return report.duration_s * 1000, (time.thread_time() - started) * 1000, report.pending


def tick_10k(settings: SchedulerSettings, n: int = 10_000, ticks: int = 50) -> TickTimes:
    """Ticks with ``n`` runnable tasks of three users, six running, nothing else fits
    (the first tick moves every examined task QUEUED -> PENDING_RESOURCES). The worst
    case admission knows: every task is past the starvation guard (its holder keeps two
    nodes that only Argus tasks with time limits use) and has a time limit that ends
    before they drain, so each shape is also tried on the kept nodes."""
    users = ("alice", "bob", "carol")
    with tempfile.TemporaryDirectory(prefix="argus-trace-tick-", dir=shm_dir()) as tmp:
        root = Path(tmp)
        store = Store(str(root / "tick.sqlite3"))
        cluster = FakeCluster(clock=T0)
        cluster.add_node("head", gpus=0, cpus=0, worker_slots=0)
        for w in range(4):
            cluster.add_node(f"w{w}", gpus=8, cpus=64)
        sched = Scheduler(store, cluster, Settings(shared_root=tmp, scheduler=settings),
                          Artifacts(tmp))
        running = _running(store, root, users)
        sched.tick(T0 - 99)
        for i, tid in enumerate(running):
            cluster.start(f"{tid}--a01", {f"w{i // 2}": 4})
        cluster.occupy("w3", GPU=8, CPU=24)  # another user's job: no GPU left free
        store.tasks.bulk_load(_bulk(n, users))
        now = T0 + n * 0.01 + settings.starvation_guard_s + 1
        checkpointer = Checkpointer(store)  # the WAL copied on its own thread, as served
        checkpointer.start()
        gc.freeze()  # as the service after its startup (service.main)
        measured, paces = [], []
        for i in range(ticks + 1):
            paces.append(_pace())
            measured.append(_timed(sched, now + i))
        checkpointer.stop()
        gc.unfreeze()
        store.close()
    return TickTimes(measured[0][2] if measured else 0, [m[0] for m in measured],
                     [m[1] for m in measured], paces)


def print_tick(n: int) -> bool:
    """The shipped plan's tick (judged) next to fair share's and backfill's (reference)."""
    print(f"\n== one tick with {n} runnable tasks (3 users, 6 running 1x4 and another "
          "submitter's 1x8 on 4 x 8 GPUs: nothing fits; every task past the guard, with a "
          "time limit), first tick + 50 more, ms")
    ok = True
    for name, judged in (("plan", True), ("fairshare", False), ("backfill", False)):
        r = tick_10k(scheduler_settings(POLICY_BY_NAME[name]), n)
        print(f"  {name:9} examined {r.examined:5}  CPU  {r.stats(r.cpu_ms)}")
        print(f"  {'':9} {'':14}  wall {r.stats(r.wall_ms)}")
        print(f"  {'':9} {'':14}  host {r.pace()}")
        if judged:
            passed = r.worst_cpu <= TICK_FLOOR_MS
            ok = ok and passed
            print(f"  floor: every {name} tick, the first included, <= {TICK_FLOOR_MS:.0f} ms "
                  f"of CPU (slowest {r.worst_cpu:.1f} ms): {'PASS' if passed else 'FAIL'}")
    return ok


# -- main -----------------------------------------------------------------------------------

def run_load(load: float, args: argparse.Namespace, policies: Sequence[Policy],
             seed: int | None = None, shape: Shape | None = None) -> dict[str, RunResult]:
    seed = args.seed if seed is None else seed
    shape = shape or args.shapes[0]
    replay = args.trace == "philly"
    trace = (make_replay(load, gpus=shape.gpus, gpus_per_node=shape.gpus_per_node) if replay
             else make_trace(args.tasks, load, seed, gpus=shape.gpus,
                             classes=classes_for(shape.gpus_per_node)))
    results: dict[str, RunResult] = {}
    for p in policies:
        results[p.name] = simulate(trace.tasks, p, step_s=args.step, load=load,
                                   limits=not args.no_limits, shape=shape)
    title = "Philly window" if replay else f"seed {seed}"
    print_table(load, f"{title}, " + describe(trace, args.step, shape, replay), results)
    if replay:
        args.smallest = smallest_tenant(trace)
    return results


# -- variants: the floors of scheduling on real workloads, judged on every one -------------

VARIANT_BASE = ("fifo", "backfill")  # the floors compare with the best of these


def best_of_base(results: dict[str, RunResult]) -> tuple[float, float] | None:
    """The best utilization and makespan / LB of fifo and backfill (what the variant
    floors compare with); None unless both ran."""
    base = [results[n] for n in VARIANT_BASE if n in results]
    if len(base) < len(VARIANT_BASE):
        return None
    return max(b.utilization for b in base), min(b.ratio for b in base)


def jain_reference(results: dict[str, RunResult], judged: str) -> RunResult | None:
    """The run the Jain floor compares ``judged`` with: ``fairshare``'s, when it ran and is
    not the one judged."""
    return results.get("fairshare") if judged != "fairshare" else None


def variant_checks(results: dict[str, RunResult], judged: str,
                   smallest: str | None = None) -> list[tuple[str, bool]]:
    """(floor, passed) of ``judged`` against FIFO and backfill on one variant; with
    ``fairshare`` run too, its Jain over 4-h windows is a floor, with start estimates
    (the plan's) their median error is one, and with ``smallest`` (a replayed trace's
    smallest tenant) that tenant's mean wait <= 1/5 of FIFO's."""
    r, best = results.get(judged), best_of_base(results)
    if r is None or best is None:
        return []
    fifo = results["fifo"]
    best_util, best_ratio = best
    worst_fifo = max(fifo.wait(c, "max") for c in CLASS_ORDER if fifo.waits.get(c))
    worst = max(r.wait(c, "max") for c in CLASS_ORDER if r.waits.get(c))
    large_p95, fifo_large_p95 = r.wait("large", "p95"), fifo.wait("large", "p95")
    out = [
        (f"util {r.utilization:.3f} >= best {best_util:.3f} - 0.005",
         r.utilization >= best_util - 0.005),
        (f"makespan {r.ratio:.3f} <= best {best_ratio:.3f} + 0.01",
         r.ratio <= best_ratio + 0.01),
        (f"large p95 {large_p95 / 60:.0f} <= 1.5 x FIFO {fifo_large_p95 / 60:.0f} min",
         large_p95 <= 1.5 * fifo_large_p95),
        (f"worst wait {worst / 60:.0f} <= 2 x FIFO {worst_fifo / 60:.0f} min",
         worst <= 2 * worst_fifo),
    ]
    fair = jain_reference(results, judged)
    if fair is not None:
        out.append((f"Jain4h {r.jain_window:.3f} >= fairshare {fair.jain_window:.3f}",
                    r.jain_window >= fair.jain_window - 1e-9))
    estimates = estimate_error(r)
    if estimates is not None:
        out.append((f"estimates median {estimates[0] * 100:.1f}% <= "
                     f"{ESTIMATE_FLOOR * 100:.0f}% of the wait", estimates[0] <= ESTIMATE_FLOOR))
    if smallest is not None:
        mine, theirs = (statistics.fmean(x.user_waits[smallest] or [math.nan])
                        for x in (r, fifo))
        out.append((f"{smallest} mean wait {mine / 60:.0f} <= FIFO {theirs / 60:.0f} / 5 min",
                    mine <= theirs / 5))
    return out


@dataclass(frozen=True, slots=True)
class Gap:
    """A judged policy's mean distance to the best of fifo and backfill over variants."""

    variants: int
    util: float  # mean of (utilization - best utilization)
    util_se: float  # its standard error
    ratio: float  # mean of (makespan / LB - best makespan / LB)
    ratio_se: float
    # mean of (Jain over 4-h windows - fairshare's) and its standard error; None without
    # fairshare on two variants or more
    jain: float | None = None
    jain_se: float | None = None


def mean_gap(summary: Sequence[tuple[str, dict[str, RunResult]]], judged: str) -> Gap | None:
    """``judged``'s utilization and makespan against the best of fifo and backfill, as a
    mean over the variants with its standard error (None under two variants).

    One variant's floor compares a schedule with the better of two others: a policy the
    same as ``backfill`` on average but not decision for decision falls below the better
    by a point or two on many variants, and fails there (docs/benchmarks.md, issue 21,
    the noise of a floor). The mean over the variants tells a systematic loss from that
    noise. So for the Jain floor (with ``fairshare`` run): one trace's windowed index
    averages a few 4-h windows whose own indexes spread by ~0.1, and ``backfill``, which
    ignores fair share, holds that floor on about half the variants."""
    util, ratio, jain = [], [], []
    for _, results in summary:
        r, best = results.get(judged), best_of_base(results)
        if r is None or best is None:
            continue
        util.append(r.utilization - best[0])
        ratio.append(r.ratio - best[1])
        fair = jain_reference(results, judged)
        if fair is not None:
            jain.append(r.jain_window - fair.jain_window)
    if len(util) < 2:
        return None
    j, j_se = (statistics.fmean(jain), _se(jain)) if len(jain) >= 2 else (None, None)
    return Gap(len(util), statistics.fmean(util), _se(util), statistics.fmean(ratio), _se(ratio),
               j, j_se)


def _se(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) / math.sqrt(len(xs))


def print_variants(summary: list[tuple[str, dict[str, RunResult]]], judged: Sequence[str],
                   smallest: str | None = None) -> None:
    """One line per variant and judged policy: each floor PASS/FAIL with its numbers."""
    if not summary:
        return
    print("\n== floors on every variant (against the best of fifo and backfill)")
    passed = dict.fromkeys(judged, 0)
    total = dict.fromkeys(judged, 0)
    for label, results in summary:
        for name in judged:
            checks = variant_checks(results, name, smallest)
            if not checks:
                continue
            total[name] += len(checks)
            passed[name] += sum(ok for _, ok in checks)
            cells = "; ".join(f"{text} {'PASS' if ok else 'FAIL'}" for text, ok in checks)
            print(f"  {label:24} {name:10} {cells}")
    for name in judged:
        if total[name]:
            print(f"  {name}: {passed[name]} of {total[name]} floors pass")
        gap = mean_gap(summary, name)
        if gap is not None:
            print(f"  {name}: over {gap.variants} variants, utilization - best "
                  f"{gap.util * 100:+.2f} (+- {gap.util_se * 100:.2f}) points, makespan - best "
                  f"{gap.ratio * 100:+.2f} (+- {gap.ratio_se * 100:.2f}) % of LB"
                  + ("" if gap.jain is None or gap.jain_se is None else
                     f", Jain 4h - fairshare's {gap.jain * 100:+.2f} (+- "
                     f"{gap.jain_se * 100:.2f}) points")
                  + " (mean, +- its standard error)")


def policy_named(name: str) -> Policy | None:
    """A policy of ``tracesim``; ``plan:N``: ``plan`` with N reservations; and any of them
    with settings overridden after ``+``, e.g. ``plan:8+starvation_guard_s=1800`` (to
    choose settings by measurement; each value written as in the YAML config, checked as
    the config is). None for an unknown name, setting or value."""
    head, *sets = name.split("+")
    base, _, n = head.partition(":")
    policy = POLICY_BY_NAME.get(base)
    if policy is None or (n and (base != "plan" or not n.isdigit() or int(n) < 1)):
        return None
    if name == base:
        return policy
    overrides = dict(policy.overrides)
    if n:
        overrides["reservations"] = int(n)
    for item in sets:
        key, eq, text = item.partition("=")
        if not eq:
            return None
        overrides[key] = yaml.safe_load(text)
    try:
        settings_from_mapping({"v2": {"scheduler": overrides}})
    except ConfigError:
        return None
    return replace(policy, name=name, label=f"{policy.label} ({name.partition(':')[2] or name})",
                   overrides=overrides)


def parse_shape(text: str) -> Shape:
    nodes, _, gpus = text.partition("x")
    if not (nodes.isdigit() and gpus.isdigit()) or int(nodes) < 2 or int(gpus) < 1:
        raise argparse.ArgumentTypeError(f"a shape is WORKERSxGPUS (e.g. 4x8), got {text!r}")
    g = int(gpus)
    return Shape(int(nodes), g, 12 * g)  # CPUs never bind: 3 per GPU + drivers


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=1000, help="tasks per trace (about)")
    p.add_argument("--quick", action="store_true", help="300 tasks, fewer runnable in the "
                   "tick measurement")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seeds", default=None,
                   help="several seeds, e.g. 1,2,3,4,5,6 (each a table; floors per variant)")
    p.add_argument("--shapes", default="4x8",
                   help="clusters, WORKERSxGPUS, e.g. 2x8,4x8,8x8,4x4 (large gang: 2 nodes)")
    p.add_argument("--judge", default="fairshare,plan",
                   help="policies judged against fifo/backfill on every variant")
    p.add_argument("--loads", default="0.7,0.95")
    p.add_argument("--policies", default=",".join(POLICY_BY_NAME))
    p.add_argument("--trace", choices=("synthetic", "philly"), default="synthetic",
                   help="philly: replay a 1,000-job window of Microsoft's Philly trace "
                   "(bench/data/README.md) instead of the synthetic trace (--seeds, --tasks "
                   "unused)")
    p.add_argument("--step", type=float, default=10.0,
                   help="simulated seconds between ticks while a task waits")
    p.add_argument("--tick-runnable", type=int, default=10_000)
    p.add_argument("--no-limits", action="store_true",
                   help="the tasks declare no max_runtime_s (nothing may use kept nodes)")
    p.add_argument("--real", action="store_true", help="also the small real-Ray check")
    p.add_argument("--check", action="store_true", help="exit 1 when a floor fails or "
                   "could not be measured")
    args = p.parse_args(argv)
    unknown = {n for n in args.policies.split(",") if policy_named(n) is None}
    if unknown:
        p.error(f"unknown policies {sorted(unknown)}; known: {', '.join(POLICY_BY_NAME)}, "
                "plan:N (N reservations), and any of them +SETTING=VALUE (a scheduler "
                "setting overridden)")
    if args.quick:
        args.tasks = min(args.tasks, 300)
    try:
        args.shapes = [parse_shape(x) for x in args.shapes.split(",")]
    except argparse.ArgumentTypeError as exc:
        p.error(str(exc))
    args.seed_list = ([int(x) for x in args.seeds.split(",")] if args.seeds
                      else [args.seed])
    if args.trace == "philly":
        args.seed_list = args.seed_list[:1]
    args.smallest = None  # a replay's smallest tenant, set when it is built
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(host_line(), flush=True)
    started = time.perf_counter()
    policies = [p for p in map(policy_named, args.policies.split(",")) if p is not None]
    loads = [float(x) for x in args.loads.split(",")]
    ok = True
    summary: list[tuple[str, dict[str, RunResult]]] = []
    variants = len(args.seed_list) * len(args.shapes) > 1
    for shape in args.shapes:
        for seed in args.seed_list:
            for load in loads:
                results = run_load(load, args, policies, seed, shape)
                where = "philly" if args.trace == "philly" else f"s{seed}"
                summary.append((f"{shape.nodes}x{shape.gpus_per_node} {where} L{load}",
                                results))
                if math.isclose(load, FLOOR_LOAD) and not variants and args.trace != "philly":
                    ok = print_floors(floor_checks(results), results) and ok
    print_variants(summary, [n for n in args.judge.split(",") if n in args.policies.split(",")],
                   args.smallest)
    ok = print_tick(args.tick_runnable) and ok
    if args.real:
        from bench.tracereal import real_check

        ok = real_check(args.seed) and ok
    print(f"\nbench wall time {time.perf_counter() - started:.0f} s")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
