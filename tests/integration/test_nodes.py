"""Cordon on real local Ray (issue 55): the nodes are listed by name from the GCS, a
cordoned worker gets no new attempt, a resumed one does."""

from __future__ import annotations

import pytest

from .conftest import ensure_workers
from .localray import wait_until

pytestmark = pytest.mark.timeout(300)


def test_a_cordoned_worker_gets_no_attempt_until_resumed(ray_cluster, argus):
    (worker,) = ensure_workers(ray_cluster, 1)
    node_id = ray_cluster.node_id_of(worker)

    def listed() -> list[dict]:
        r = argus.http.get(f"{argus.url}/api/v2/nodes", timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["nodes"]

    wait_until(lambda: any(n["node_id"] == node_id for n in listed()), 30, "the worker listed")
    (node,) = [n for n in listed() if n["node_id"] == node_id]
    # started by hand: every node's NodeName is 127.0.0.1, so the names are id prefixes
    assert node["name"] == node_id[:12] and node["gpus_total"] == 4.0, node
    name = node["name"]
    r = argus.http.post(f"{argus.url}/api/v2/nodes/{name}:cordon",
                        json={"reason": "integration: bad fan"}, timeout=10)
    assert r.status_code == 200, r.text
    tid = argus.submit(nnodes=1, gpus=4, duration_s=1)
    task = argus.wait_for(tid, lambda t: "is cordoned" in (t["pending_reason"] or ""), 30,
                          "a reason naming the cordon")
    assert f"{name} is cordoned: integration: bad fan" in task["pending_reason"]
    assert task["latest_attempt"] is None
    r = argus.http.post(f"{argus.url}/api/v2/nodes/{name}:resume", timeout=10)
    assert r.status_code == 200, r.text
    assert argus.wait_state(tid, "SUCCEEDED", timeout=120)["state"] == "SUCCEEDED"
