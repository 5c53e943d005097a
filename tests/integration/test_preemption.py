"""Preemption on real local Ray (fake GPUs), through the real service's HTTP API.

The issue's acceptance: a high-priority gang preempts a low-priority stand-in run that
checkpoints; the preempted run then resumes, its second attempt starting from the
checkpoint the first one wrote (verl's ``trainer.resume_mode=auto`` under the task's
``trainer.default_local_dir``). One worker with 4 GPUs: the two 1x4 gangs cannot both run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from service.domain.layout import checkpoint_dir
from service.policy.progress import StepLine, parse_line

from .conftest import TERMINAL, TEST_SCHEDULER, ensure_workers
from .localray import wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("service_store")]

PREEMPTIVE = {**TEST_SCHEDULER, "preemption": True, "preemption_grace_s": 2,
              "retry_min_backoff_s": 1, "max_user_priority": 0}
LOW_STEPS = 20  # one step a second: long enough to be caught mid-run
TRACKER = "latest_checkpointed_iteration.txt"
RESUMED = re.compile(r"\[standin-verl main_ppo\] resumed from checkpoint global_step_(\d+)")
SAVED = re.compile(r"saved checkpoint global_step_(\d+)")


def _session(token: str) -> requests.Session:
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {token}"
    return http


def _new_user(argus: Any, name: str) -> requests.Session:
    """A normal user (role user) and a session holding a fresh token of theirs."""
    r = argus.http.post(f"{argus.url}/api/v2/users", json={"name": name}, timeout=10)
    assert r.status_code == 201, r.text
    r = argus.http.post(f"{argus.url}/api/v2/users/{name}/tokens", json={}, timeout=10)
    assert r.status_code == 201, r.text
    return _session(r.json()["token"])


def _submit(argus: Any, http: requests.Session, *, priority: int, duration_s: float,
            **fields: Any) -> str:
    """A 1x4 stand-in run with ``priority`` and extra JobSpec fields, as ``http``'s user."""
    spec = {**yaml.safe_load(argus.jobspec(nnodes=1, gpus=4, duration_s=duration_s)),
            "priority": priority, **fields}
    r = http.post(f"{argus.url}/api/v2/tasks", data=yaml.safe_dump(spec),
                  headers={"Content-Type": "application/yaml"}, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()["task_id"]


def _events(argus: Any, task_id: str, kind: str) -> list[dict[str, Any]]:
    r = argus.http.get(f"{argus.url}/api/v2/tasks/{task_id}/events", timeout=10)
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["type"] == kind]


def _story(argus: Any, *task_ids: str) -> str:
    """Events and attempts of ``task_ids`` and the service log's tail, for a failure."""
    out = []
    for tid in task_ids:
        r = argus.http.get(f"{argus.url}/api/v2/tasks/{tid}/events", timeout=10)
        out.append(f"--- {tid} events ---")
        out += [f"{e['ts']} {e['type']} {json.dumps(e['payload'])}"
                for e in r.json().get("events", [])]
        out.append(f"--- {tid} attempts ---")
        out += [f"{a['ray_submission_id']} {a['ray_status']} {a['failure_kind']}: {a['message']}"
                for a in argus.attempts(tid)]
    return "\n".join([*out, "--- argus-api log ---", argus.log_tail(6000)])


def _log(argus: Any, task_id: str, attempt: int) -> str:
    r = argus.logs(task_id, attempt=str(attempt))
    assert r.status_code == 200, r.text
    return r.text


def _tracker(root: Path) -> int | None:
    """The step in the task's checkpoint tracker, None while there is none."""
    try:
        return int((root / TRACKER).read_text())
    except (FileNotFoundError, ValueError):
        return None


def _steps(log: str) -> list[int]:
    """The steps of the stand-in's verl step lines, read as the service reads them."""
    return [e.step for e in map(parse_line, log.splitlines()) if isinstance(e, StepLine)]


def test_high_priority_gang_preempts_a_checkpointing_run_that_then_resumes(
        ray_cluster, argus_factory):
    ensure_workers(ray_cluster, 1)  # 4 GPUs: room for exactly one of the two gangs
    argus, _ = argus_factory(scheduler=PREEMPTIVE)
    alice = _new_user(argus, "alice")

    low = _submit(argus, alice, priority=-5, duration_s=LOW_STEPS,
                  total_training_steps=LOW_STEPS, save_freq=1)
    assert argus.task(low)["priority"] == -5
    ckpt = Path(checkpoint_dir(str(argus.shared_root), "alice", low))
    argus.wait_for(low, lambda t: t["state"] == "RUNNING"
                   and t["latest_attempt"]["attempt_no"] == 1, 60, "attempt 1 to run")
    seen = wait_until(lambda: (k := _tracker(ckpt)) is not None and k >= 2 and k, 40,
                      f"attempt 1 to checkpoint step 2 under {ckpt}")
    before = _log(argus, low, 1)
    assert "no checkpoint to resume from" in before and "step:2 - " in before
    assert argus.task(low)["state"] == "RUNNING"

    high = _submit(argus, argus.http, priority=100, duration_s=3)  # the admin's token
    assert argus.task(high)["priority"] == 100
    done = argus.wait_state(high, TERMINAL, timeout=60)
    assert done["state"] == "SUCCEEDED", _story(argus, low, high)
    (high_attempt,) = argus.attempts(high)  # never submitted into the victim's GPUs
    assert high_attempt["ray_status"] == "SUCCEEDED"

    # the victim: asked to make room for `high`, its first attempt ended PREEMPTED
    requested = _events(argus, low, "PREEMPTION_REQUESTED")
    assert len(requested) == 1, _story(argus, low, high)
    assert requested[0]["payload"]["for"] == high, requested
    (preempting,) = _events(argus, high, "PREEMPTING")
    assert low in preempting["payload"]["victims"], preempting
    first = argus.attempts(low)[0]
    assert first["attempt_no"] == 1 and first["failure_kind"] == "PREEMPTED", _story(
        argus, low, high)
    assert first["ray_status"] in ("STOPPED", "FAILED"), first
    first_log = _log(argus, low, 1)
    steps_1 = _steps(first_log)
    assert steps_1 and steps_1[-1] < LOW_STEPS, "attempt 1 was not stopped mid-run"
    last_saved = max(int(k) for k in SAVED.findall(first_log))

    # the second attempt resumed from the checkpoint the first wrote, and finished
    task = argus.wait_state(low, TERMINAL, timeout=90)
    assert task["state"] == "SUCCEEDED", _story(argus, low)
    attempts = argus.attempts(low)
    assert [a["attempt_no"] for a in attempts] == [1, 2], attempts
    assert attempts[1]["ray_status"] == "SUCCEEDED" and attempts[1]["failure_kind"] is None
    second_log = _log(argus, low, 2)
    resumed = RESUMED.findall(second_log)
    assert len(resumed) == 1, second_log[-3000:]
    k = int(resumed[0])
    assert k >= seen >= 2
    # the tracker goes to disk before "saved" is printed: a kill in between leaves k one on
    assert last_saved <= k <= last_saved + 1, (k, last_saved)
    assert "no checkpoint to resume from" not in second_log
    assert _steps(second_log) == list(range(k + 1, LOW_STEPS + 1))
    assert _tracker(ckpt) == LOW_STEPS
    # its progress: the second attempt's, from the checkpoint it resumed (read by the
    # service's log follower, the end from the archived log)
    progress = argus.wait_for(low, lambda t: (t["progress"] or {}).get("step") == LOW_STEPS,
                              30, "to show its last step")["progress"]
    assert (progress["attempt_no"], progress["resumed_from"]) == (2, k), progress

    # both attempts were told the same per-task checkpoint directory
    jobs = Path(argus.shared_root) / "users" / "alice" / "jobs"
    for attempt in attempts:
        argv = json.loads((jobs / attempt["ray_submission_id"] / "submit.json").read_text())["argv"]
        assert f"trainer.default_local_dir={ckpt}" in argv
        assert "trainer.resume_mode=auto" in argv
