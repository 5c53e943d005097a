"""Time to heal for each node fault on a local netns cluster (head + 2 workers).

    sudo .venv/bin/python bench/bench_heal.py [--runs 3]

Prints a table (median/min/max seconds) and checks the floors: a killed watchdog is back
<= 5 s; a worker is back in the cluster <= 15 s after `ray stop --force`. The head's GCS
is killed while a Ray job runs on a worker (a driver that calls an actor every 0.5 s and
prints a timestamped tick): the outage (fault -> head.json names the restarted head and
the GCS lists every worker alive) <= 15 s, the training lost is 0 (the job SUCCEEDED, no
tick repeated: the driver never restarted), and the longest gap between ticks <= outage +
5 s. Exit 1 if a floor is missed.
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench.hostinfo import host_line
from raypool import discovery
from raypool.local.launcher import (
    LocalCluster,
    count_workers,
    down,
    node_pids,
    up,
    workers_rejoined,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = 2
FLOORS = {"watchdog killed: watchdog back": 5.0, "ray stop --force: worker back": 15.0,
          "head GCS killed: outage": 15.0, "head GCS killed: training lost (restarts)": 0.0}
RUN_S = 40.0     # the job's length; the GCS is killed KILL_AT_S into it
KILL_AT_S = 8.0
TICKER = """
import sys, time, ray
ray.init()
@ray.remote(num_cpus=0, resources={"worker_node": 0.01})
class Counter:
    def __init__(self):
        self.n = 0
    def tick(self):
        self.n += 1
        return self.n
counter = Counter.remote()
end = time.time() + float(sys.argv[1])
while time.time() < end:
    print(f"tick {ray.get(counter.tick.remote())} {time.time():.3f}", flush=True)
    time.sleep(0.5)
print("done", flush=True)
"""


def fault(c: LocalCluster, script: str, *args: str) -> None:
    env = dict(os.environ, ARGUS_LOCAL_DIR=c.state_dir,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    subprocess.run([os.path.join(ROOT, "scripts", script), *args], env=env, check=True,
                   capture_output=True, timeout=120)


def wait(predicate: Callable[[], bool], start: float, timeout_s: float = 120) -> float:
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.1)
    raise TimeoutError(f"no heal within {timeout_s:g}s")


def rejoined(c: LocalCluster, names: tuple[str, ...], since: float) -> Callable[[], bool]:
    return lambda: workers_rejoined(c, names, since)


def watchdog_killed(c: LocalCluster) -> dict[str, float]:
    old = node_pids(c, "w1", "watchdog")
    since, start = time.time(), time.monotonic()
    fault(c, "fault_kill_watchdog.sh", "local", "w1")
    back = wait(lambda: node_pids(c, "w1", "watchdog") not in ([], old), start)
    return {"watchdog killed: watchdog back": back,
            "watchdog killed: worker back": wait(rejoined(c, ("w1",), since), start)}


def ray_stop(c: LocalCluster, force: bool) -> dict[str, float]:
    since, start = time.time(), time.monotonic()
    fault(c, "fault_ray_stop.sh", "local", "w2", *(["--force"] if force else []))
    label = "ray stop --force" if force else "ray stop"
    return {f"{label}: worker back": wait(rejoined(c, ("w2",), since), start)}


def ticks(log: str) -> list[tuple[int, float]]:
    out = []
    for line in log.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "tick":
            out.append((int(words[1]), float(words[2])))
    return out


def head_killed(c: LocalCluster) -> dict[str, float]:
    """Kill the GCS under a running job; the outage and what the job lost."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    script = os.path.join(c.state_dir, "ticker.py")
    with open(script, "w") as f:
        f.write(TICKER)
    client = JobSubmissionClient(c.job_server_url)
    job = client.submit_job(entrypoint=shlex.join([sys.executable, script, f"{RUN_S:g}"]),
                            entrypoint_resources={"worker_node": 1})
    wait(lambda: len(ticks(client.get_job_logs(job))) >= 3, time.monotonic())
    time.sleep(KILL_AT_S)
    before = discovery.read_record(c.head_file, c.cluster_name).record
    assert before is not None
    start = time.monotonic()
    fault(c, "fault_kill_head_ray.sh", "local", "head")

    def back() -> bool:
        record = discovery.read_record(c.head_file, c.cluster_name).record
        return (record is not None and record.generation != before.generation
                and count_workers(record.gcs_address) == WORKERS)

    outage = wait(back, start)
    after = discovery.read_record(c.head_file, c.cluster_name).record
    assert after is not None and after.cluster_id == before.cluster_id, "a new cluster"
    clients: list[JobSubmissionClient] = []

    def ended() -> bool:
        """The job is terminal; the job server comes up after the GCS: retried."""
        try:
            if not clients:
                clients.append(JobSubmissionClient(after.job_server_url))
            return clients[0].get_job_status(job).is_terminal()
        except (ConnectionError, RuntimeError):
            return False

    wait(ended, time.monotonic(), RUN_S + 120)
    client = clients[0]
    seen = ticks(client.get_job_logs(job))
    numbers = [n for n, _ in seen]
    restarts = sum(b <= a for a, b in itertools.pairwise(numbers)) + (numbers[:1] != [1])
    lost = float(restarts + (client.get_job_status(job) != JobStatus.SUCCEEDED))
    gap = max(b - a for (_, a), (_, b) in itertools.pairwise(seen))
    return {"head GCS killed: outage": outage,
            "head GCS killed: training lost (restarts)": lost,
            "head GCS killed: longest pause in the run": gap,
            "head GCS killed: pause - outage": gap - outage}


def stale_record(c: LocalCluster) -> dict[str, float]:
    fault(c, "fault_stale_head.sh", "local", "head")
    fault(c, "fault_ray_stop.sh", "local", "w2", "--force")
    wait(lambda: not node_pids(c, "w2", "raylet"), time.monotonic())
    time.sleep(3)  # the bench measures from the record turning fresh, not from the fault
    since, start = time.time(), time.monotonic()
    fault(c, "fault_stale_head.sh", "local", "head", "--restore")
    return {"stale head.json fresh again: worker joins": wait(rejoined(c, ("w2",), since),
                                                               start)}


def head_moved(c: LocalCluster) -> dict[str, float]:
    since, start = time.time(), time.monotonic()
    fault(c, "fault_move_head.sh", "local", "head")
    c.nodes[:] = LocalCluster.load(c.state_dir).nodes
    return {"head moved: all workers follow": wait(rejoined(c, ("w1", "w2"), since), start)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of the cheap faults")
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("bench_heal needs root and `ip` (netns nodes)", file=sys.stderr)
        return 2
    print(host_line(), flush=True)
    state_dir = f"/tmp/arb-{secrets.token_hex(3)}"
    t0 = time.monotonic()
    cluster = up(state_dir, WORKERS, "netns", ttl_s=8)
    print(f"cluster up (head + {WORKERS} workers, one after another): "
          f"{time.monotonic() - t0:.1f}s")
    samples: dict[str, list[float]] = {}
    plan: list[tuple[Callable[[], dict[str, float]], int]] = [
        (lambda: watchdog_killed(cluster), args.runs),
        (lambda: ray_stop(cluster, False), args.runs),
        (lambda: ray_stop(cluster, True), args.runs),
        (lambda: head_killed(cluster), args.runs),
        (lambda: stale_record(cluster), 1),
        (lambda: head_moved(cluster), 1),
    ]
    try:
        for run, count in plan:
            for _ in range(count):
                for key, value in run().items():
                    samples.setdefault(key, []).append(value)
    finally:
        problems = down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    print(f"\n{'fault: measured':46} {'runs':>4} {'median':>7} {'min':>6} {'max':>6} floor")
    missed = 0
    pauses = samples.get("head GCS killed: pause - outage", [])
    if pauses and statistics.median(pauses) > 5.0:
        print("MISSED: the longest pause in the run is more than the outage + 5 s")
        missed += 1
    for key, values in samples.items():
        median = statistics.median(values)
        floor = FLOORS.get(key)
        verdict = "" if floor is None else f"<= {floor:g}s " + ("ok" if median <= floor
                                                                 else "MISSED")
        missed += floor is not None and median > floor
        print(f"{key:46} {len(values):>4} {median:>7.1f} {min(values):>6.1f} "
              f"{max(values):>6.1f} {verdict}")
    if problems:
        print("teardown:", problems)
    return 1 if missed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
