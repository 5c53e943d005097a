"""A small real-Ray check of the simulation (``bench_trace.py --real``).

A local Ray cluster with fake GPUs (``tests/integration/localray.py``: a 0-CPU head and 2
workers x 4 GPUs, 16 CPUs each; a smaller cluster than the simulated one, so the large
class is 2x4 here) runs ~20 stand-in tasks (``examples/standin-verl``, which does verl's
resource check and holds STRICT_PACK placement groups for ``+argus_demo.duration_s``)
through the real ``Scheduler`` in this process, with ``service.cluster.raycluster.RayCluster``, a
real clock and a tick every ``TICK_S``, under the shipped ``plan`` unless told otherwise.
Tasks arrive at their trace times (Poisson, three users, priorities as in the big trace)
and declare time limits (``REAL_CLASSES``); there is no fail-fast class (the stand-in fails
only when GPUs are really missing, which admission prevents).

Then the same trace is simulated with the same policy, ticks on the same ``TICK_S`` grid,
and each job's driver taking a startup overhead before its gang is placed: the overhead
measured in the real run (Ray end - Argus submit - duration: driver start, ``ray.init``,
placement, exit), once the same median for every job and once each task's own. The
makespans (first arrival -> last Ray end) are printed side by side: the first simulation
tests the simulation as the benchmark uses it (one overhead for all), the second the
scheduling alone (the real run's overheads replayed). The check passes when every task
SUCCEEDED and the first is within ``SIM_WITHIN`` of the real makespan.
"""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bench.tracegen import HIGH_PRIORITY, TaskClass, TraceTask, task_id
from bench.tracesim import (
    POLICY_BY_NAME,
    Policy,
    RunResult,
    Shape,
    scheduler_settings,
    simulate,
)
from service.cluster.raycluster import RayCluster
from service.config import SchedulerSettings, Settings
from service.domain.newtask import NewTask
from service.domain.states import TaskState
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.jobspec.model import JobSpec
from service.store.writer import Store

REPO = Path(__file__).resolve().parents[1]
STANDIN = REPO / "examples" / "standin-verl"
TICK_S = 0.5
CAP_S = 300.0  # the whole check, Ray start included, stops here
WORKERS, GPUS_PER_WORKER, CPUS_PER_WORKER = 2, 4, 16
# Each task declares a time limit, as the big trace's do (the plan reserves from them): its
# class's longest run plus DRIVER_MARGIN_S, since the limit counts from the driver's start
# and the stand-in's driver then still starts Ray and waits for its gang (up to ~60 s on
# the shared 2-core machine); runs never reach it.
DRIVER_MARGIN_S = 120


def _limited(name: str, nnodes: int, gpus_per_node: int, min_s: float, max_s: float,
             checkpoints: bool = False) -> TaskClass:
    return TaskClass(name, nnodes, gpus_per_node, min_s, max_s, max_s + DRIVER_MARGIN_S,
                     checkpoints=checkpoints)


REAL_CLASSES = (  # (class, share of tasks)
    (_limited("small", 1, 1, 4, 8), 0.5),
    (_limited("medium", 1, 4, 6, 12), 0.35),
    (_limited("large", 2, 4, 10, 16, checkpoints=True), 0.15),
)
SIM_WITHIN = 0.15  # issue 21's floor: the simulated makespan within 15% of the real one
USERS = ("alice", "bob", "carol")


def real_trace(seed: int, n: int = 20, span_s: float = 40.0) -> list[TraceTask]:
    """``n`` tasks of three users arriving as a Poisson process over about ``span_s``."""
    rng = random.Random(f"{seed}:real")
    classes = [c for c, _ in REAL_CLASSES]
    weights = [w for _, w in REAL_CLASSES]
    out, t = [], 0.0
    for i in range(n):
        cls = rng.choices(classes, weights)[0]
        user = USERS[i % len(USERS)]
        prio = HIGH_PRIORITY if rng.random() < 0.1 else 0
        out.append(TraceTask(task_id(user, cls.name, i), user, cls, t,
                             round(rng.uniform(cls.min_s, cls.max_s), 1), prio,
                             cls.limit_s))
        t += rng.expovariate(n / span_s)
    return out


@dataclass
class RealRun:
    makespan_s: float
    overheads: dict[str, float]  # task -> its successful attempt's Ray end - submit - duration
    states: dict[str, int]
    failed: dict[str, str]  # task -> why, for each task that did not succeed


def _spec(t: TraceTask, shared: Path, priorities: bool) -> dict:
    data = shared / "data"
    return JobSpec(workload="ppo", code_path=str(shared / "code" / "standin-verl"),
                   model_id="Qwen/Qwen2.5-0.5B-Instruct", train_file=str(data / "train.parquet"),
                   val_file=str(data / "val.parquet"), nnodes=t.cls.nnodes,
                   n_gpus_per_node=t.cls.gpus_per_node,
                   save_freq=10 if t.cls.checkpoints else -1,
                   overrides=(f"+argus_demo.duration_s={t.duration}",),
                   priority=t.priority if priorities else None,
                   max_runtime_s=None if t.limit_s is None else int(t.limit_s)).to_dict()


def _drive(sched: Scheduler, store: Store, trace: Sequence[TraceTask], shared: Path,
           policy: Policy, deadline: float) -> float:
    """Create tasks at their arrival times and tick every TICK_S; the trace's t=0."""
    start = time.time()
    pending = list(trace)
    ids = [t.task_id for t in trace]
    while time.monotonic() < deadline:
        now = time.time()
        while pending and start + pending[0].arrival <= now:
            t = pending.pop(0)
            store.tasks.create_task(NewTask(
                id_prefix="", workload="ppo", text="", spec=_spec(t, shared, policy.priorities),
                nnodes=t.cls.nnodes, n_gpus_per_node=t.cls.gpus_per_node, user=t.user,
                created_at=now, priority=t.priority if policy.priorities else 0,
                max_runtime_s=t.limit_s), task_id=t.task_id)
        sched.tick(now)
        if not pending and all(store.tasks.get_task(i).state.is_terminal() for i in ids):
            break
        time.sleep(max(0.0, TICK_S - (time.time() - now)))
    return start


def _measure(store: Store, trace: Sequence[TraceTask], start: float) -> RealRun:
    ends: list[float] = []
    overheads: dict[str, float] = {}
    states: dict[str, int] = {}
    failed: dict[str, str] = {}
    for t in trace:
        task = store.tasks.get_task(t.task_id)
        states[task.state.value] = states.get(task.state.value, 0) + 1
        if task.state is not TaskState.SUCCEEDED:
            failed[t.task_id] = f"{task.state.value}: {task.error_summary or '-'}"
        for a in store.attempts.list_attempts(t.task_id):
            if a.end_time is not None:
                ends.append(a.end_time)
            if a.ray_status == "SUCCEEDED" and a.submitted_at and a.end_time:
                overheads[t.task_id] = a.end_time - a.submitted_at - t.duration
    makespan = max(ends) - (start + trace[0].arrival) if ends else float("nan")
    return RealRun(makespan, overheads, states, failed)


def run_real(trace: Sequence[TraceTask], policy: Policy, settings: SchedulerSettings
             ) -> RealRun:
    from tests.integration.localray import LocalRayCluster

    deadline = time.monotonic() + CAP_S
    cluster = LocalRayCluster()
    try:
        cluster.start_head()
        for _ in range(WORKERS):
            cluster.add_worker(gpus=GPUS_PER_WORKER, cpus=CPUS_PER_WORKER)
        with tempfile.TemporaryDirectory(prefix="argus-trace-real-", dir=cluster.root) as tmp:
            shared = Path(tmp) / "shared"
            shutil.copytree(STANDIN, shared / "code" / "standin-verl")
            cfg = Settings(ray_address=cluster.dashboard_url, gcs_address=cluster.gcs_address,
                           shared_root=str(shared), scheduler=replace(settings, tick_s=TICK_S),
                           runtime_env={"env_vars": {"PYTHONUNBUFFERED": "1"}})
            store = Store(str(Path(tmp) / "db.sqlite3"))
            ray = RayCluster(cfg)
            try:
                sched = Scheduler(store, ray, cfg, Artifacts(cfg.shared_root))
                sched.startup(time.time())
                start = _drive(sched, store, trace, shared, policy, deadline)
                return _measure(store, trace, start)
            finally:
                ray.close()
                store.close()
    finally:
        cluster.stop()
        cluster.cleanup_files()


def real_check(seed: int, policy_name: str = "plan") -> bool:
    """Run the check (the shipped plan by default) and print it; False when a task did not
    succeed in the real run or the simulation with the median overhead is off by more than
    ``SIM_WITHIN``."""
    policy = POLICY_BY_NAME[policy_name]
    settings = scheduler_settings(policy)
    trace = real_trace(seed)
    wall = time.perf_counter()
    real = run_real(trace, policy, settings)
    startup = statistics.median(real.overheads.values()) if real.overheads else 0.0
    sims = [_simulate(trace, policy, settings, s) for s in (startup, real.overheads)]
    _print(trace, policy, real, sims, startup, time.perf_counter() - wall)
    all_ok = not real.failed
    off = abs(sims[0].makespan_s - real.makespan_s) / real.makespan_s
    within = off <= SIM_WITHIN  # NaN (nothing ended) fails
    print(f"  floor: every task SUCCEEDED: {'PASS' if all_ok else 'FAIL'}; simulated makespan "
          f"(median overhead) within {SIM_WITHIN:.0%} of the real one ({off:.1%}): "
          f"{'PASS' if within else 'FAIL'}")
    return all_ok and within


def _simulate(trace: Sequence[TraceTask], policy: Policy, settings: SchedulerSettings,
              startup: float | dict[str, float]) -> RunResult:
    sim = simulate(trace, policy, step_s=TICK_S, startup_s=startup, align_s=TICK_S,
                   settings=replace(settings, tick_s=TICK_S),
                   shape=Shape(WORKERS, GPUS_PER_WORKER, CPUS_PER_WORKER))
    assert isinstance(sim, RunResult)
    return sim


def _print(trace: Sequence[TraceTask], policy: Policy, real: RealRun, sims: list[RunResult],
           startup: float, wall: float) -> None:
    work = sum(t.work for t in trace)
    print(f"\n== real-Ray check ({wall:.0f} s): {len(trace)} stand-in tasks, {policy.name}, "
          f"local Ray with {WORKERS} workers x {GPUS_PER_WORKER} fake GPUs, tick {TICK_S} s; "
          f"{work:.0f} GPU-s of work, arrivals over {trace[-1].arrival:.0f} s")
    print(f"  real tasks by state: {real.states}")
    for tid, why in real.failed.items():
        print(f"    {tid}: {why}")
    if real.overheads:
        values = list(real.overheads.values())
        print(f"  startup overhead per job (Ray end - submit - duration): median "
              f"{startup:.2f} s, mean {statistics.fmean(values):.2f}, min {min(values):.2f}, "
              f"max {max(values):.2f}")
    print(f"  makespan: real {real.makespan_s:.1f} s")
    for label, sim in zip(("the median overhead for every job", "each job's own overhead"),
                          sims, strict=True):
        diff = (sim.makespan_s - real.makespan_s) / real.makespan_s
        print(f"  makespan: simulated with {label}: {sim.makespan_s:.1f} s ({diff:+.1%})")

