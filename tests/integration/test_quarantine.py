"""Quarantine on real local Ray (issue 55): a worker whose GPUs fail every run with a CUDA
error (the stand-in's planted fault, ``ARGUS_STANDIN_GPU_FAULT`` on its ``ray start``) is
quarantined after the attempts of two tasks failed there (<= 3 failed attempts), and the
failed tasks run again elsewhere to SUCCEEDED; every attempt records its nodes by name."""

from __future__ import annotations

import pytest

from .conftest import GPUS_PER_WORKER, TEST_SCHEDULER, ensure_workers, free_gpus
from .localray import wait_until

pytestmark = pytest.mark.timeout(420)

FAULT_ENV = "ARGUS_STANDIN_GPU_FAULT"  # examples/standin-verl/verl/trainer/standin.py
FAULT = "uncorrectable ECC error encountered"


def _nodes(argus) -> dict[str, dict]:
    r = argus.http.get(f"{argus.url}/api/v2/nodes", timeout=10)
    assert r.status_code == 200, r.text
    return {n["name"]: n for n in r.json()["nodes"]}


def _gang(attempt: dict) -> set[str]:
    return {n["name"] for n in attempt["nodes"] if n["role"] == "gang"}


def _keep_ray_off(ray_cluster, node_id: str) -> None:
    """A cordon keeps Argus's admission off a node, and Argus's fence (a job of the service
    holding a cordoned node's free GPUs, ``service.engine.fences``) Ray's own placement:
    else Ray could put the re-queued attempts' gangs back on the bad node."""
    wait_until(lambda: free_gpus(ray_cluster).get(node_id) == 0, 90, "the fence")


def test_a_bad_node_is_quarantined_and_the_failed_tasks_run_again_elsewhere(
        ray_cluster, argus_factory, hold_gpus):
    (good,) = ensure_workers(ray_cluster, 1)
    bad = ray_cluster.add_worker(gpus=GPUS_PER_WORKER, env={FAULT_ENV: FAULT})
    try:
        argus, _ = argus_factory(scheduler={**TEST_SCHEDULER, "quarantine_retry_delay_s": 20})
        # started by hand, every node is named by its id's prefix (test_nodes.py)
        good_name = ray_cluster.node_id_of(good)[:12]
        bad_name = ray_cluster.node_id_of(bad)[:12]
        wait_until(lambda: {good_name, bad_name} <= set(_nodes(argus)), 30, "both listed")
        # the good node's GPUs taken outside Argus: the first attempts can only go to the
        # bad one (a cordon would keep Argus's admission off it, not Ray's placement)
        busy = hold_gpus({ray_cluster.node_id_of(good): GPUS_PER_WORKER})
        # 2 steps of 3 s: the gang holds its GPUs long enough for a tick to see where
        a, b = (argus.submit(nnodes=1, gpus=4, duration_s=6, total_training_steps=2)
                for _ in range(2))
        try:
            wait_until(lambda: (_nodes(argus)[bad_name].get("cordon") or {}).get("source")
                       == "quarantine", 150, f"{bad_name} quarantined")
        except TimeoutError as exc:
            views = {t: (argus.task(t), argus.attempts(t)) for t in (a, b)}
            raise AssertionError(f"{exc}: {_nodes(argus)}\n{views}\n--- argus-api log ---\n"
                                 f"{argus.log_tail(8000)}") from None
        _keep_ray_off(ray_cluster, ray_cluster.node_id_of(bad))
        cordon = _nodes(argus)[bad_name]["cordon"]
        assert cordon["state"] == "cordoned" and cordon["by"] is None, cordon
        assert f"{a}#1" in cordon["reason"] and f"{b}#1" in cordon["reason"], cordon
        assert f"CUDA error: {FAULT}" in cordon["reason"], cordon
        busy.release()  # the good node free again: the re-queued tasks run there
        for task_id in (a, b):
            assert argus.wait_state(task_id, {"SUCCEEDED", "FAILED"}, timeout=150)[
                "state"] == "SUCCEEDED", argus.attempts(task_id)
        attempts = argus.attempts(a) + argus.attempts(b)
        failed = [x for x in attempts if x["failure_kind"] is not None]
        assert 2 <= len(failed) <= 3, attempts
        for x in failed:  # each failed where the fault is, with the hardware error
            assert x["failure_kind"] == "RUNTIME_ERROR" and _gang(x) == {bad_name}, x
        for task_id in (a, b):  # ...and ran again on the good node
            last = argus.attempts(task_id)[-1]
            assert last["failure_kind"] is None and _gang(last) == {good_name}, last
            assert {n["role"] for n in last["nodes"]} == {"driver", "gang"}, last
            assert argus.task(task_id)["latest_attempt"]["nodes"] == last["nodes"]
        # a quarantine stays until an operator lifts it: nothing went there since
        assert _nodes(argus)[bad_name]["cordon"]["source"] == "quarantine"
        assert sum(bad_name in _gang(x) for x in attempts) == len(failed)
        r = argus.http.post(f"{argus.url}/api/v2/nodes/{bad_name}:resume",
                            json={"reason": "GPU replaced"}, timeout=10)
        assert r.status_code == 200 and r.json()["cordon"]["source"] == "quarantine", r.text
    finally:
        ray_cluster.remove_worker(bad)
