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
import shutil
import sys
import time
from collections.abc import Iterator

import pytest

from raypool.health import list_nodes
from raypool.local.launcher import (
    LocalCluster,
)

from .onehost import one_host_cluster
from .waiting import poll

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(600)]

INTERVAL_S = 3.0
SLACK_S = 3.0  # one round's own time (two stand-in runs, a GCS query) on a loaded host

if not shutil.which("supervisord", path=os.path.dirname(sys.executable)) \
        and not shutil.which("supervisord"):
    pytest.skip("runtime tier needs supervisord", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with one_host_cluster("arh", "argus-health", ["gpu-w1"], {
        "ARGUS_FAKE_GPUS": "standin", "ARGUS_HEALTH_INTERVAL_S": f"{INTERVAL_S:g}",
        "ARGUS_HEALTH_TIMEOUT_S": "10", "ARGUS_HEALTH_MIN_FREE_GB": "0.01",
    }) as c:
        yield c


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
