"""What the web console's pages cost on the server, with a long queue.

In one process: a database of ``--pending`` (10k) runnable tasks with pending reasons,
``--running`` (50) running tasks, ``--done`` (20k) finished tasks of 20 users with one
ended attempt each over the last 7 days (the GPU-hours chart reads them), a day of
one-minute samples (the other charts), and a scheduler snapshot of ``--nodes`` (16)
nodes. The app is served on a local port (aiohttp's test server); a signed-in session
requests each page ``--rounds`` (30) times, one at a time, and the time from request to
the last byte is measured. Every page must stay within ``FLOOR_MS`` (300 ms) at p95.

    .venv/bin/python bench/bench_ui.py [--pending 10000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from aiohttp.test_utils import TestClient, TestServer

from bench.hostinfo import host_line
from service.cluster.boundary import ClusterSnapshot, NodeResources
from service.cluster.fake import FakeCluster
from service.config import Settings
from service.domain.reasons import WaitKind, as_text
from service.domain.states import TaskState
from service.domain.users import Role
from service.domain.writes import Sample
from service.engine.artifacts import Artifacts
from service.store.writer import BulkTask, Store
from service.web.app import create_app
from service.web.metrics import ServiceMetrics

TOKEN = "bench-ui-token"
FLOOR_MS = 300.0
DAY = 86_400.0
REASON = as_text("needs 1x8 GPUs (+24 CPUs per node); free: 10.0.0.1 2 GPU/10 CPU, "
                 "10.0.0.2 0 GPU/4 CPU", WaitKind.RESOURCES)


def fill(store: Store, args: argparse.Namespace, now: float) -> str:
    users = [f"user{i:02d}" for i in range(20)]
    for name in users:
        store.users.create_user(name, Role.USER, now - DAY)
    tasks = []
    for i in range(args.done):
        start = now - 7 * DAY + i * 7 * DAY / args.done
        tasks.append(BulkTask(
            task_id=f"mvp2-{users[i % 20]}-ppo-20251223-{i // 65536:06d}-{i % 65536:04x}",
            workload="ppo", state=TaskState.SUCCEEDED, created_at=start, nnodes=1,
            n_gpus_per_node=4, user=users[i % 20], attempt_span=(start, start + 3600)))
    for i in range(args.running):
        tasks.append(BulkTask(
            task_id=f"mvp2-{users[i % 20]}-sft-20251224-000000-{i:04x}", workload="sft",
            state=TaskState.RUNNING, created_at=now - 3600 + i, user=users[i % 20]))
    for i in range(args.pending):
        tasks.append(BulkTask(
            task_id=f"mvp2-{users[i % 20]}-grpo-20251225-{i // 65536:06d}-{i % 65536:04x}",
            workload="grpo", state=TaskState.PENDING_RESOURCES, created_at=now - 1800 + i / 10,
            nnodes=1, n_gpus_per_node=8, user=users[i % 20],
            jobspec_yaml="workload: grpo\nnnodes: 1\nn_gpus_per_node: 8\n"))
    store.tasks.bulk_load(tasks)
    pending = [t.task_id for t in tasks if t.state is TaskState.PENDING_RESOURCES]
    store.attempts.mark_pending(((tid, TaskState.PENDING_RESOURCES, REASON) for tid in pending),
                                now)
    for i in range(1440):
        store.console.record_sample(Sample(now - DAY + 60 * i, args.pending, args.running,
                                           float(i % 64), 64.0), keep_s=2 * DAY)
    return pending[args.pending // 2]


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(shared_root=str(Path(tmp) / "shared"))
        store = Store(str(Path(tmp) / "db.sqlite3"))
        started = time.perf_counter()
        middle = fill(store, args, now)
        print(f"filled in {time.perf_counter() - started:.1f}s: {args.pending} pending, "
              f"{args.running} running, {args.done} finished tasks, 1440 samples")
        metrics = ServiceMetrics(store.tasks.counts_by_state, users=store, queue=store.console)
        metrics.observed.record(now, ClusterSnapshot(nodes=tuple(
            NodeResources(f"node{i:02x}" * 7, f"10.0.0.{i + 1}", {"GPU": 2.0, "CPU": 40.0},
                          {"GPU": 8.0, "CPU": 96.0}) for i in range(args.nodes))))
        app = create_app(settings, store, FakeCluster(clock=now), Artifacts(tmp),
                         token=TOKEN, metrics=metrics)
        pages = {
            "queue": "/ui/queue",
            "queue page 100": "/ui/queue?page=100",
            "queue user=user07": "/ui/queue?user=user07",
            "queue live fragment": "/ui/queue?fragment=1",
            "task": f"/ui/tasks/{middle}",
            "cluster": "/ui/cluster",
            "charts": "/ui/charts",
        }
        out = await time_pages(app, TOKEN, pages, args.rounds)
        store.close()
    return out


async def time_pages(app: web.Application, token: str, pages: dict[str, str], rounds: int,
                     check: Callable[[str, str], None] | None = None
                     ) -> dict[str, list[float]]:
    """Sign in with ``token``, ask for each page once (``check(name, html)`` looks at it),
    then ``rounds`` times: the milliseconds from request to last byte, by page name."""
    out: dict[str, list[float]] = {name: [] for name in pages}
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/ui/signin", data={"token": token}, allow_redirects=False)
        assert resp.status == 303, await resp.text()
        for name, path in pages.items():  # a warm-up round
            resp = await client.get(path)
            assert resp.status == 200, (name, resp.status, await resp.text())
            if check is not None:
                check(name, await resp.text())
        for _ in range(rounds):
            for name, path in pages.items():
                t0 = time.perf_counter()
                resp = await client.get(path)
                await resp.read()
                out[name].append((time.perf_counter() - t0) * 1000)
                assert resp.status == 200
    return out


def print_pages(out: dict[str, list[float]], title: str, width: int) -> float:
    """A row per page (p50, p95, max ms); returns the worst p95."""
    print(f"{title:<{width}} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    worst = 0.0
    for name, times in out.items():
        times.sort()
        p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
        worst = max(worst, p95)
        print(f"{name:<{width}} {statistics.median(times):8.1f} {p95:8.1f} {times[-1]:8.1f}")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=50)
    parser.add_argument("--done", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(host_line(), flush=True)
    worst = print_pages(asyncio.run(measure(args)), "page", 22)
    verdict = "ok" if worst <= FLOOR_MS else "OVER"
    print(f"worst p95 {worst:.1f} ms (floor {FLOOR_MS:g} ms): {verdict}")
    return 0 if worst <= FLOOR_MS else 1


if __name__ == "__main__":
    sys.exit(main())
