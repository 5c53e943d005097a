"""What a waiting task's queue position costs to read, with a long queue (SQLite).

A task's page (``GET /api/v2/tasks/{id}``: ``Store.task_page``) counts the waiting rows
ahead of a waiting task; a list page (``GET /api/v2/tasks``: ``list_tasks``) and one
user's part of the queue (``GET /api/v2/queue?user=``: ``queue``) read the positions of
their waiting rows. This bench fills a database of ``--waiting`` (50,000) waiting tasks,
a tenth of them at a higher priority, among ``--finished`` (10,000) finished ones, and
times each read ``--rounds`` (30) times in one process, through the store as the service
calls it: the page of the first, the middle and the last waiting task; the newest list
page (50 tasks at the back of the queue) and the oldest waiting ones' (its front); one
user's first 50 waiting tasks. It prints the median of each, in ms.

``--compare REV`` runs the same reads on REV's code (a git revision, or another
checkout's directory) and this checkout's, each in its own process with its own
database, ``--runs`` (2) runs each alternating (REV, this, this, REV), and prints both
medians and the ratio this / REV of each read.

    .venv/bin/python bench/bench_positions.py [--waiting 50000] [--rounds 30]
                                              [--compare REV [--runs 2]]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.*

from bench.bench_api import _use_code, alternation, checkout
from bench.hostinfo import calibration_ms, host_line

USERS = 20
PAGE = 50


def fill(db: str, waiting: int, finished: int) -> list[tuple[str, Callable[[], object]]]:
    """The database, and the reads to time (name, call), with the service's store."""
    from service.domain.states import TaskState
    from service.domain.writes import BulkTask
    from service.store.writer import Store

    rng = random.Random(5)
    total = waiting + finished
    done = set(rng.sample(range(total), finished))
    store = Store(db)
    store.tasks.bulk_load(
        BulkTask(task_id=f"t{i:07d}", workload="ppo", created_at=1.0 + i,
                 user=f"user{i % USERS:02d}",
                 state=TaskState.SUCCEEDED if i in done else TaskState.QUEUED,
                 priority=5 if rng.random() < 0.1 else 0)
        for i in range(total))
    queue = store.tasks.queue(limit=waiting)[0]
    first, middle, last = queue[0], queue[len(queue) // 2], queue[-1]
    oldest = min(t.seq for t in queue)
    return [
        ("task page, first waiting", lambda: store.task_page(first.task_id)),
        ("task page, middle", lambda: store.task_page(middle.task_id)),
        ("task page, last", lambda: store.task_page(last.task_id)),
        (f"list, newest {PAGE}", lambda: store.tasks.list_tasks(limit=PAGE)),
        (f"list, oldest {PAGE} waiting", lambda: store.tasks.list_tasks(
            limit=PAGE, before_seq=oldest + PAGE + 1)),
        (f"queue of one user, {PAGE}", lambda: store.tasks.queue("user07", limit=PAGE)),
    ]


def measure(args: argparse.Namespace) -> dict[str, float]:
    """Each read's median (ms) on this process's code."""
    with tempfile.TemporaryDirectory(prefix="argus-bench-positions-") as tmp:
        reads = fill(str(Path(tmp) / "tasks.sqlite3"), args.waiting, args.finished)
        out = {}
        for name, call in reads:
            times = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            out[name] = statistics.median(times) * 1e3
        return out


def _child(code: str, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--code", code, "--waiting", str(args.waiting),
           "--finished", str(args.finished), "--rounds", str(args.rounds), "--json"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                     cwd=code).stdout.splitlines()[-1])


def compare(args: argparse.Namespace) -> None:
    runs: list[list[dict[str, float]]] = [[], []]
    with checkout(args.compare) as old:
        codes = (old, str(Path(__file__).resolve().parents[1]))
        for order in alternation(args.runs):
            for k in order:
                runs[k].append(_child(codes[k], args))
    print(f"{'read (median of the runs, ms)':<32}{args.compare[:12]:>12}{'this':>10}"
          f"{'this/REV':>10}")
    for name in runs[1][0]:
        before, after = (statistics.median(r[name] for r in side) for side in runs)
        print(f"{name:<32}{before:>12.3f}{after:>10.3f}{after / before:>9.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--waiting", type=int, default=50_000)
    p.add_argument("--finished", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--compare", metavar="REV")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--code", help=argparse.SUPPRESS)  # a child: import this checkout
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.waiting < 2 * PAGE:
        p.error(f"--waiting must be at least {2 * PAGE}")
    _use_code(args.code)
    if args.json:
        print(json.dumps(measure(args)))
        return 0
    print(host_line(), flush=True)
    print(f"{args.waiting} waiting (a tenth at a higher priority), {args.finished} finished, "
          f"{args.rounds} reads each")
    if args.compare:
        compare(args)
    else:
        for name, ms in measure(args).items():
            print(f"{name:<32}{ms:>10.3f} ms")
    print(f"calibration after the run: {calibration_ms():.0f} ms (before: the host line above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
