"""Scheduler tick cost with a long queue: 10k runnable + 90k finished tasks in SQLite.

The cluster (FakeCluster: 4 workers of 8 GPUs, 7 of them held by another user's jobs) has
room for every task when idle but for none now, so every tick examines the queue and
admits nothing: the worst case for a tick. The tasks belong to 3 users and one in ten
has a higher priority. Three policies are measured:

* backfill: fair share off, no task has reached the starvation guard, so each tick looks
  at up to ``backfill_window`` runnable tasks in priority order (later tasks could fit
  where earlier ones do not);
* fairshare: the same with fair share on, which reads each user's head of the queue
  (the window shared out among the users) and orders them by DRF;
* guard: the head of the queue has waited past ``starvation_guard_s``, so the tick stops
  looking for room right after it (everything behind it waits by policy);
* plan: the default policy (fair share + 8 reservations, start estimates for up to 64
  waiting tasks), every task past the guard. The three above run with
  ``reservations: 0``.

The first ticks of each run write the examined tasks' ``pending_reason`` (QUEUED ->
PENDING_RESOURCES), at most ``applier.REASON_WRITES`` a tick; the first is reported on its
own; once every reason is written, ticks find nothing changed and write nothing. Each
tick's CPU time (the thread's) and wall time are measured: the wall time adds SQLite's
fsyncs. The WAL is checkpointed on the service's checkpointer thread
(``store.checkpointer``), as in the service. Floor: every tick's CPU time, the first
included, <= 20 ms.

With ``--running N`` the held GPUs are, up to N of them, Argus's own one-GPU tasks
(admitted by the scheduler, running on the fake cluster; seven a worker, workers added as
needed) instead of another user's: each tick then also reconciles and watches N attempts,
as on a busy cluster of many small jobs.

With ``--limits`` every task declares a time limit (the runnable ones 1, 2, 4 or 8 h; the
running ones 2 h) and every held GPU is Argus's own (``--running`` at least 7 a worker):
the plan then knows when GPUs come back, so its reservations and start estimates are
found on the timeline, not skipped as unknown. Without limits the ``plan`` row measures
the walk alone.

``--engine postgresql`` runs the store on a throwaway PostgreSQL server (as bench_api.py:
``tests/support/postgres.py``, PostgreSQL's own durability defaults, TCP on loopback; a
fresh database each run); ``--engine both`` runs every policy on both engines, alternating
which goes first (ABBA...), and prints, as its last line, the engine's floor: the
``plan`` tick's wall time on PostgreSQL over SQLite's (median of the ticks), ``engine:
tick 1.23x (floor 2.0) ok``. The wall time, not the thread's CPU: on PostgreSQL the
queries' work is the server's, in another process.

    .venv/bin/python bench/bench_tick.py [--ticks 200] [--runnable 10000] [--finished 90000]
                                         [--running 0] [--limits]
                                         [--engine sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from service.domain.newtask import NewTask

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench.bench_api import postgres_server
from bench.hostinfo import host_line
from service.cluster.fake import FakeCluster
from service.config import SchedulerSettings, Settings
from service.domain.states import TaskState
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.jobspec.model import JobSpec
from service.store.checkpointer import Checkpointer
from service.store.writer import BulkTask, Store

T0 = 1_766_500_000.0
SHAPES = ((1, 4), (2, 4), (1, 8), (4, 8), (2, 8))  # none fits 1 free GPU per worker
HELD = 7  # of each worker's 8 GPUs
FINISHED = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELED)
FLOOR_MS = 20.0
ENGINE_FLOOR = 2.0  # --engine both: PostgreSQL's plan tick, wall, at most 2x SQLite's
USERS = ("alice", "bob", "carol")
LIMITS_S = (3600.0, 7200.0, 14400.0, 28800.0)  # --limits: the runnable tasks' time limits
RUNNING_LIMIT_S = 7200.0  # --limits: the running tasks'


def build_db(store: Store, runnable: int, finished: int, seed: int = 7,
             limits: bool = False) -> None:
    rng = random.Random(seed)
    kinds = [True] * runnable + [False] * finished
    rng.shuffle(kinds)  # runnable rows interleaved with finished ones, as in real life
    tasks = []
    for i, is_runnable in enumerate(kinds):
        nnodes, g = rng.choice(SHAPES)
        tasks.append(BulkTask(
            task_id=f"mvp2-ppo-20251223-{i // 65536:06d}-{i % 65536:04x}",
            workload="ppo",
            state=TaskState.QUEUED if is_runnable else rng.choice(FINISHED),
            created_at=T0 + i * 0.01, nnodes=nnodes, n_gpus_per_node=g,
            user=rng.choice(USERS), priority=5 if rng.random() < 0.1 else 0,
            max_runtime_s=rng.choice(LIMITS_S) if limits else None,
        ))
    store.tasks.bulk_load(tasks)


def start_running(store: Store, cluster: FakeCluster, sched: Scheduler, n: int,
                  now: float, limit_s: float | None = None) -> None:
    """N one-GPU tasks admitted by ``sched`` and running on ``cluster``, seven a worker,
    seen RUNNING by ``sched``; each with time limit ``limit_s``."""
    for i in range(n):
        spec = JobSpec(workload="ppo", code_path="/verl", model_id="org/model",
                       train_file="/t.parquet", val_file="/v.parquet",
                       nnodes=1, n_gpus_per_node=1)
        store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="", spec=spec.to_dict(),
                                        nnodes=1, n_gpus_per_node=1, user=USERS[i % len(USERS)],
                                        created_at=now - n + i, max_runtime_s=limit_s, priority=0),
                                task_id=f"mvp2-ppo-20251222-000000-{i:04x}")
    for k in range(n + 1):  # the scheduler admits them, some each tick
        if len(store.tasks.active()) == n:
            break
        sched.tick(now + k * 0.001)
    rows = store.tasks.active()
    assert len(rows) == n, f"{len(rows)} of {n} admitted"
    for i, row in enumerate(rows):
        cluster.start(row.ray_submission_id, {f"worker{i // HELD}": 1})
    sched.tick(now + 1.0)  # they are seen RUNNING before the measured ticks
    running = store.tasks.active([TaskState.RUNNING])
    assert len(running) == n, f"{len(running)} of {n} running"


def setup(label: str, root: Path, args: argparse.Namespace, guard_s: float, fair: bool,
          reservations: int = 0, store_url: str | None = None
          ) -> tuple[Store, FakeCluster, Scheduler, float]:
    """The store (``store_url``, else a SQLite file in ``root``), cluster and scheduler a
    run ticks, and the time of its first tick."""
    store = Store(store_url or str(root / f"{label}.sqlite3"))
    cluster = FakeCluster(clock=T0)
    cluster.add_node("head", gpus=0, cpus=0, worker_slots=0)
    workers = max(4, -(-args.running // HELD))
    for i in range(workers):  # every shape fits the idle cluster (drivers: 1 CPU each)
        cluster.add_node(f"worker{i}", gpus=8, cpus=32 + args.running)
    settings = Settings(shared_root=str(root),
                        scheduler=SchedulerSettings(starvation_guard_s=guard_s,
                                                    fair_share=fair,
                                                    reservations=reservations))
    sched = Scheduler(store, cluster, settings, Artifacts(settings.shared_root))
    sched.startup(T0 - 1.0)
    start_running(store, cluster, sched, args.running, T0 - 1.0,
                  RUNNING_LIMIT_S if args.limits else None)
    for i in range(workers):  # 7 of 8 GPUs held: by the running tasks, then another user
        other = HELD - min(HELD, max(0, args.running - i * HELD))
        cluster.occupy(f"worker{i}", GPU=other, CPU=3 * other)
    build_db(store, args.runnable, args.finished, limits=args.limits)
    return store, cluster, sched, T0 + (args.runnable + args.finished) * 0.01 + 1.0


def run(label: str, root: Path, args: argparse.Namespace, guard_s: float, fair: bool,
        reservations: int = 0, store_url: str | None = None) -> dict[str, float]:
    store, _, sched, now = setup(label, root, args, guard_s, fair, reservations, store_url)
    # the WAL copied on its own thread, as in the service (SQLite only: PostgreSQL
    # checkpoints by itself)
    checkpointer = Checkpointer(store) if store.engine_name == "sqlite" else None
    if checkpointer is not None:
        checkpointer.start()
    gc.freeze()  # as the service after its startup (service.main)
    cpu, wall = [], []
    for i in range(args.ticks + 1):
        started = time.thread_time()
        report = sched.tick(now + i)
        cpu.append((time.thread_time() - started) * 1000)
        wall.append(report.duration_s * 1000)
        assert report.submitted == 0, "the bench cluster must admit nothing"
    if checkpointer is not None:
        checkpointer.stop()
    gc.unfreeze()
    store.close()
    later = sorted(cpu[1:])
    return {
        "examined": report.pending,
        "estimated": len(sched.last_estimates),  # waiting tasks with a start, last tick
        "first_ms": cpu[0],
        "median_ms": statistics.median(later),
        "p99_ms": later[min(len(later) - 1, int(len(later) * 0.99))],
        "max_ms": max(cpu),
        "wall_median_ms": statistics.median(wall[1:]),
        "wall_max_ms": max(wall),
    }


POLICIES = {  # name: (starvation_guard_s, fair_share, reservations)
    "backfill": (1e12, False, 0),
    "fairshare": (1e12, True, 0),
    "guard": (0.0, True, 0),
    "plan": (0.0, True, 8),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--runnable", type=int, default=10_000)
    parser.add_argument("--finished", type=int, default=90_000)
    parser.add_argument("--running", type=int, default=0,
                        help="Argus's own one-GPU tasks running (default: none; with "
                             "--limits at least 7 a worker)")
    parser.add_argument("--limits", action="store_true",
                        help="every task declares a time limit (the plan's estimates run)")
    parser.add_argument("--engine", choices=("sqlite", "postgresql", "both"),
                        default="sqlite",
                        help="the store's engine (sqlite); postgresql: a throwaway server; "
                             "both: every policy on each, alternating")
    args = parser.parse_args(argv)
    if args.limits:  # every held GPU is an attempt's with a limit: the plan knows its end
        args.running = max(args.running, 4 * HELD)
    return args


def engine_order(engine: str, k: int) -> list[str]:
    """The engines the ``k``-th policy runs on, in order: with ``both``, SQLite first on
    even policies and PostgreSQL first on odd ones, so a drift of the host weighs on both
    alike."""
    if engine != "both":
        return [engine]
    return ["sqlite", "postgresql"] if k % 2 == 0 else ["postgresql", "sqlite"]


def engine_verdict(sqlite: dict[str, float], postgres: dict[str, float]) -> tuple[str, bool]:
    """``engine: tick 1.23x (floor 2.0) ok``: the plan tick's median wall time on
    PostgreSQL over SQLite's."""
    share = postgres["wall_median_ms"] / sqlite["wall_median_ms"]
    ok = share <= ENGINE_FLOOR
    return (f"engine: tick {share:.2f}x (floor {ENGINE_FLOOR:.1f}) {'ok' if ok else 'MISSED'}; "
            f"slowest {postgres['wall_max_ms']:.1f} / {sqlite['wall_max_ms']:.1f} ms"), ok


def _measure(args: argparse.Namespace, tmp: Path, database: Callable[[], str] | None
             ) -> dict[tuple[str, str], dict[str, float]]:
    rows = {}
    for k, (name, (guard_s, fair, reservations)) in enumerate(POLICIES.items()):
        for engine in engine_order(args.engine, k):
            url = database() if engine == "postgresql" and database else None
            rows[(name, engine)] = run(f"{name}-{engine}", tmp, args, guard_s=guard_s,
                                       fair=fair, reservations=reservations, store_url=url)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(host_line(), flush=True)
    with tempfile.TemporaryDirectory(prefix="argus-bench-tick-") as tmp, \
            contextlib.ExitStack() as stack:
        database = None
        if args.engine != "sqlite":
            args.pg_socket, args.pg_synchronous_commit = False, "on"
            database = stack.enter_context(postgres_server(args))
        rows = _measure(args, Path(tmp), database)
    print(host_line())
    print(f"tick benchmark: {args.runnable} runnable + {args.finished} finished tasks, "
          f"{args.running} running, {args.ticks} ticks, nothing fits, time limits "
          f"{'declared' if args.limits else 'none'}; CPU ms, then wall ms")
    print(f"{'policy':<10} {'engine':<11}{'examined':>8} {'estimated':>9} {'first':>7} "
          f"{'median':>7} {'p99':>7} {'max':>7} {'wall med':>9} {'wall max':>9}")
    for (name, engine), r in rows.items():
        print(f"{name:<10} {engine:<11}{r['examined']:>8.0f} {r['estimated']:>9.0f} "
              f"{r['first_ms']:>7.2f} {r['median_ms']:>7.2f} {r['p99_ms']:>7.2f} "
              f"{r['max_ms']:>7.2f} {r['wall_median_ms']:>9.2f} {r['wall_max_ms']:>9.2f}")
    worst = max(r["max_ms"] for r in rows.values())
    verdict = "OK" if worst <= FLOOR_MS else "OVER"
    print(f"floor: every tick's CPU time, the first included, <= {FLOOR_MS:.0f} ms -> "
          f"{verdict} (slowest {worst:.2f} ms)")
    if args.engine != "both":
        return 0
    line, ok = engine_verdict(rows[("plan", "sqlite")], rows[("plan", "postgresql")])
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
