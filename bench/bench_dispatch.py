"""Dispatch gap and submit overhead of Argus on a real local Ray cluster.

    .venv/bin/python bench/bench_dispatch.py [--tasks N] [--rounds K]

Starts a local Ray cluster (head + one 4-GPU fake worker, own ports and temp dir) and
the real ``argus-api`` as a subprocess with the DEFAULT scheduler config (tick_s=1).
Workloads are the verl stand-in (examples/standin-verl), 1x4 GPUs each, so only one
runs at a time.

(a) Dispatch gap: N tasks queued at once run one after another; for each consecutive
    pair, Ray's ``start_time`` of the next job (when Ray accepted its submission) minus
    Ray's ``end_time`` of the previous one. Both times are Ray's own (one clock).
    Target: median <= 1.5 s.
(b) Overhead: time from submit to Ray RUNNING, through Argus (POST /api/v2/tasks, then
    Ray's status of ``<task_id>--a01`` polled directly every 50 ms) versus a direct
    ``JobSubmissionClient.submit_job`` of the same entrypoint, resources and runtime_env,
    interleaved in the same run. Target: ratio of medians <= 1.3. This is end-to-end
    latency, dominated by Ray starting the driver; Argus adds its reaction time (the loop
    is woken on POST) and its submit call.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from ray.job_submission import JobStatus, JobSubmissionClient

from bench.hostinfo import host_line
from tests.integration.conftest import ArgusService
from tests.integration.localray import LocalRayCluster, wait_until

DURATION_S = 1


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def dispatch_gaps(argus: ArgusService, ray: JobSubmissionClient, n: int) -> list[float]:
    ids = [argus.submit(nnodes=1, gpus=4, duration_s=DURATION_S) for _ in range(n)]
    for tid in ids:
        task = argus.wait_state(tid, {"SUCCEEDED", "FAILED", "CANCELED"}, timeout=180)
        if task["state"] != "SUCCEEDED":
            raise SystemExit(f"bench task {tid} ended {task['state']}: {task}")
    jobs = sorted((ray.get_job_info(f"{tid}--a01") for tid in ids), key=lambda j: j.start_time)
    return [(b.start_time - a.end_time) / 1000 for a, b in itertools.pairwise(jobs)]


def _until_running(ray: JobSubmissionClient, sid: str, t0: float) -> float:
    def running() -> float | None:
        try:
            status = ray.get_job_status(sid)
        except RuntimeError:  # not known to Ray yet (Argus has not submitted it)
            return None
        if status in (JobStatus.FAILED, JobStatus.STOPPED):
            raise SystemExit(f"{sid} ended {status} before RUNNING")
        return time.monotonic() - t0 if status != JobStatus.PENDING else None

    return float(wait_until(running, 120, f"{sid} to run", interval=0.05))


def _until_done(ray: JobSubmissionClient, sid: str) -> None:
    wait_until(lambda: ray.get_job_status(sid).is_terminal(), 120, f"{sid} to end")


def overhead(argus: ArgusService, ray: JobSubmissionClient, rounds: int
             ) -> tuple[list[float], list[float]]:
    via_argus: list[float] = []
    direct: list[float] = []
    entrypoint = shlex.join([
        "python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=1",
        "trainer.n_gpus_per_node=4", f"+argus_demo.duration_s={DURATION_S}",
    ])
    runtime_env = {"env_vars": {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(argus.code_path)}}
    for i in range(rounds):
        t0 = time.monotonic()
        tid = argus.submit(nnodes=1, gpus=4, duration_s=DURATION_S)
        via_argus.append(_until_running(ray, f"{tid}--a01", t0))
        _until_done(ray, f"{tid}--a01")
        argus.wait_state(tid, "SUCCEEDED", timeout=60)

        sid = f"bench-direct-{i}-{int(time.time())}"
        t0 = time.monotonic()
        ray.submit_job(entrypoint=entrypoint, submission_id=sid, runtime_env=runtime_env,
                       entrypoint_num_cpus=1, entrypoint_resources={"worker_node": 1})
        direct.append(_until_running(ray, sid, t0))
        _until_done(ray, sid)
    return via_argus, direct


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=8, help="tasks for the dispatch gap (>= 2)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved overhead rounds (>= 1)")
    args = p.parse_args()
    if args.tasks < 2 or args.rounds < 1:
        p.error("--tasks must be >= 2 and --rounds >= 1")

    cluster = LocalRayCluster()
    argus = None
    try:
        cluster.start_head()
        cluster.add_worker(gpus=4)
        root = Path(tempfile.mkdtemp(prefix="argus-bench-", dir=cluster.root))
        argus = ArgusService(cluster, root, ray_address=cluster.dashboard_url, scheduler={})
        argus.start()
        ray = JobSubmissionClient(cluster.dashboard_url)
        gaps = dispatch_gaps(argus, ray, args.tasks)
        via_argus, direct = overhead(argus, ray, args.rounds)
    finally:
        if argus is not None:
            argus.stop()
        cluster.stop()
        cluster.cleanup_files()

    ratio = statistics.median(via_argus) / statistics.median(direct)
    rows = [
        ("dispatch gap (Ray end -> next Ray submit)", gaps, "median <= 1.5 s"),
        ("submit -> RUNNING via Argus", via_argus, ""),
        ("submit -> RUNNING direct submit_job", direct, ""),
    ]
    print(host_line())
    print("default scheduler config (tick_s=1); 1x4 stand-in tasks on one 4-GPU worker")
    print(f"{'measure':44} {'n':>3} {'median s':>9} {'p90 s':>7} {'max s':>7}  target")
    for name, values, target in rows:
        print(f"{name:44} {len(values):>3} {statistics.median(values):>9.2f} "
              f"{_q(values, 0.9):>7.2f} {max(values):>7.2f}  {target}")
    print(f"{'overhead ratio (median Argus / median direct)':44} {'':>3} {ratio:>9.2f} "
          f"{'':>7} {'':>7}  <= 1.3")


if __name__ == "__main__":
    main()
