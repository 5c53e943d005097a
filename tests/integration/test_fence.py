"""The cordon on Ray's side (issue 55) on real local Ray: a cordoned worker is fenced (a
Ray job of Argus's own holds its free resources), so the gangs Argus admits, and their
drivers, land on the other worker only, whatever Ray would have chosen; a resume stops
the fence and the node gets work again."""

from __future__ import annotations

import re

import pytest

from .conftest import FENCE_PREFIX, ensure_workers, live_fences, stop_fences
from .localray import LocalRayCluster, wait_until

pytestmark = pytest.mark.timeout(420)


def _free(cluster: LocalRayCluster, node_id: str) -> dict[str, float]:
    """The node's available resources from the GCS, verl's way (none at 0)."""
    from ray._raylet import GcsClient

    usage = GcsClient(address=cluster.gcs_address).get_all_resource_usage(timeout=10)
    for u in usage.resource_usage_data.batch:
        if u.node_id.hex() == node_id:
            return {k: float(v) for k, v in u.resources_available.items() if v > 0}
    raise KeyError(node_id)


def _ran_on(argus, task_id: str) -> set[str]:
    """The node id prefixes (8 hex) the attempt's gang reported from (the stand-in's
    "worker ready: node <id8> gpu [..]" lines) and its driver's node, from Ray."""
    from .conftest import ray_job

    (attempt,) = argus.attempts(task_id)
    log = argus.logs(task_id).text
    nodes = set(re.findall(r"worker ready: node ([0-9a-f]{8})", log))
    assert nodes, f"no worker line in the log of {task_id}:\n{log[-2000:]}"
    driver = ray_job(argus.cluster, attempt["ray_submission_id"]).driver_node_id
    assert driver, attempt
    return nodes | {driver[:8]}


def test_a_cordoned_worker_is_fenced_on_ray_and_gets_no_gang_until_resumed(ray_cluster, argus):
    keep_name, fenced_name = ensure_workers(ray_cluster, 2)
    keep, fenced = ray_cluster.node_id_of(keep_name), ray_cluster.node_id_of(fenced_name)
    name = fenced[:12]  # started by hand: the names are id prefixes (test_nodes.py)
    stop_fences(ray_cluster)  # none left by an earlier test on the session's cluster
    try:
        wait_until(lambda: any(n["node_id"] == fenced for n in argus.http.get(
            f"{argus.url}/api/v2/nodes", timeout=10).json()["nodes"]), 30, "the worker listed")
        r = argus.http.post(f"{argus.url}/api/v2/nodes/{name}:cordon",
                            json={"reason": "integration: fence"}, timeout=10)
        assert r.status_code == 200, r.text
        # the fence takes the idle node's GPUs, CPUs and driver slots
        wait_until(lambda: not {"GPU", "CPU", "worker_node"} & _free(ray_cluster, fenced).keys(),
                   120, f"the fence to hold node {name} (log: {argus.log_path})")
        (fence,) = live_fences(ray_cluster)
        assert fence.submission_id.startswith(f"{FENCE_PREFIX}{name}-"), fence
        assert fence.metadata["argus_fence"] == name, fence.metadata
        assert fence.metadata["argus_fence_node_id"] == fenced, fence.metadata
        assert _free(ray_cluster, keep).get("GPU") == 4.0  # the other worker untouched

        tasks = [argus.submit(nnodes=1, gpus=2, duration_s=1) for _ in range(4)]
        for t in tasks:
            assert argus.wait_state(t, "SUCCEEDED", timeout=180)["state"] == "SUCCEEDED"
        for t in tasks:
            where = _ran_on(argus, t)
            assert where == {keep[:8]}, (t, where, "kept", keep[:8], "fenced", fenced[:8])
        assert argus.list_tasks() and all(
            t["task_id"] in tasks for t in argus.list_tasks())  # no task for the fence

        r = argus.http.post(f"{argus.url}/api/v2/nodes/{name}:resume", timeout=10)
        assert r.status_code == 200, r.text
        wait_until(lambda: not live_fences(ray_cluster)
                   and _free(ray_cluster, fenced).get("GPU") == 4.0, 60,
                   "the fence to go and the node's GPUs to be free")
        # two whole-node gangs at once: one of them must run on the resumed node
        pair = [argus.submit(nnodes=1, gpus=4, duration_s=3) for _ in range(2)]
        for t in pair:
            assert argus.wait_state(t, "SUCCEEDED", timeout=180)["state"] == "SUCCEEDED"
        assert any(fenced[:8] in _ran_on(argus, t) for t in pair)
    finally:
        argus.http.post(f"{argus.url}/api/v2/nodes/{name}:resume", timeout=10)
        stop_fences(ray_cluster)


def test_a_drained_worker_is_fenced_as_its_attempt_ends(ray_cluster, argus):
    ensure_workers(ray_cluster, 2)
    stop_fences(ray_cluster)  # none left by an earlier test on the session's cluster
    tid = argus.submit(nnodes=1, gpus=2, duration_s=20)
    argus.wait_for(tid, lambda t: t["state"] == "RUNNING", 120, "to run")

    def gang_node() -> str:
        found = re.findall(r"worker ready: node ([0-9a-f]{8})", argus.logs(tid).text)
        return found[0] if found else ""

    prefix = wait_until(gang_node, 60, "the gang's node in the log")
    (node,) = [n for n in ray_cluster.alive_nodes() if n["NodeID"].startswith(prefix)]
    node_id, name = node["NodeID"], node["NodeID"][:12]
    try:
        r = argus.http.post(f"{argus.url}/api/v2/nodes/{name}:drain",
                            json={"reason": "integration: drain"}, timeout=10)
        assert r.status_code == 200, r.text
        # the fence takes the 2 free GPUs; the attempt keeps its 2 and runs on
        wait_until(lambda: "GPU" not in _free(ray_cluster, node_id), 120,
                   f"the fence to hold the free GPUs of {name} (log: {argus.log_path})")
        assert argus.task(tid)["state"] == "RUNNING"
        (fence,) = live_fences(ray_cluster)
        assert argus.wait_state(tid, "SUCCEEDED", timeout=180)["state"] == "SUCCEEDED"

        from ray.job_submission import JobSubmissionClient

        client = JobSubmissionClient(ray_cluster.dashboard_url)
        wait_until(lambda: "argus fence holds CPU=16, GPU=4, worker_node=100"
                   in client.get_job_logs(fence.submission_id), 60,
                   "the fence to take what the attempt gave back")
        assert "GPU" not in _free(ray_cluster, node_id)
        assert [f.submission_id for f in live_fences(ray_cluster)] == [fence.submission_id]
    finally:
        argus.http.post(f"{argus.url}/api/v2/nodes/{name}:resume", timeout=10)
        stop_fences(ray_cluster)
