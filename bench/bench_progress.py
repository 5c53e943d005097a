"""What following driver logs and drawing curves cost: the floors of progress and curves.

1. **Following**: ``--tasks`` (50) running attempts on the in-memory cluster each print
   ``--lines-per-s`` (10) lines a second, of which every ``--step-every``-th (10th) is a
   verl step line with ``--metrics`` (30) numeric metrics and the others are log lines of
   the same length (one step a second per task: faster than verl's PPO steps);
   ``--step-every 1`` makes every line a step line (the worst case). ``LogFollower.poll``
   runs every ``--poll-s`` (5) seconds of simulated time over ``--seconds`` (120) of logs,
   against a real SQLite store; its CPU time (this thread's) over the simulated time is the
   share of one core it costs. Floor: ``FOLLOW_FLOOR`` (2 %). (On real Ray the new text
   arrives over a log-tail websocket per job, ``service.cluster.logtail``, on its own thread:
   not in this figure.)
2. **Pages**: one task whose two default curves (a loss and a reward) hold ``--points``
   (10k) points each, over 20 attempts; and the queue with the ``--tasks`` running tasks
   showing progress (read by the follower) over ``--pending`` (10k) waiting tasks. Served
   by the app on a local port; a signed-in session asks for the task page, the queue and
   its live fragment ``--rounds`` (30) times each. Floor: ``PAGE_FLOOR_MS`` (300 ms) at
   p95, the console's.

    .venv/bin/python bench/bench_progress.py [--tasks 50] [--lines-per-s 10] [--points 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench_ui import print_pages, time_pages

from bench.hostinfo import host_line
from service.cluster.boundary import SubmitRequest
from service.cluster.fake import FakeCluster
from service.config import Settings
from service.domain.progress import Point, Progress
from service.domain.states import TaskState
from service.domain.writes import ProgressUpdate
from service.engine.artifacts import Artifacts
from service.engine.progress_follower import LogFollower
from service.store.writer import BulkTask, Store
from service.web.app import create_app

TOKEN = "bench-progress-token"
FOLLOW_FLOOR = 0.02  # of one core
PAGE_FLOOR_MS = 300.0
ATTEMPTS = 20


def running_tasks(store: Store, cluster: FakeCluster, n: int, now: float) -> list[str]:
    """``n`` RUNNING tasks with a running job each: their submission ids."""
    cluster.add_node("w1", gpus=8 * n, cpus=64 * n, worker_slots=n)
    tasks = [BulkTask(task_id=f"mvp2-u-ppo-20251224-000000-{i:04x}", workload="ppo",
                      state=TaskState.QUEUED, created_at=now, nnodes=1, n_gpus_per_node=8,
                      user="u") for i in range(n)]
    store.tasks.bulk_load(tasks)
    sids = []
    for t in tasks:
        claim = store.attempts.claim_for_submit(t.task_id, TaskState.QUEUED, now)
        store.attempts.mark_submitted(t.task_id, claim.attempt_no, now)
        sid = claim.ray_submission_id
        cluster.submit(SubmitRequest(sid, "python3 -m verl.trainer.main_ppo", {}, 0, {}, {}))
        cluster.start(sid)
        store.attempts.sync_attempt(t.task_id, claim.attempt_no, ray_status="RUNNING", message="",
                                    start_time=now, now=now, to_running_from=TaskState.SUBMITTED)
        sids.append(sid)
    return sids


def follow(args: argparse.Namespace) -> float:
    """CPU share of one core spent following the logs."""
    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(str(Path(tmp) / "db.sqlite3"))
        cluster = FakeCluster(clock=now)
        sids = running_tasks(store, cluster, args.tasks, now)
        follower = LogFollower(store, cluster, Artifacts(tmp), max_points=500,
                               max_read_chars=1 << 20)
        metrics = [f"group{i % 5}/metric_{i}" for i in range(args.metrics)]
        step = 0
        cpu = 0.0
        per_poll = int(args.lines_per_s * args.poll_s)
        polls = int(args.seconds / args.poll_s)
        for poll in range(polls):
            lines = []
            for n in range(per_poll):
                if n % args.step_every:
                    lines.append(f"(TaskRunner pid=4242) INFO worker {n}: " + "x" * 600)
                    continue
                step += 1
                lines.append(f"step:{step} - " + " - ".join(
                    f"{m}:{(step * 7 + j) % 1000 / 997:.4f}" for j, m in enumerate(metrics)))
            text = "\n".join(lines) + "\n"
            for sid in sids:
                cluster.write_log(sid, text)
            t0 = time.thread_time()
            report = follower.poll(now + (poll + 1) * args.poll_s)
            cpu += time.thread_time() - t0
            assert report.followed == len(sids) and report.lines == per_poll * len(sids)
        lines_total = per_poll * polls * len(sids)
        chars = sum(len(cluster.jobs[s].log) for s in sids)
        store.close()
    share = cpu / args.seconds
    print(f"following {args.tasks} logs x {args.lines_per_s:g} lines/s (a step line with "
          f"{args.metrics} metrics every {args.step_every}), poll every {args.poll_s:g} s, "
          f"{args.seconds:g} s of logs: {lines_total} lines, {chars / 1e6:.1f} MB")
    print(f"  CPU {cpu:.2f} s = {100 * share:.2f}% of one core "
          f"({1e6 * cpu / lines_total:.1f} us a line; floor {100 * FOLLOW_FLOOR:g}%)")
    return share


def curve_task(store: Store, points: int, now: float) -> str:
    """A finished task whose loss and reward curves hold ``points`` points each."""
    task_id = "mvp2-u-ppo-20251224-000000-cafe"
    store.tasks.bulk_load([BulkTask(task_id=task_id, workload="ppo", state=TaskState.QUEUED,
                                    created_at=now, nnodes=1, n_gpus_per_node=8, user="u")])
    per = points // ATTEMPTS
    for attempt in range(1, ATTEMPTS + 1):  # the curves' rows as the follower writes them
        first = (attempt - 1) * per + 1
        store.progress.record_progress(ProgressUpdate(
            task_id=task_id, attempt_no=attempt, expected_offset=0, log_offset=1,
            progress=Progress(step=first + per - 1),
            points=tuple(Point(attempt, key, s, 1.0 / s + (s % 13) / 100)
                         for key in ("train/loss", "critic/score/mean")
                         for s in range(first, first + per)),
            series={"train/loss": (1, per), "critic/score/mean": (1, per)}), now)
    return task_id


async def pages(args: argparse.Namespace) -> dict[str, list[float]]:
    """Server time of the task page with the long curves, and of the queue (page and live
    fragment) with ``--tasks`` running tasks showing progress over ``--pending`` waiting."""
    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(str(Path(tmp) / "db.sqlite3"))
        cluster = FakeCluster(clock=now)
        task_id = curve_task(store, args.points, now)
        sids = running_tasks(store, cluster, args.tasks, now)
        for sid in sids:
            cluster.write_log(sid, "Total training steps: 500\n" + "".join(
                f"step:{s} - train/loss:{1 / s:.4f} - critic/score/mean:{s / 500:.4f}\n"
                for s in range(1, 121)))
        follower = LogFollower(store, cluster, Artifacts(tmp), max_points=500,
                               max_read_chars=1 << 20)
        follower.poll(now - 60)
        for sid in sids:
            cluster.write_log(sid, "step:121 - train/loss:0.1\n")
        follower.poll(now)
        store.tasks.bulk_load(BulkTask(
            task_id=f"mvp2-u-grpo-20251225-000000-{i:05x}", workload="grpo",
            state=TaskState.PENDING_RESOURCES, created_at=now - 1800 + i / 10, nnodes=1,
            n_gpus_per_node=8, user="u") for i in range(args.pending))
        app = create_app(Settings(shared_root=str(Path(tmp) / "shared")), store, cluster,
                         Artifacts(tmp), token=TOKEN)
        task_page = f"task, 2 curves x {args.points} points"
        urls = {task_page: f"/ui/tasks/{task_id}",
                f"queue, {args.tasks} running with progress": "/ui/queue",
                "queue live fragment": "/ui/queue?fragment=1"}

        def check(name: str, html: str) -> None:
            if name == task_page:
                assert html.count('<polyline class="series"') == 2, "no curves on the page"
            else:
                assert html.count("<progress ") == args.tasks, "no progress in the queue"

        out = await time_pages(app, TOKEN, urls, args.rounds, check)
        store.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--lines-per-s", type=float, default=10.0)
    parser.add_argument("--metrics", type=int, default=30)
    parser.add_argument("--step-every", type=int, default=10)
    parser.add_argument("--poll-s", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(host_line(), flush=True)
    share = follow(args)
    worst = print_pages(asyncio.run(pages(args)), f"page ({args.pending} pending)", 40)
    ok = share <= FOLLOW_FLOOR and worst <= PAGE_FLOOR_MS
    print(f"floors (follow {100 * FOLLOW_FLOOR:g}% of a core, pages p95 {PAGE_FLOOR_MS:g} ms):",
          "ok" if ok else "OVER")
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
