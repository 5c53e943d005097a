"""What one ``/metrics`` scrape costs on a large store.

In one process, on a database of ``--tasks`` (300k) tasks of ``--users`` (20) users, one in
``--waiting-every`` (300) waiting and the others finished with an ended attempt: the render
of the whole exposition (``ServiceMetrics.render``, what a scrape runs on the work lane)
and the store reads behind it, median of ``--rounds`` (15).

    .venv/bin/python bench/bench_metrics.py [--tasks 300000] [--waiting-every 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench.hostinfo import host_line
from service.domain.states import TaskState
from service.domain.users import Role
from service.store.writer import BulkTask, Store
from service.web.metrics import ServiceMetrics

T0 = 1_766_500_000.0
FLOOR_MS = 50.0


def median_ms(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=300_000)
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--waiting-every", type=int, default=300)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"{tmp}/db.sqlite3")
        store.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=T0)
        users = [f"user{i:02d}" for i in range(args.users)]
        for name in users:
            store.users.create_user(name, Role.USER, T0)
        n = args.tasks

        def task(i: int) -> BulkTask:
            waiting = i % args.waiting_every == 0
            return BulkTask(
                task_id=f"mvp2-{users[i % len(users)]}-ppo-20251223-{i // 65536:06d}-"
                        f"{i % 65536:04x}",
                workload="ppo", state=TaskState.QUEUED if waiting else TaskState.SUCCEEDED,
                created_at=T0 - n + i, user=users[i % len(users)],
                attempt_span=None if waiting else (T0 - n + i, T0 - n + i + 100))

        store.tasks.bulk_load(task(i) for i in range(n))
        metrics = ServiceMetrics(store.tasks.counts_by_state, users=store, queue=store.console,
                                 nodes=store.nodes)
        metrics.render()  # the first read warms SQLite's page cache
        waiting = sum(1 for i in range(n) if i % args.waiting_every == 0)
        print(host_line())
        print(f"{n} tasks, {waiting} waiting, {args.users} users; median of {args.rounds}")
        render = median_ms(metrics.render, args.rounds)
        for name, fn in (("render, all families", metrics.render),
                         ("tasks by state", store.tasks.counts_by_state),
                         ("tasks by user and state", store.tasks.counts_by_user_and_state),
                         ("waiting tasks by workload, user, reason", store.console.pending_groups),
                         ("GPU-seconds per user (ledger)", store.usage.gpu_seconds_by_user)):
            print(f"  {name:<42}{median_ms(fn, args.rounds):>9.2f} ms")
        print(f"floor: render <= {FLOOR_MS:g} ms: {'pass' if render <= FLOOR_MS else 'MISSED'}")
        store.close()


if __name__ == "__main__":
    main()
