"""Runtime tier: node names reach Ray, and the node health checks publish a bad node and
its healing (issue 55, operators' day two).

A head and one worker, each a real ``argus-node run`` (supervisord, watchdogs, the
``argus_node_health`` program) on this host's IP with a block of Ray ports, fake GPUs and
the stand-in ``nvidia-smi`` (``ARGUS_FAKE_GPUS=standin``), health checks every
:data:`INTERVAL_S`. The worker's stand-in is planted bad (an XID 79 in the kernel log it
reports): its health file must say unhealthy, with the XID as the reason, within two
intervals; the fault removed, healthy again within two intervals. No root needed (~1 min).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterator

import pytest

from raypool.config import detect_node_ip
from raypool.deadline import Deadline
from raypool.health import list_nodes
from raypool.local.launcher import (
    LocalCluster,
    down,
    start_node,
    wait_for_head,
    wait_for_workers,
)
from raypool.local.ports import PORT_BLOCK, free_port_block, port_args
from raypool.local.state import LocalNode

from .waiting import poll

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(600)]

INTERVAL_S = 3.0
SLACK_S = 3.0  # one round's own time (two stand-in runs, a GCS query) on a loaded host

if not shutil.which("supervisord", path=os.path.dirname(sys.executable)) \
        and not shutil.which("supervisord"):
    pytest.skip("runtime tier needs supervisord", allow_module_level=True)


def node_env(c: LocalCluster, name: str, role: str, ip: str, base: int) -> dict[str, str]:
    ports, block_args = port_args(base)
    env = {
        "ARGUS_ROLE": role, "ARGUS_NODE_NAME": name,
        "ARGUS_SHARED_ROOT": os.path.join(c.state_dir, "shared"),
        "ARGUS_CLUSTER_NAME": c.cluster_name, "ARGUS_HEAD_IP_FILE": c.head_file,
        "ARGUS_RUN_DIR": os.path.join(c.state_dir, name), "ARGUS_NODE_IP": ip,
        "ARGUS_TTL_S": "20", "ARGUS_REFRESH_S": "2", "ARGUS_POLL_S": "1",
        "ARGUS_WORKER_NUM_GPUS": "4", "ARGUS_WORKER_NUM_CPUS": "2",
        "ARGUS_START_TIMEOUT_S": "60", "ARGUS_UNHEALTHY_S": "5", "ARGUS_STOP_TIMEOUT_S": "5",
        "ARGUS_RAY_TEMP_DIR": os.path.join(c.ray_temp_root, name),
        "ARGUS_RAY_EXTRA_ARGS": " ".join([f"--object-store-memory={256 * 1024 * 1024}",
                                          *block_args]),
        "ARGUS_FAKE_GPUS": "standin", "ARGUS_HEALTH_INTERVAL_S": f"{INTERVAL_S:g}",
        "ARGUS_HEALTH_TIMEOUT_S": "10", "ARGUS_HEALTH_MIN_FREE_GB": "0.01",
    }
    if role == "head":
        env["ARGUS_RAY_PORT"], env["ARGUS_DASHBOARD_PORT"] = (str(ports["gcs"]),
                                                             str(ports["dashboard"]))
    return env


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    token = secrets.token_hex(3)
    state_dir = f"/tmp/arh-{token}"
    os.makedirs(state_dir)
    c = LocalCluster(
        state_dir=state_dir, isolation="ports", cluster_id=token[:4],
        ray_temp_root=f"/tmp/ar-{token}", cluster_name="argus-health",
        head_file=os.path.join(state_dir, "shared", "ray", "discovery", "argus-health",
                               "head.json"),
        options={"pid_ns": ""})
    os.makedirs(c.ray_temp_root)
    ip = detect_node_ip()
    taken: set[int] = set()
    for name, role in [("head", "head"), ("gpu-w1", "worker")]:
        base = free_port_block(PORT_BLOCK, taken)
        taken.update(range(base, base + PORT_BLOCK))
        c.nodes.append(LocalNode(name, role, ip, node_env(c, name, role, ip, base),
                                 port_base=base))
    c.save()
    try:
        start_node(c, c.nodes[0])
        record = wait_for_head(c, Deadline.after(120))
        c.gcs_address, c.job_server_url = record.gcs_address, record.job_server_url
        c.save()
        start_node(c, c.nodes[1])
        wait_for_workers(c.gcs_address, 1, Deadline.after(120))
        yield c
    finally:
        problems = down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
        shutil.rmtree(c.ray_temp_root, ignore_errors=True)
        assert problems == [], problems


def health(c: LocalCluster, name: str) -> dict | None:
    path = os.path.join(os.path.dirname(c.head_file), "nodes", f"{name}.health.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def explain(c: LocalCluster, name: str) -> str:
    log = os.path.join(c.state_dir, "shared", "common", "logs", name, "node-health.log")
    try:
        with open(log) as f:
            tail = "".join(f.readlines()[-10:])
    except OSError as exc:
        tail = str(exc)
    return f"file: {health(c, name)}\nlog:\n{tail}"


def plant(c: LocalCluster, name: str, fault: dict | None) -> float:
    path = os.path.join(c.state_dir, name, "standin-gpu-faults.json")
    if fault is None:
        os.unlink(path)
    else:
        with open(path + ".tmp", "w") as f:
            json.dump(fault, f)
        os.replace(path + ".tmp", path)
    return time.time()


def test_names_reach_ray_and_a_planted_xid_is_published_and_healed(cluster):
    c = cluster
    worker = "gpu-w1"
    poll(lambda: (health(c, worker) or {}).get("healthy") is True
         and (health(c, worker) or {}).get("ray_node_id"), 90,
         "the worker's health file says healthy with its Ray node id",
         lambda: explain(c, worker))
    first = health(c, worker)
    assert first is not None and first["version"] == 1 and first["node"] == worker
    assert first["interval_s"] == INTERVAL_S and first["reason"] == "ok"
    names = [check["name"] for check in first["checks"]]
    assert names == ["gpus", "ecc", "xid", "disk:shared", "disk:ray_temp", "raylet"]
    assert "4 GPUs (offered 4)" in first["checks"][0]["detail"]

    # the name as Ray shows it: NodeName and the argus.node label, the id the file gives
    nodes = {n.node_id: n for n in list_nodes(c.gcs_address) if n.alive}
    mine = nodes[first["ray_node_id"]]
    assert mine.node_name == worker and mine.labels.get("argus.node") == worker
    head = [n for n in nodes.values() if n.is_head]
    assert [n.node_name for n in head] == ["head"]
    poll(lambda: (health(c, "head") or {}).get("healthy") is True, 30,
         "the head's health file says healthy", lambda: explain(c, "head"))

    planted = plant(c, worker, {"xid": 79})
    took = poll(lambda: (health(c, worker) or {}).get("healthy") is False,
                2 * INTERVAL_S + SLACK_S, "the planted XID 79 makes the worker unhealthy",
                lambda: explain(c, worker))
    bad = health(c, worker)
    assert bad is not None and bad["reason"].startswith("xid: XID 79 on PCI:0000:18:00"), bad
    assert bad["checked_at"] - planted <= 2 * INTERVAL_S
    print(f"\nunhealthy {took:.1f}s after the plant (interval {INTERVAL_S:g}s): "
          f"{bad['reason']}")

    healed = plant(c, worker, None)
    took = poll(lambda: (health(c, worker) or {}).get("healthy") is True,
                2 * INTERVAL_S + SLACK_S, "the worker healthy again once the fault is gone",
                lambda: explain(c, worker))
    good = health(c, worker)
    assert good is not None and good["reason"] == "ok"
    assert good["checked_at"] - healed <= 2 * INTERVAL_S
    print(f"healthy again {took:.1f}s after the heal")
