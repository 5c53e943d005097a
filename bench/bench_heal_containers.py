"""Time to heal for each node fault on the compose cluster (CPU profile: head + 2 workers,
one container each), next to bench_heal.py's figures for netns nodes on the host.

    sudo .venv/bin/python bench/bench_heal_containers.py [--runs 1]

Runs ``scripts/container_env.sh setup`` first (not timed), then starts the cluster with
``docker compose up`` from the built image, the task service in the head container
(``scripts/20_start_api.sh``), and injects every fault through the fault scripts' docker
branches (and docker's own restart/kill/start). Each head fault (the GCS killed, the head's
Ray stopped with ``ray stop --force``, ``docker restart`` of the head) strikes a Ray job on
a worker (a driver that calls an actor every 0.5 s and prints a timestamped tick, as in
bench_heal.py); once the head is back (after a restart: the service started again, as an
operator does) a stand-in task is submitted through the service and the time from the POST
to Ray's start of its job is taken, next to the same figure on a quiet cluster; the POST
waits for the job server (the dashboard starts after the GCS), whose return is timed too.
``--head-only`` runs the head faults alone.

Prints a table (median/min/max seconds) and checks the floors: compose up -> both workers
joined <= 30 s; head GCS killed -> the same cluster back with both workers (raylets kept)
<= 15 s; head container restarted -> the same <= 30 s; training lost per head fault 0
(the job SUCCEEDED, no tick repeated); the longest pause between ticks <= outage + 5 s;
worker back after ``ray stop --force`` <= 15 s; worker container started -> joined <= 10
s; a task submitted once the job server is back reaches Ray within 1.5 s (bench_dispatch.py's
dispatch floor). Exit 1 if a floor is missed, 2 if this host cannot run Docker.
"""

from __future__ import annotations

import argparse
import itertools
import json
import secrets
import shutil
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_heal import TICKER, ticks
from bench.hostinfo import host_line
from raypool.headrecord import HeadRecord
from tests.container.compose import (
    REPO,
    ComposeCluster,
    HostCannotRunDocker,
    poll,
    setup,
)

UP = "compose up: both workers joined"
HEAD_FAULTS = ("head GCS killed", "head Ray stopped (--force)", "head container restarted")
FLOORS = {UP: 30.0, "head GCS killed: outage": 15.0, "head container restarted: outage": 30.0,
          "ray stop --force: worker back": 15.0, "worker container started: joined": 10.0,
          **{f"{f}: training lost (restarts)": 0.0 for f in HEAD_FAULTS},
          **{f"{f}: POST -> Ray job start": 1.5 for f in HEAD_FAULTS}}
CONF = "/run/argus-node/supervisord.conf"
RUN_S = 60.0  # the ticker's length; the head fault strikes once it ticked 3 times
TOKEN = f"bench-{secrets.token_hex(8)}"


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


def service_env(c: ComposeCluster) -> dict[str, str]:
    return {"ARGUS_API_TOKEN": TOKEN, "ARGUS_API_CONTAINER": c.head}


def start_service(c: ComposeCluster) -> None:
    c.script("20_start_api.sh", env=service_env(c), timeout_s=120)


def api(c: ComposeCluster, path: str, body: bytes | None = None) -> dict:
    request = urllib.request.Request(
        c.api_url + path, data=body, method="POST" if body is not None else "GET",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def job_server_answers(c: ComposeCluster) -> bool:
    try:
        with urllib.request.urlopen(f"{c.job_server_url}/api/version", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def dispatch(c: ComposeCluster) -> float:
    """Seconds from the POST of a short stand-in task to Ray's start of its job (Ray's own
    ``start_time``: when the job server accepted the submission); waits for its end."""
    from ray.job_submission import JobSubmissionClient

    spec = yaml.safe_dump({
        "workload": "ppo", "code_path": "/private/code/standin-verl", "model_id": "org/model",
        "train_file": "/private/data/train.parquet", "val_file": "/private/data/val.parquet",
        "nnodes": 1, "n_gpus_per_node": 1, "total_training_steps": 2,
        "overrides": ["+argus_demo.duration_s=2"]})
    posted = time.time()
    task_id = api(c, "/api/v2/tasks", spec.encode())["task_id"]
    infos = []

    def started() -> bool:
        """The job server may still be coming up after a head fault: asked again."""
        try:
            infos[:] = [JobSubmissionClient(c.job_server_url).get_job_info(
                f"{task_id}--a01")]
        except (ConnectionError, RuntimeError):  # not up, or not submitted yet
            return False
        return infos[0].start_time is not None

    poll(started, 120, f"{task_id} reaches Ray", 0.1)
    poll(lambda: api(c, f"/api/v2/tasks/{task_id}")["state"] == "SUCCEEDED", 120,
         f"{task_id} succeeds", 0.5)
    return infos[0].start_time / 1000 - posted


def head_fault(c: ComposeCluster, name: str, inject: Callable[[], object],
               restarts_service: bool = False) -> dict[str, float]:
    """``inject`` under a running Ray job: the outage, what the job lost, its longest pause,
    and how soon a task submitted once the head is back reaches Ray."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(c.job_server_url)
    job = client.submit_job(entrypoint=f"python3 /private/ticker.py {RUN_S:g}",
                            entrypoint_resources={"worker_node": 1})
    poll(lambda: len(ticks(client.get_job_logs(job))) >= 3, 120, "the ticker ticks", 0.2)
    before, raylets = c.head_record(), c.raylet_pids()
    start = time.monotonic()
    inject()
    outage = poll_outage(c, before, raylets, start)
    # The dashboard (the job server) starts after the GCS: jobs can be submitted from then.
    poll(lambda: job_server_answers(c), 120, "the job server answers", 0.1)
    job_server = time.monotonic() - start
    if restarts_service:
        start_service(c)
    status: list[JobStatus] = []

    def ended() -> bool:
        """The job is terminal; the job server comes up after the GCS: retried."""
        try:
            status[:] = [JobSubmissionClient(c.job_server_url).get_job_status(job)]
        except (ConnectionError, RuntimeError):
            return False
        return status[0].is_terminal()

    posted = dispatch(c)
    poll(ended, RUN_S + 120, "the ticker ends", 0.5)
    seen = ticks(JobSubmissionClient(c.job_server_url).get_job_logs(job))
    numbers = [n for n, _ in seen]
    restarts = sum(b <= a for a, b in itertools.pairwise(numbers)) + (numbers[:1] != [1])
    gap = max(b - a for (_, a), (_, b) in itertools.pairwise(seen))
    return {f"{name}: outage": outage,
            f"{name}: job server back": job_server,
            f"{name}: training lost (restarts)":
                float(restarts + (status[0] != JobStatus.SUCCEEDED)),
            f"{name}: longest pause in the run": gap,
            f"{name}: pause - outage": gap - outage,
            f"{name}: POST -> Ray job start": posted}


def head_killed(c: ComposeCluster) -> dict[str, float]:
    return head_fault(c, HEAD_FAULTS[0],
                      lambda: c.script("fault_kill_head_ray.sh", "docker", c.head))


def head_ray_stopped(c: ComposeCluster) -> dict[str, float]:
    return head_fault(c, HEAD_FAULTS[1],
                      lambda: c.script("fault_ray_stop.sh", "docker", c.head, "--force"))


def head_restarted(c: ComposeCluster) -> dict[str, float]:
    return head_fault(c, HEAD_FAULTS[2],
                      lambda: c.docker_cmd("restart", c.head, timeout_s=90),
                      restarts_service=True)


def head_faults(c: ComposeCluster) -> dict[str, float]:
    """The head faults with the service in the head (started for them only: the worker
    faults' check for orphans would count it), after the quiet cluster's dispatch."""
    start_service(c)
    try:
        out = {"quiet cluster: POST -> Ray job start": dispatch(c)}
        for run in (head_killed, head_ray_stopped, head_restarted):
            out.update(run(c))
    finally:
        c.script("21_stop_api.sh", env=service_env(c), check=False)
    return out


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
    parser.add_argument("--head-only", action="store_true",
                        help="only the head faults (and compose up, stop)")
    args = parser.parse_args()
    try:
        setup_s = setup()
    except HostCannotRunDocker as exc:
        print(exc, file=sys.stderr)
        return 2
    print(host_line(), flush=True)
    print(f"scripts/container_env.sh setup: {setup_s:.1f}s")
    cluster = ComposeCluster(prefix="argus-bench")
    samples: dict[str, list[float]] = {}
    plan: list[Callable[[ComposeCluster], dict[str, float]]] = [head_faults] if args.head_only \
        else [watchdog_killed, lambda c: ray_stop(c, False), lambda c: ray_stop(c, True),
              head_faults, worker_container, stale_record]
    stop_s = None
    try:
        samples[UP] = [cluster.up()]
        shutil.copytree(REPO / "examples" / "standin-verl",
                        cluster.shared / "code" / "standin-verl",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (cluster.shared / "ticker.py").write_text(TICKER)
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
    for fault in HEAD_FAULTS:
        pauses = samples.get(f"{fault}: pause - outage", [])
        if pauses and statistics.median(pauses) > 5.0:
            print(f"MISSED: {fault}: the longest pause in the run is more than the outage + 5 s")
            missed += 1
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
