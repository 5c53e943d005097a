"""A cluster of real ``argus-node run`` nodes on this host's one IP (no network or PID
namespace): a Ray temp dir and a block of Ray ports (dashboard-agent ports included) per
node, ``ARGUS_TTL_S=20 ARGUS_REFRESH_S=2 ARGUS_POLL_S=1``. Used by the runtime tests of a
one-box lab (host networking): ``test_one_host_head_fault.py``, ``test_node_health.py``."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
from collections.abc import Iterator, Mapping

from raypool.config import detect_node_ip
from raypool.deadline import Deadline
from raypool.local.launcher import (
    LocalCluster,
    down,
    start_node,
    wait_for_head,
    wait_for_workers,
)
from raypool.local.ports import PORT_BLOCK, free_port_block, port_args
from raypool.local.state import LocalNode


def node_env(c: LocalCluster, name: str, role: str, ip: str, base: int,
             extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of one node: its name, the shared root, head.json, fast discovery
    timers, 4 fake GPUs a worker, its own Ray temp dir and ports; ``extra`` on top."""
    ports, block_args = port_args(base)
    env = {
        "ARGUS_ROLE": role, "ARGUS_NODE_NAME": name,
        "ARGUS_SHARED_ROOT": os.path.join(c.state_dir, "shared"),
        "ARGUS_CLUSTER_NAME": c.cluster_name, "ARGUS_HEAD_IP_FILE": c.head_file,
        "ARGUS_RUN_DIR": os.path.join(c.state_dir, name), "ARGUS_NODE_IP": ip,
        "ARGUS_TTL_S": "20", "ARGUS_REFRESH_S": "2", "ARGUS_POLL_S": "1",
        "ARGUS_WORKER_NUM_GPUS": "4", "ARGUS_WORKER_NUM_CPUS": "2",
        "ARGUS_WORKER_RESOURCES_KV": "worker_node=100",
        "ARGUS_START_TIMEOUT_S": "60", "ARGUS_UNHEALTHY_S": "5", "ARGUS_STOP_TIMEOUT_S": "5",
        # a temp dir per node, as separate installs on one box would have
        "ARGUS_RAY_TEMP_DIR": os.path.join(c.ray_temp_root, name),
        "ARGUS_RAY_EXTRA_ARGS": " ".join([f"--object-store-memory={256 * 1024 * 1024}",
                                          *block_args]),
        **extra,
    }
    if role == "head":
        env["ARGUS_RAY_PORT"], env["ARGUS_DASHBOARD_PORT"] = (str(ports["gcs"]),
                                                             str(ports["dashboard"]))
    return env


@contextlib.contextmanager
def one_host_cluster(prefix: str, cluster_name: str, workers: list[str],
                     extra_env: Mapping[str, str]) -> Iterator[LocalCluster]:
    """A head and ``workers`` started (each waited for) on this host's IP; stopped and
    removed after, asserting nothing was left behind."""
    token = secrets.token_hex(3)
    state_dir = f"/tmp/{prefix}-{token}"
    os.makedirs(state_dir)
    c = LocalCluster(
        state_dir=state_dir, isolation="ports", cluster_id=token[:4],
        ray_temp_root=f"/tmp/ar-{token}", cluster_name=cluster_name,
        head_file=os.path.join(state_dir, "shared", "ray", "discovery", cluster_name,
                               "head.json"),
        options={"pid_ns": ""})  # the launcher runs ``argus-node run`` as it is
    os.makedirs(c.ray_temp_root)
    ip = detect_node_ip()
    taken: set[int] = set()
    for name, role in [("head", "head")] + [(w, "worker") for w in workers]:
        base = free_port_block(PORT_BLOCK, taken)
        taken.update(range(base, base + PORT_BLOCK))
        c.nodes.append(LocalNode(name, role, ip, node_env(c, name, role, ip, base, extra_env),
                                 port_base=base))
    c.save()
    path = os.environ["PATH"]
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + path
    try:
        start_node(c, c.nodes[0])
        record = wait_for_head(c, Deadline.after(120))
        c.gcs_address, c.job_server_url = record.gcs_address, record.job_server_url
        c.save()
        for joined, node in enumerate(c.nodes[1:], start=1):
            start_node(c, node)
            wait_for_workers(c.gcs_address, joined, Deadline.after(120))
        yield c
    finally:
        os.environ["PATH"] = path
        problems = down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
        shutil.rmtree(c.ray_temp_root, ignore_errors=True)
        assert problems == [], problems
