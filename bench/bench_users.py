"""What users cost: token checks, per-user /metrics, GPU accounting, limits in the tick.

In one process, on a database of ``--tasks`` (100k) finished tasks of ``--users`` (20)
users, each with one ended attempt spread over 30 days, plus a runnable queue:

* auth: ``Authenticator.authenticate`` per call, for the bootstrap token, a user's token
  (cached row: a SHA-256 and a compare), and a user's token read from the store (a
  different token each call, so every one misses the cache);
* ``/metrics``: rendering the whole exposition (tasks by state, per user: tasks by state,
  GPUs in use, GPU-seconds of ended attempts), the work one scrape does;
* usage: ``GET /api/v2/usage``'s work (``Store.usage.usage_summary``: each task's running
  totals for the tasks inside the window, the attempts of those across its edges, of the
  running ones and of the top tasks; the JSON shape) for the last day, the last 20 days
  (a long window that is not all history) and all time;
* scheduler tick: ``--runnable`` (10k) runnable tasks, none of which fits (as in
  ``bench_tick.py``), with per-user limits on (half the users at their GPU limit, so
  their tasks are held before the gang check) and off, ``--ticks`` ticks each.

    .venv/bin/python bench/bench_users.py [--tasks 100000] [--users 20] [--runnable 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench.hostinfo import host_line
from service.cluster.fake import FakeCluster
from service.config import SchedulerSettings, Settings, UserSettings
from service.domain.states import TaskState
from service.domain.users import Role
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.policy.quotas import Limits
from service.policy.usage import report_of
from service.store.aio import AsyncStore
from service.store.writer import BulkTask, Store
from service.web.api.auth import Authenticator
from service.web.api.views import usage_json
from service.web.metrics import ServiceMetrics

T0 = 1_766_500_000.0
DAY = 86_400.0
FLOORS = {"auth_cached_us": 50.0, "metrics_ms": 250.0, "usage_day_ms": 100.0,
          "usage_all_ms": 250.0,
          "tick_ms": 20.0}


def fill(store: Store, args: argparse.Namespace) -> list[str]:
    users = [f"user{i:02d}" for i in range(args.users)]
    for name in users:
        store.users.create_user(name, Role.USER, T0)
    span = 30 * DAY
    done = [
        BulkTask(task_id=f"mvp2-{users[i % len(users)]}-ppo-20251223-{i // 65536:06d}-"
                         f"{i % 65536:04x}",
                 workload="ppo", state=TaskState.SUCCEEDED, created_at=T0 - span + i * span
                 / args.tasks, nnodes=1, n_gpus_per_node=4, user=users[i % len(users)],
                 attempt_span=(T0 - span + i * span / args.tasks,
                               T0 - span + i * span / args.tasks + 600.0))
        for i in range(args.tasks)
    ]
    queued = [
        BulkTask(task_id=f"mvp2-{users[i % len(users)]}-grpo-20251224-{i // 65536:06d}-"
                         f"{i % 65536:04x}",
                 workload="grpo", state=TaskState.QUEUED, created_at=T0 + i * 0.001,
                 nnodes=1, n_gpus_per_node=8, user=users[i % len(users)])
        for i in range(args.runnable)
    ]
    store.tasks.bulk_load(done + queued)
    return users


def per_call_us(fn, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n * 1e6


async def bench_auth(store: Store, users: list[str], n: int) -> dict[str, float]:
    astore = AsyncStore(store)
    tokens = [store.users.create_token(users[i % len(users)], f"t{i}", None, T0, max_live=10_000)
              for i in range(n)]
    auth = Authenticator(astore, "bootstrap-token", "admin", clock=lambda: T0,
                         touch_interval_s=1e12)
    try:
        async def many(texts: list[str]) -> float:
            started = time.perf_counter()
            for text in texts:
                await auth.authenticate(text)
            return (time.perf_counter() - started) / len(texts) * 1e6

        out = {"bootstrap": await many(["bootstrap-token"] * n)}
        out["user token, row read from the store"] = await many([t.secret for t in tokens])
        out["user token, cached row"] = await many([tokens[0].secret] * n)
        return out
    finally:
        astore.close()


def bench_tick(root: Path, args: argparse.Namespace, users: list[str], store: Store,
               limited: bool) -> list[float]:
    limits = {u: Limits(max_gpus=8) for u in users[: len(users) // 2]}
    settings = Settings(shared_root=str(root), scheduler=SchedulerSettings(),
                        users=UserSettings(per_user=limits if limited else {}))
    cluster = FakeCluster(clock=T0)
    for i in range(4):  # 4 x 8 GPUs, 7 held outside Argus: no 8-GPU task fits
        cluster.add_node(f"w{i}", gpus=8, cpus=32)
        cluster.occupy(f"w{i}", GPU=7, CPU=21)
    sched = Scheduler(store, cluster, settings, Artifacts(root))
    times = []
    for k in range(args.ticks):
        started = time.perf_counter()
        sched.tick(T0 + 10 + k)
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--runnable", type=int, default=10_000)
    p.add_argument("--ticks", type=int, default=100)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()
    print(host_line(), flush=True)
    root = Path(tempfile.mkdtemp(prefix="argus-bench-users-"))
    store = Store(str(root / "db.sqlite3"))
    try:
        started = time.perf_counter()
        users = fill(store, args)
        print(f"{args.tasks} finished tasks with one attempt each and {args.runnable} queued, "
              f"{args.users} users, loaded in {time.perf_counter() - started:.1f}s\n")
        auth = asyncio.run(bench_auth(store, users, args.calls))
        for name, us in auth.items():
            print(f"auth: {name:<40}{us:>9.1f} us/request")
        metrics = ServiceMetrics(store.tasks.counts_by_state, users=store)
        metrics_ms = [per_call_us(metrics.render, 1) / 1000 for _ in range(10)]
        print(f"\n/metrics render (all families){'':<20}{statistics.median(metrics_ms):>9.1f} ms"
              f" median of 10 (max {max(metrics_ms):.1f})")
        usage = {}
        for label, window_from in (("last day", T0 - DAY), ("last 20 days", T0 - 20 * DAY),
                                   ("all time", 0.0)):
            def one(window_from: float = window_from) -> None:
                summary = store.usage.usage_summary(window_from, T0, T0, None, 100)
                usage_json(report_of(summary, window_from, T0, T0), T0, 100)
            usage[label] = statistics.median(per_call_us(one, 1) / 1000 for _ in range(5))
            n = len(store.usage.usage_spans(window_from, T0, None))
            print(f"usage, {label} ({n} attempts){'':<{31 - len(label) - len(str(n))}}"
                  f"{usage[label]:>9.1f} ms median of 5")
        print()
        ticks = {}
        for limited in (False, True):
            times = bench_tick(root, args, users, store, limited)
            key = "limits on" if limited else "limits off"
            ticks[key] = times
            print(f"tick, {args.runnable} runnable, {key:<11} first {times[0]:6.1f} ms, "
                  f"median {statistics.median(times):5.1f} ms, "
                  f"p99 {sorted(times)[int(0.99 * (len(times) - 1))]:5.1f} ms, "
                  f"max {max(times):5.1f} ms")
    finally:
        store.close()
    checks = [
        ("auth, cached user token (us)", auth["user token, cached row"], FLOORS["auth_cached_us"]),
        ("/metrics render (ms)", statistics.median(metrics_ms), FLOORS["metrics_ms"]),
        ("usage, last day (ms)", usage["last day"], FLOORS["usage_day_ms"]),
        ("usage, last 20 days (ms)", usage["last 20 days"], FLOORS["usage_all_ms"]),
        ("usage, all time (ms)", usage["all time"], FLOORS["usage_all_ms"]),
        ("tick with limits, p99 (ms)",
         sorted(ticks["limits on"])[int(0.99 * (len(ticks["limits on"]) - 1))],
         FLOORS["tick_ms"]),
    ]
    print("\nfloor checks:")
    ok = True
    for name, value, floor in checks:
        ok &= value <= floor
        print(f"  {name:<32}{value:>9.1f} <= {floor:<8g}{'ok' if value <= floor else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
