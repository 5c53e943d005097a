"""Runtime tier: real `argus-node run` (supervisord + watchdogs + Ray) per node in its own
network + PID namespace, with every fault the runtime must heal injected by
scripts/fault_*.sh: a killed watchdog, `ray stop` (plain and --force) on a worker, the
head's GCS killed (the same cluster comes back from its store: workers keep their raylets),
a stale head.json, a head moved to a new address.

Each test leaves the cluster healed (head + 2 workers), which is what it asserts.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from raypool import discovery
from raypool.headrecord import HeadRecord
from raypool.health import alive_workers, list_nodes
from raypool.local.launcher import (
    LocalCluster,
    count_workers,
    down,
    node_pids,
    up,
    workers_rejoined,
)
from raypool.procs import RAY_TAG_ENV, tagged_processes

from .waiting import poll

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(600)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
WORKERS = 2

if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare") \
        or not shutil.which("nsenter"):
    pytest.skip("runtime tier needs root plus `ip`, `unshare` and `nsenter` "
                "(nodes run in network + PID namespaces)", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    state_dir = f"/tmp/arl-{secrets.token_hex(3)}"
    try:
        yield up(state_dir, WORKERS, "netns", ttl_s=8, timeout_s=120)
    finally:
        if os.path.exists(os.path.join(state_dir, "local.json")):
            problems = down(state_dir)
            assert problems == [], problems
        shutil.rmtree(state_dir, ignore_errors=True)


def fault(script: str, *args: str, state_dir: str) -> None:
    env = dict(os.environ, ARGUS_LOCAL_DIR=state_dir,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    subprocess.run([os.path.join(SCRIPTS, script), *args], env=env, check=True,
                   capture_output=True, text=True, timeout=120)


def head_record(c: LocalCluster) -> HeadRecord | None:
    return discovery.read_record(c.head_file, c.cluster_name).record


def workers_alive(c: LocalCluster) -> int:
    record = head_record(c)
    return 0 if record is None else count_workers(record.gcs_address)


def healed(c: LocalCluster, since: float = 0.0, *names: str) -> Callable[[], bool]:
    return lambda: workers_rejoined(c, names, since)


def one_raylet_each(c: LocalCluster) -> bool:
    return all(len(node_pids(c, n.name, "raylet")) == 1 for n in c.nodes[1:])


def test_head_and_two_workers_join(cluster):
    assert workers_alive(cluster) == WORKERS
    record = head_record(cluster)
    assert record is not None and record.job_server_url == cluster.job_server_url
    nodes = list_nodes(record.gcs_address)
    assert sum(n.alive and n.is_head for n in nodes) == 1
    head = next(n for n in nodes if n.is_head)
    assert head.resources.get("CPU", 0) == 0 and head.resources.get("GPU", 0) == 0
    for worker in alive_workers(nodes):
        assert worker.resources["GPU"] == 4 and worker.resources["worker_node"] == 100
    assert one_raylet_each(cluster)


def node_status(c: LocalCluster, name: str) -> dict:
    """`argus-node status --json` with the node's own ARGUS_* environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    env.update(c.node(name).env)
    done = subprocess.run([sys.executable, "-m", "raypool.cli", "status", "--json"], env=env,
                          capture_output=True, text=True, timeout=60)
    status = json.loads(done.stdout)
    assert done.returncode == (0 if status["ok"] else 1), done.stderr
    return status


def settled_status(c: LocalCluster, name: str, timeout_s: float = 30) -> dict:
    """A worker's status once it reports ok: its raylet is in the GCS (what the fixture
    waits for) a moment before its watchdog has checked and noted the join."""
    seen: list[dict] = []
    poll(lambda: seen.append(node_status(c, name)) or seen[-1]["ok"], timeout_s,
         f"{name} reports itself ok", lambda: json.dumps(seen[-1:]))
    return seen[-1]


def test_status_reports_each_node(cluster):
    record = head_record(cluster)
    head = node_status(cluster, "head")
    assert head["ok"] and head["role"] == "head" and head["ray"] == "healthy"
    assert set(head["programs"]) >= {"argus_head_watchdog", "argus_head_publisher"}
    assert head["head_record"]["fresh"]
    assert head["head_record"]["generation"] == record.generation
    for name in ("w1", "w2"):
        worker = settled_status(cluster, name)
        assert worker["ok"] and worker["role"] == "worker" and worker["ray"] == "joined"
        assert worker["programs"]["argus_worker_watchdog"] == "RUNNING"
        assert worker["head_record"]["gcs_address"] == record.gcs_address


def test_killed_watchdog_is_restarted_and_node_rejoins(cluster):
    old = node_pids(cluster, "w1", "watchdog")
    since = time.time()
    fault("fault_kill_watchdog.sh", "local", "w1", state_dir=cluster.state_dir)
    poll(lambda: node_pids(cluster, "w1", "watchdog") not in ([], old), 5,
         "supervisord restarts the worker watchdog")
    poll(lambda: healed(cluster, since, "w1")() and one_raylet_each(cluster), 30,
         "w1 back, one raylet")


def new_raylet(c: LocalCluster, name: str, old: list[int]) -> Callable[[], bool]:
    return lambda: node_pids(c, name, "raylet") not in ([], old)


def test_ray_stop_on_worker_heals(cluster):
    old = node_pids(cluster, "w2", "raylet")
    since = time.time()
    fault("fault_ray_stop.sh", "local", "w2", state_dir=cluster.state_dir)
    poll(new_raylet(cluster, "w2", old), 20, "w2's watchdog starts a new raylet")
    poll(lambda: healed(cluster, since, "w2")() and one_raylet_each(cluster), 30, "w2 rejoins")


def test_ray_stop_force_heals_and_kills_orphaned_driver(cluster):
    from ray.job_submission import JobSubmissionClient

    marker = f"argus-orphan-probe-{secrets.token_hex(3)}"
    client = JobSubmissionClient(cluster.job_server_url)
    job_id = client.submit_job(entrypoint=f"python -c 'import time; time.sleep(900)' {marker}",
                      entrypoint_resources={"worker_node": 1})

    def driver_node() -> str | None:
        for node in cluster.nodes[1:]:
            tag = node.settings.node_tag
            if any(marker in " ".join(p.cmdline()) for p in tagged_processes(RAY_TAG_ENV, tag)):
                return node.name
        return None

    def driver_started() -> bool:
        status = client.get_job_status(job_id)
        assert not status.is_terminal(), client.get_job_info(job_id).message
        return driver_node() is not None

    poll(driver_started, 60, "the job driver runs on a worker")
    name = driver_node()
    assert name is not None
    old = node_pids(cluster, name, "raylet")
    since = time.time()
    fault("fault_ray_stop.sh", "local", name, "--force", state_dir=cluster.state_dir)
    poll(new_raylet(cluster, name, old), 20, f"{name}'s watchdog starts a new raylet")
    poll(lambda: healed(cluster, since, name)() and one_raylet_each(cluster), 45,
         f"{name} rejoins")
    poll(lambda: driver_node() is None, 10, "the orphaned driver is gone after the heal")


def test_killed_head_gcs_comes_back_as_the_same_cluster_and_workers_keep_raylets(cluster):
    poll(lambda: healed(cluster, 0.0, "w1", "w2")() and one_raylet_each(cluster), 45,
         "a settled cluster (the last fault healed)")
    before = head_record(cluster)
    assert before is not None and before.cluster_id
    raylets = {name: node_pids(cluster, name, "raylet") for name in ("w1", "w2")}
    fault("fault_kill_head_ray.sh", "local", "head", state_dir=cluster.state_dir)
    poll(lambda: (r := head_record(cluster)) is not None and r.generation != before.generation,
         60, "head.json shows a new generation")
    poll(lambda: workers_alive(cluster) == WORKERS, 45, "every worker alive on the new GCS")
    after = head_record(cluster)
    assert after is not None and after.cluster_id == before.cluster_id  # the embedded store
    assert {name: node_pids(cluster, name, "raylet") for name in raylets} == raylets
    assert len(node_pids(cluster, "head", "gcs")) == 1


def test_stale_head_json_blocks_new_joins_until_fresh(cluster):
    fault("fault_stale_head.sh", "local", "head", state_dir=cluster.state_dir)
    try:
        # joined workers keep their working connection
        assert workers_alive(cluster) == WORKERS
        fault("fault_ray_stop.sh", "local", "w2", "--force", state_dir=cluster.state_dir)
        poll(lambda: node_pids(cluster, "w2", "raylet") == [], 20, "w2's Ray is gone")
        poll(lambda: workers_alive(cluster) == WORKERS - 1, 45, "the GCS sees w2 leave")
        # with only a stale record, w2 must not join: watch several poll periods
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            assert workers_alive(cluster) == WORKERS - 1, "w2 joined through a stale record"
            time.sleep(0.5)
    finally:
        fault("fault_stale_head.sh", "local", "head", "--restore", state_dir=cluster.state_dir)
    poll(healed(cluster, 0.0, "w2"), 30, "w2 joins once the record is fresh again")


def test_workers_follow_a_moved_head(cluster):
    before = head_record(cluster)
    assert before is not None
    fault("fault_move_head.sh", "local", "head", state_dir=cluster.state_dir)
    reloaded = LocalCluster.load(cluster.state_dir)
    cluster.nodes[:] = reloaded.nodes
    after = head_record(cluster)
    assert after is not None and after.head_ip != before.head_ip
    poll(lambda: healed(cluster, 0.0, "w1", "w2")() and one_raylet_each(cluster), 60,
         "every worker follows the head to its new address")
