"""The whole flow on real local Ray (fake GPUs), through the real service's HTTP API.

Workloads are the verl stand-in (examples/standin-verl) run through the real entrypoint
(``python3 -m verl.trainer.main_ppo ...``). Tests run in file order on one cluster:
the first needs exactly one worker, the others two.
"""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from pathlib import Path

import pytest

from .conftest import TERMINAL, ensure_workers, free_gpus, ray_job
from .localray import wait_until

pytestmark = pytest.mark.timeout(300)


def _one_attempt(argus, task_id: str) -> dict:
    attempts = argus.attempts(task_id)
    assert len(attempts) == 1, "\n".join(
        f"{a['ray_submission_id']} {a['ray_status']} {a['failure_kind']}: {a['message']}"
        for a in attempts)
    return attempts[0]


def test_three_full_node_tasks_run_one_after_another(ray_cluster, argus):
    ensure_workers(ray_cluster, 1)
    ids = [argus.submit(nnodes=1, gpus=4, duration_s=2) for _ in range(3)]
    for tid in ids:
        task = argus.wait_state(tid, "SUCCEEDED", timeout=120)
        assert task["latest_attempt"]["ray_status"] == "SUCCEEDED"
    jobs = [ray_job(ray_cluster, _one_attempt(argus, tid)["ray_submission_id"]) for tid in ids]
    spans = sorted((j.start_time, j.end_time) for j in jobs)
    for (_, end), (next_start, _) in itertools.pairwise(spans):
        assert next_start >= end, f"two 4-GPU jobs overlapped on one 4-GPU node: {spans}"


@pytest.mark.usefixtures("service_store")  # on both engines (conftest)
def test_gang_waits_for_two_nodes_with_two_free_gpus(ray_cluster, argus, hold_gpus):
    a, b = (ray_cluster.node_id_of(w) for w in ensure_workers(ray_cluster, 2))
    hold_gpus({a: 1})
    hold_gpus({b: 2})
    last_b = hold_gpus({b: 1})
    assert free_gpus(ray_cluster)[a] == 3 and free_gpus(ray_cluster)[b] == 1

    tid = argus.submit(nnodes=2, gpus=2, duration_s=2)
    task = argus.wait_for(tid, lambda t: t["state"] == "PENDING_RESOURCES"
                          and t["pending_reason"], 30, "to wait for room")
    assert task["pending_reason"].startswith("needs 2x2 GPUs"), task["pending_reason"]
    assert task["latest_attempt"] is None
    ticks = argus.http.get(f"{argus.url}/healthz", timeout=5).json()["scheduler"]["ticks"]
    wait_until(lambda: argus.http.get(f"{argus.url}/healthz", timeout=5)
               .json()["scheduler"]["ticks"] >= ticks + 4, 30, "four more ticks")
    assert argus.task(tid)["state"] == "PENDING_RESOURCES", "submitted into a 3+1 split"

    last_b.release()  # node b now has 2 free: two nodes with 2 free GPUs each
    argus.wait_state(tid, "SUCCEEDED", timeout=120)
    assert _one_attempt(argus, tid)["ray_status"] == "SUCCEEDED"


@pytest.mark.usefixtures("service_store")  # on both engines (conftest)
def test_gpus_taken_after_submit_fail_fast_then_retry(ray_cluster, argus, hold_gpus):
    a, b = (ray_cluster.node_id_of(w) for w in ensure_workers(ray_cluster, 2))
    tid = argus.submit(nnodes=1, gpus=4, duration_s=1, check_delay_s=4)
    argus.wait_for(tid, lambda t: t["latest_attempt"] is not None
                   and t["state"] in ("SUBMITTED", "RUNNING"), 30, "to be submitted")
    # Another user grabs GPUs before the driver runs verl's check: 1 left of the 8.
    holder = hold_gpus({a: 4, b: 3})

    task = argus.wait_for(tid, lambda t: t["state"] == "PENDING_RESOURCES"
                          and t["latest_attempt"]["attempt_no"] == 1, 90,
                          "to fail fast and wait for a retry")
    first = argus.attempts(tid)[0]
    assert first["failure_kind"] == "INSUFFICIENT_RESOURCES", first
    assert first["ray_status"] == "FAILED"
    assert "Total available GPUs 1.0 is less than total desired GPUs 4" in (
        first["message"] or "") + (task["error_summary"] or "")

    holder.release()
    released_at = time.time()
    argus.wait_state(tid, "SUCCEEDED", timeout=120)
    first, second = argus.attempts(tid)
    assert second["attempt_no"] == 2 and second["ray_status"] == "SUCCEEDED"
    assert second["ray_submission_id"].endswith("--a02")
    started = ray_job(ray_cluster, second["ray_submission_id"]).start_time / 1000
    gap = started - ray_job(ray_cluster, first["ray_submission_id"]).end_time / 1000
    # retry_mode when_fits: not before the 5 s backoff, and as soon as the room is back
    assert gap >= 5 - 1.0, f"attempt 2 came {gap:.1f}s after attempt 1, min backoff 5 s"
    assert started - released_at <= 10, (
        f"attempt 2 started {started - released_at:.1f}s after the GPUs came back (floor 10 s)")


@pytest.mark.usefixtures("service_store")  # on both engines (conftest)
def test_gang_bigger_than_any_node_says_it_can_never_fit(ray_cluster, argus):
    ensure_workers(ray_cluster, 2)  # 4 GPUs each: 8 in total, but never 8 on one node
    tid = argus.submit(nnodes=1, gpus=8, duration_s=1)
    task = argus.wait_for(tid, lambda t: (t["pending_reason"] or "").startswith(
        "can never fit this cluster as it is"), 30, "to be told it can never fit")
    assert "needs 1x8 GPUs" in task["pending_reason"], task["pending_reason"]
    assert task["latest_attempt"] is None  # nothing was submitted into verl's hang
    assert argus.cancel(tid).status_code == 200
    assert argus.task(tid)["state"] == "CANCELED"


@pytest.mark.usefixtures("service_store")  # on both engines (conftest)
def test_cancel_running_stops_the_ray_job_and_frees_gpus(ray_cluster, argus):
    ensure_workers(ray_cluster, 2)
    total = sum(free_gpus(ray_cluster).values())
    tid = argus.submit(nnodes=1, gpus=4, duration_s=120)
    argus.wait_for(tid, lambda t: t["state"] == "RUNNING", 60, "to run")
    wait_until(lambda: sum(free_gpus(ray_cluster).values()) == total - 4, 60,
               "the driver to take its 4 GPUs")
    sid = argus.task(tid)["latest_attempt"]["ray_submission_id"]

    r = argus.cancel(tid)
    assert r.status_code == 202, r.text
    task = argus.wait_state(tid, "CANCELED", timeout=60)
    assert task["latest_attempt"]["ray_status"] == "STOPPED"
    assert str(ray_job(ray_cluster, sid).status.value) == "STOPPED"
    wait_until(lambda: sum(free_gpus(ray_cluster).values()) == total, 60,
               "the canceled job's GPUs to come back")
    assert argus.cancel(tid).status_code == 409


@pytest.mark.usefixtures("service_store")  # on both engines (conftest)
def test_a_run_past_its_time_limit_is_stopped_and_fails_time_limit(ray_cluster, argus):
    ensure_workers(ray_cluster, 2)
    total = sum(free_gpus(ray_cluster).values())
    tid = argus.submit(nnodes=1, gpus=4, duration_s=300, max_runtime_s=8)
    task = argus.wait_state(tid, "FAILED", timeout=90)
    assert task["error_summary"] == "TIME_LIMIT: ran past its max_runtime_s (8 s): stopped"
    assert task["max_runtime_s"] == 8
    [attempt] = argus.attempts(tid)  # a time limit is final: never retried
    assert (attempt["failure_kind"], attempt["ray_status"]) == ("TIME_LIMIT", "STOPPED")
    ran = (datetime.fromisoformat(attempt["end_time"])
           - datetime.fromisoformat(attempt["start_time"])).total_seconds()
    assert 8 <= ran < 8 + 20, ran  # stopped within a few ticks of its limit
    wait_until(lambda: sum(free_gpus(ray_cluster).values()) == total, 60,
               "the stopped job's GPUs to come back")


def test_logs_live_while_running_and_archived_after(ray_cluster, argus):
    ensure_workers(ray_cluster, 2)
    tid = argus.submit(nnodes=1, gpus=2, duration_s=6)
    argus.wait_for(tid, lambda t: t["state"] == "RUNNING", 60, "to run")

    def live_step() -> str:
        r = argus.logs(tid)
        return r.status_code == 200 and "step:1 - " in r.text and r.text

    live = wait_until(live_step, 60, "live driver output")
    assert argus.task(tid)["state"] == "RUNNING", "the log was not read live"
    assert "resource check passed" in live

    argus.wait_state(tid, "SUCCEEDED", timeout=60)
    sid = _one_attempt(argus, tid)["ray_submission_id"]
    after = argus.logs(tid, attempt="1")
    assert after.status_code == 200 and "done, exit code 0" in after.text
    job_dir = Path(argus.shared_root) / "users" / "admin" / "jobs" / sid  # the submitter
    assert "done, exit code 0" in (job_dir / "driver.log").read_text()
    assert "code_path" in (job_dir / "jobspec.yaml").read_text()
    assert "verl.trainer.main_ppo" in (job_dir / "submit.json").read_text()


@pytest.mark.usefixtures("service_store")  # on both engines (conftest)
def test_kill_9_while_queued_submitting_running_then_restart(ray_cluster, argus_factory):
    ensure_workers(ray_cluster, 2)
    argus, proxy = argus_factory(proxy=True, ray_timeout_s=120)
    running = argus.submit(nnodes=1, gpus=4, duration_s=15)
    argus.wait_for(running, lambda t: t["state"] == "RUNNING", 60, "to run")

    proxy.hold_submits()  # the next submit stays on the wire, inside the proxy
    submitting = argus.submit(nnodes=1, gpus=4, duration_s=3)
    argus.wait_for(submitting, lambda t: t["state"] == "SUBMITTING"
                   and proxy.waiting_submits == 1, 30, "to be caught mid-submit")
    queued = argus.submit(nnodes=1, gpus=4, duration_s=2)
    argus.wait_for(queued, lambda t: t["state"] in ("QUEUED", "PENDING_RESOURCES"), 10,
                   "to be queued")

    argus.kill()
    proxy.release_submits()  # the request reaches Ray after the service died
    wait_until(lambda: proxy.forwarded_submits[f"{submitting}--a01"] == 1, 30,
               "the held submit to reach Ray")
    started = time.time()
    argus.start()

    for tid in (running, submitting, queued):
        task = argus.wait_state(tid, TERMINAL, timeout=120)
        assert task["state"] == "SUCCEEDED", task
        _one_attempt(argus, tid)
    assert set(proxy.forwarded_submits.values()) == {1}, proxy.forwarded_submits
    assert len(proxy.forwarded_submits) == 3
    assert time.time() - started < 120

