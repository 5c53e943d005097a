"""``drain --requeue`` on real local Ray (issue 55): the node running a checkpointing
stand-in is drained with requeue; its attempt is stopped as a preemption (not charged to
the task's retries: max_attempts is 1) and the task resumes on another worker from its
last checkpoint, redoing at most ``save_freq`` steps.

Once the first attempt is stopped, the service's fence (``service.engine.fences``) holds
the drained worker's free GPUs, CPUs and driver slots, so when the replacement worker
joins the next attempt can only land there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from service.domain.layout import checkpoint_dir

from .conftest import TERMINAL, ensure_workers, free_gpus, live_fences, ray_job
from .localray import wait_until
from .test_preemption import RESUMED, SAVED, _events, _log, _steps, _story, _tracker

pytestmark = pytest.mark.timeout(300)

STEPS = 20  # one step a second: long enough to be caught mid-run
SAVE_FREQ = 1


def test_drain_requeue_resumes_the_run_on_another_worker_from_its_checkpoint(
        ray_cluster, argus_factory):
    (w1,) = ensure_workers(ray_cluster, 1)
    w1_id = ray_cluster.node_id_of(w1)
    argus, _ = argus_factory()
    tid = argus.submit(nnodes=1, gpus=4, duration_s=STEPS, total_training_steps=STEPS,
                       save_freq=SAVE_FREQ, max_attempts=1)
    ckpt = Path(checkpoint_dir(str(argus.shared_root), argus.task(tid)["user"], tid))
    argus.wait_for(tid, lambda t: t["state"] == "RUNNING", 60, "attempt 1 to run")
    seen = wait_until(lambda: (k := _tracker(ckpt)) is not None and k >= 2 and k, 40,
                      f"attempt 1 to checkpoint step 2 under {ckpt}")

    r = argus.http.get(f"{argus.url}/api/v2/nodes", timeout=10)
    (node,) = [n for n in r.json()["nodes"] if n["node_id"] == w1_id]
    name = node["name"]
    r = argus.http.post(f"{argus.url}/api/v2/nodes/{name}:drain",
                        json={"reason": "replacing GPU 3", "requeue": True}, timeout=10)
    assert r.status_code == 200, r.text
    assert (r.json()["cordon"]["state"], r.json()["cordon"]["requeue"]) == ("drained", True)

    # stopped as a preemption; with nowhere else to go it waits, naming the drain
    task = argus.wait_for(tid, lambda t: t["state"] == "PENDING_RESOURCES", 60,
                          "attempt 1 to be stopped and re-queued")
    first = argus.attempts(tid)[0]
    assert first["failure_kind"] == "PREEMPTED", _story(argus, tid)
    (requested,) = _events(argus, tid, "PREEMPTION_REQUESTED")
    assert requested["payload"] == {"attempt_no": 1, "for": f"node:{name}", "node": name,
                                    "reason": "replacing GPU 3"}, requested
    assert task["latest_attempt"]["attempt_no"] == 1
    argus.wait_for(tid, lambda t: f"{name} is drained: replacing GPU 3"
                   in (t["pending_reason"] or ""), 30, "a reason naming the drain")

    # the drained worker out of Ray's reach: the service's fence holds what is free there
    wait_until(lambda: free_gpus(ray_cluster).get(w1_id) == 0, 90, "the fence to hold w1")
    w2 = ray_cluster.add_worker(gpus=4)  # the replacement joins
    done = argus.wait_state(tid, TERMINAL, timeout=120)
    assert done["state"] == "SUCCEEDED", _story(argus, tid)
    attempts = argus.attempts(tid)
    assert [(a["attempt_no"], a["failure_kind"]) for a in attempts] == [
        (1, "PREEMPTED"), (2, None)], attempts
    driver_node = ray_job(ray_cluster, attempts[1]["ray_submission_id"]).driver_node_id
    assert driver_node == ray_cluster.node_id_of(w2)

    first_log, second_log = _log(argus, tid, 1), _log(argus, tid, 2)
    steps_1 = _steps(first_log)
    assert steps_1 and steps_1[-1] < STEPS, "attempt 1 was not stopped mid-run"
    last_saved = max(int(k) for k in SAVED.findall(first_log))
    (resumed,) = RESUMED.findall(second_log)
    k = int(resumed)
    assert k >= seen >= 2 and last_saved <= k <= last_saved + 1, (k, last_saved, seen)
    assert steps_1[-1] - k <= SAVE_FREQ, (steps_1[-1], k)  # steps redone
    assert _steps(second_log) == list(range(k + 1, STEPS + 1))
    assert _tracker(ckpt) == STEPS

    r = argus.http.post(f"{argus.url}/api/v2/nodes/{name}:resume", timeout=10)
    assert r.status_code == 200 and r.json()["cordon"]["requeue"] is True, r.text
    # the resume stops the fence (a fence outlives the service that started it: one left
    # here held the node in the next test of the session's cluster)
    wait_until(lambda: not live_fences(ray_cluster), 60, "the resume to stop the fence")
