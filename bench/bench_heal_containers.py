"""Time to heal for each node fault on the compose cluster (CPU profile: head + 2 workers,
one container each), next to bench_heal.py's figures for netns nodes on the host.

    sudo .venv/bin/python bench/bench_heal_containers.py [--runs 1]

Runs ``scripts/container_env.sh setup`` first (not timed), then starts the cluster with
``docker compose up`` from the built image and injects every fault through the fault
scripts' docker branches (and docker's own restart/kill/start). Prints a table
(median/min/max seconds) and checks the floors: compose up -> both workers joined
<= 30 s; head GCS killed -> the same cluster back with both workers (raylets kept) <= 15 s;
head container restarted -> the same <= 30 s; worker container started -> joined
<= 10 s. Exit 1 if a floor is missed, 2 if this host cannot run Docker.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raypool.headrecord import HeadRecord
from tests.container.compose import (
    ComposeCluster,
    HostCannotRunDocker,
    poll,
    setup,
)

UP = "compose up: both workers joined"
FLOORS = {UP: 30.0, "head GCS killed: outage": 15.0, "head container restarted: outage": 30.0,
          "worker container started: joined": 10.0}
CONF = "/run/argus-node/supervisord.conf"


def healed(c: ComposeCluster, since: float, start: float, *containers: str) -> float:
    poll(lambda: c.rejoined(containers, since), 120, "heal", 0.1)
    took = time.monotonic() - start
    poll(c.clean, 30, "no orphaned process left")
    return took


def watchdog_pid(c: ComposeCluster, container: str) -> str:
    return c.exec(container, "supervisorctl", "-c", CONF, "pid", "argus_worker_watchdog",
                  check=False).stdout.strip()


def watchdog_killed(c: ComposeCluster) -> dict[str, float]:
    worker = c.workers[0]
    old = watchdog_pid(c, worker)
    since, start = time.time(), time.monotonic()
    c.script("fault_kill_watchdog.sh", "docker", worker)
    poll(lambda: watchdog_pid(c, worker) not in ("", "0", old), 30, "watchdog back", 0.1)
    back = time.monotonic() - start
    return {"watchdog killed: watchdog back": back,
            "watchdog killed: worker back": healed(c, since, start, worker)}


def ray_stop(c: ComposeCluster, force: bool) -> dict[str, float]:
    worker = c.workers[1]
    since, start = time.time(), time.monotonic()
    c.script("fault_ray_stop.sh", "docker", worker, *(["--force"] if force else []))
    label = "ray stop --force" if force else "ray stop"
    return {f"{label}: worker back": healed(c, since, start, worker)}


def poll_outage(c: ComposeCluster, before: HeadRecord | None, raylets: dict[str, list[int]],
                start: float) -> float:
    """Seconds from ``start`` until the head is back as the same cluster with both workers
    (the embedded GCS store); a worker that restarted its raylet fails the bench."""
    assert before is not None
    poll(lambda: c.same_cluster_back(before), 120, "the same cluster back", 0.2)
    took = time.monotonic() - start
    if c.raylet_pids() != raylets:
        raise RuntimeError("a worker restarted its raylet during a head fault")
    return took


def head_killed(c: ComposeCluster) -> dict[str, float]:
    before, raylets = c.head_record(), c.raylet_pids()
    start = time.monotonic()
    c.script("fault_kill_head_ray.sh", "docker", c.head)
    return {"head GCS killed: outage": poll_outage(c, before, raylets, start)}


def head_restarted(c: ComposeCluster) -> dict[str, float]:
    before, raylets = c.head_record(), c.raylet_pids()
    start = time.monotonic()
    c.docker_cmd("restart", c.head, timeout_s=90)
    return {"head container restarted: outage": poll_outage(c, before, raylets, start)}


def worker_container(c: ComposeCluster) -> dict[str, float]:
    worker = c.workers[1]
    c.docker_cmd("kill", worker)
    poll(lambda: c.alive_worker_count() == 1, 90, "the GCS sees the worker leave", 0.2)
    since, start = time.time(), time.monotonic()
    c.docker_cmd("start", worker)
    return {"worker container started: joined": healed(c, since, start, worker)}


def stale_record(c: ComposeCluster) -> dict[str, float]:
    worker = c.workers[1]
    c.script("fault_stale_head.sh", "docker", c.head)
    c.script("fault_ray_stop.sh", "docker", worker, "--force")
    poll(lambda: c.alive_worker_count() == 1, 90, "the GCS sees the worker leave", 0.2)
    since, start = time.time(), time.monotonic()
    c.script("fault_stale_head.sh", "docker", c.head, "--restore")
    return {"stale head.json fresh again: worker joins": healed(c, since, start, worker)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each fault")
    args = parser.parse_args()
    try:
        setup_s = setup()
    except HostCannotRunDocker as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"scripts/container_env.sh setup: {setup_s:.1f}s")
    cluster = ComposeCluster(prefix="argus-bench")
    samples: dict[str, list[float]] = {}
    plan: list[Callable[[ComposeCluster], dict[str, float]]] = [
        watchdog_killed, lambda c: ray_stop(c, False), lambda c: ray_stop(c, True),
        head_killed, head_restarted, worker_container, stale_record,
    ]
    stop_s = None
    try:
        samples[UP] = [cluster.up()]
        for _ in range(args.runs):
            for run in plan:
                for key, value in run(cluster).items():
                    samples.setdefault(key, []).append(value)
        start = time.monotonic()
        cluster.compose("stop", timeout_s=120)
        stop_s = time.monotonic() - start
    finally:
        cluster.down()
        cluster.remove_shared()
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
    if stop_s is not None:
        print(f"{'docker compose stop (grace period 30 s)':46} {1:>4} {stop_s:>7.1f}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
