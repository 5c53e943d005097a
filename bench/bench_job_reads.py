"""What the reconcile's read of every attempt costs on a real local Ray: one
``get_job_info`` per job against one ``list_jobs``, and what ``RayCluster.job_infos``
(which picks between them on measured costs) takes once it has chosen.

    .venv/bin/python bench/bench_job_reads.py [--running N] [--history H1,H2,...] [--rounds K]

Starts a local Ray cluster (head + one worker, own ports and temp dir), submits N jobs
that sleep (the attempts on the cluster), then for each H grows the head's history to H
ended jobs more and times, K rounds each (median): the N reads one by one, one listing, and
``job_infos`` after two warm-up batches (the first learns the per-job cost, the second the
listing's). Wall time is the tick's wait; CPU is this process's (the service's) own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray.job_submission import JobStatus, JobSubmissionClient

from bench.hostinfo import host_line
from service.cluster.address import RayAddress
from service.cluster.raycluster import RayCluster
from service.config import Settings
from tests.integration.localray import LocalRayCluster, wait_until


def timed(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of ``fn`` over ``rounds`` runs."""
    walls, cpus = [], []
    for _ in range(rounds):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - w0) * 1000)
        cpus.append((time.process_time() - c0) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def submit_all(ray: JobSubmissionClient, prefix: str, n: int, entrypoint: str,
               until: set[JobStatus]) -> list[str]:
    sids = [ray.submit_job(entrypoint=entrypoint, submission_id=f"{prefix}-{i:04d}")
            for i in range(n)]
    wait_until(lambda: all(ray.get_job_status(s) in until for s in sids), 60 + 3 * n,
               f"{n} jobs {prefix} to reach {sorted(s.value for s in until)}")
    return sids


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--running", type=int, default=40, help="jobs on the cluster (sleeping)")
    p.add_argument("--history", default="0,100,300",
                   help="ended jobs on the head, in steps (comma-separated, growing)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    steps = [int(h) for h in args.history.split(",")]
    if args.running < 1 or args.rounds < 1 or steps != sorted(steps) or steps[0] < 0:
        p.error("--running and --rounds must be >= 1, --history growing from >= 0")

    cluster = LocalRayCluster()
    adapter = None
    try:
        cluster.start_head()
        cluster.add_worker(gpus=0, cpus=4)
        ray = JobSubmissionClient(cluster.dashboard_url)
        running = submit_all(ray, "run", args.running, "sleep 3600", {JobStatus.RUNNING})
        print(host_line())
        print(f"{args.running} jobs running; {args.rounds} rounds a figure (median), "
              f"ms; list/job_infos wall includes the whole history")
        print(f"{'ended':>6} {'jobs':>5} | {'per-job wall':>12} {'cpu':>5} | "
              f"{'list wall':>9} {'cpu':>5} | {'job_infos wall':>14} {'cpu':>5} {'chose':>7}")
        ended = 0
        for step in steps:
            if step > ended:
                submit_all(ray, f"h{step}", step - ended, "true", {JobStatus.SUCCEEDED})
                ended = step
            one_by_one = timed(lambda: [ray.get_job_info(s) for s in running], args.rounds)
            listing = timed(ray.list_jobs, args.rounds)
            if adapter is not None:
                adapter.close()
            adapter = RayCluster(Settings(ray_timeout_s=30),
                                 RayAddress(cluster.dashboard_url, cluster.gcs_address))
            for _ in range(2):  # learns the per-job cost, then the listing's
                adapter.job_infos(running)
            chose = "list" if adapter.read_costs().use_list(len(running)) else "per-job"
            infos = timed(lambda a=adapter: a.job_infos(running), args.rounds)
            got = adapter.job_infos(running)
            if len(got) != len(running):
                raise SystemExit(f"job_infos found {len(got)} of {len(running)} jobs")
            total = len(ray.list_jobs())
            print(f"{ended:>6} {total:>5} | {one_by_one[0]:>12.1f} {one_by_one[1]:>5.1f} | "
                  f"{listing[0]:>9.1f} {listing[1]:>5.1f} | {infos[0]:>14.1f} "
                  f"{infos[1]:>5.1f} {chose:>7}")
    finally:
        if adapter is not None:
            adapter.close()
        cluster.stop()
        cluster.cleanup_files()


if __name__ == "__main__":
    main()
