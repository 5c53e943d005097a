"""Time to heal for each node fault on a local netns cluster (head + 2 workers).

    sudo .venv/bin/python bench/bench_heal.py [--runs 3]

Prints a table (median/min/max seconds) and checks the floors: a killed watchdog is back
<= 5 s; a worker is back in the cluster <= 15 s after `ray stop --force`; every worker is
back <= 30 s after the head's GCS is killed. Exit 1 if a floor is missed.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from raypool.local import LocalCluster, down, node_pids, up, workers_rejoined

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = 2
FLOORS = {"watchdog killed: watchdog back": 5.0, "ray stop --force: worker back": 15.0,
          "head GCS killed: all workers back": 30.0}


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


def head_killed(c: LocalCluster) -> dict[str, float]:
    since, start = time.time(), time.monotonic()
    fault(c, "fault_kill_head_ray.sh", "local", "head")
    return {"head GCS killed: all workers back": wait(rejoined(c, ("w1", "w2"), since), start)}


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
