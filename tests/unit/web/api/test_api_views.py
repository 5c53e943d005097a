"""The JSON shape of store rows and the list cursors (the HTTP layer's own, no I/O)."""

from __future__ import annotations

import pytest

from service.domain.reasons import Planned
from service.domain.rows import AttemptNode, AttemptRow, EventRow, TaskRow
from service.domain.states import TaskState
from service.domain.timefmt import iso
from service.store.writer import MAX_SEQ
from service.web.api.views import (
    InvalidCursor,
    attempt_json,
    decode_cursor,
    encode_cursor,
    event_json,
    shown_payload,
    shown_rows,
    task_json,
)

T = 1766500321.5  # 2025-12-23T14:32:01.500Z
TID = "mvp2-ppo-20251223-143201-0001"


def task(**fields: object) -> TaskRow:
    base = dict(
        seq=1, task_id=TID, state=TaskState.QUEUED, workload="ppo", user=None, nnodes=2,
        n_gpus_per_node=4, created_at=T, updated_at=T, next_run_at=T, error_summary=None,
        pending_reason=None, cancel_requested_at=None, latest_attempt=None, queue_position=1,
        priority=-5, max_runtime_s=7200.0,
    )
    return TaskRow(**{**base, **fields})


def attempt(**fields: object) -> AttemptRow:
    base = dict(
        task_id=TID, attempt_no=1, ray_submission_id=TID + "--a01", ray_status="FAILED",
        failure_kind="INSUFFICIENT_RESOURCES", message="m", created_at=T, submitted_at=T + 1,
        start_time=T + 2, end_time=T + 3, exit_code=1, stop_requested=False,
    )
    return AttemptRow(**{**base, **fields})


def test_task_json_of_a_queued_task() -> None:
    assert task_json(task(), job_output=True) == {
        "task_id": TID, "state": "QUEUED", "workload": "ppo", "user": None,
        "created_at": "2025-12-23T14:32:01.500Z", "updated_at": "2025-12-23T14:32:01.500Z",
        "desired_resources": {"nnodes": 2, "n_gpus_per_node": 4, "total_gpus": 8},
        "latest_attempt": None, "error_summary": None, "pending_reason": None,
        "reason_kind": "new", "queue_position": 1, "priority": -5, "max_runtime_s": 7200.0,
        "description": None, "labels": {}, "max_attempts": None,
        "next_run_at": "2025-12-23T14:32:01.500Z", "estimated_start": None,
        "estimate_basis": "unknown", "estimated_start_bound": None,
        "cancel_requested": False,
    }


def _estimate(shown: dict) -> tuple:
    return shown["estimated_start"], shown["estimate_basis"], shown["estimated_start_bound"]


def test_task_json_shows_the_planned_start_of_a_waiting_task_only() -> None:
    assert _estimate(task_json(task(), Planned(T + 600), job_output=True)) == (
        iso(T + 600), "time_limits", iso(T + 600))
    # from run history: good to minutes, so rounded to the minute; the bound beside it
    minute = T - 1.5  # 14:32:00
    assert _estimate(task_json(task(), Planned(T + 7200, minute + 29.6 * 60),
                               job_output=True)) == (
        iso(minute + 30 * 60), "run_history", iso(T + 7200))
    running = task(state=TaskState.RUNNING, latest_attempt=attempt(ray_status="RUNNING"))
    assert _estimate(task_json(running, Planned(T + 600), job_output=True)) == (
        None, None, None)


def test_task_json_with_an_attempt_hides_next_run_at_once_not_runnable() -> None:
    body = task_json(task(state=TaskState.RUNNING, latest_attempt=attempt(ray_status="RUNNING"),
                          queue_position=None, cancel_requested_at=T + 9),
                     job_output=True)
    assert body["state"] == "RUNNING" and body["next_run_at"] is None
    assert body["cancel_requested"] is True and body["queue_position"] is None
    assert body["reason_kind"] is None  # only a waiting task has a reason
    assert body["latest_attempt"] == {
        "attempt_no": 1, "ray_submission_id": TID + "--a01", "ray_status": "RUNNING",
        "start_time": iso(T + 2), "end_time": iso(T + 3), "nodes": None,
    }


def test_attempt_json() -> None:
    assert attempt_json(attempt(), job_output=True) == {
        "attempt_no": 1, "ray_submission_id": TID + "--a01", "ray_status": "FAILED",
        "start_time": "2025-12-23T14:32:03.500Z", "end_time": "2025-12-23T14:32:04.500Z",
        "failure_kind": "INSUFFICIENT_RESOURCES", "message": "m", "message_hidden": False,
        "submitted_at": "2025-12-23T14:32:02.500Z", "exit_code": 1, "stop_requested": False,
        "nodes": None,
    }
    placed = attempt(nodes=(AttemptNode("gpu-07", "gang", 4.0, T + 3),
                            AttemptNode("cpu-01", "driver", 0.0, T + 2)))
    assert attempt_json(placed, job_output=False)["nodes"] == [
        {"name": "gpu-07", "role": "gang", "gpus": 4.0, "seen_at": iso(T + 3)},
        {"name": "cpu-01", "role": "driver", "gpus": 0.0, "seen_at": iso(T + 2)}]
    assert attempt_json(attempt(start_time=None, end_time=None),
                        job_output=True)["end_time"] is None


def test_attempt_json_withholds_the_message_from_others() -> None:
    shown = attempt_json(attempt(message="last available logs: WANDB_API_KEY=s3cret"),
                         job_output=False)
    assert shown["message"] is None and shown["message_hidden"] is True
    assert shown["failure_kind"] == "INSUFFICIENT_RESOURCES"
    assert attempt_json(attempt(message=None), job_output=False)["message_hidden"] is False


def test_task_json_shows_others_the_summary_in_argus_words() -> None:
    ended = task(state=TaskState.FAILED, error_summary="RUNTIME_ERROR: KeyError: 's3cret'")
    assert task_json(ended, job_output=True)["error_summary"] == (
        "RUNTIME_ERROR: KeyError: 's3cret'")
    assert task_json(ended, job_output=False)["error_summary"] == "RUNTIME_ERROR"
    assert task_json(task(), job_output=False)["error_summary"] is None


def test_event_json() -> None:
    event = EventRow(id=7, task_id=TID, ts=T, event_type="CREATED", payload={"state": "QUEUED"})
    assert event_json(event, job_output=True) == {
        "id": 7, "ts": "2025-12-23T14:32:01.500Z", "type": "CREATED",
        "payload": {"state": "QUEUED"}}


def test_event_payloads_lose_the_jobs_words_for_others() -> None:
    payload = {"from": "RUNNING", "to": "FAILED", "failure_kind": "RUNTIME_ERROR",
               "message": "last available logs: s3cret", "log_tail": "s3cret",
               "error_summary": "RUNTIME_ERROR: ValueError: s3cret",
               "resolved": {"overrides": ["+wandb.key=s3cret"]},
               "reason": "cancel requested"}
    assert shown_payload(payload, True) == payload
    assert shown_payload(payload, False) == {
        "from": "RUNNING", "to": "FAILED", "failure_kind": "RUNTIME_ERROR",
        "error_summary": "RUNTIME_ERROR", "reason": "cancel requested"}
    assert shown_payload({"error_summary": 7}, False) == {"error_summary": None}
    event = EventRow(id=1, task_id=TID, ts=T, event_type="STATE_TRANSITION", payload=payload)
    assert "s3cret" not in str(event_json(event, job_output=False))


def test_shown_rows_for_the_console() -> None:
    row = task(state=TaskState.FAILED, error_summary="USER_ERROR: FileNotFoundError: /s3cret")
    attempts = [attempt(message="s3cret")]
    events = [EventRow(id=1, task_id=TID, ts=T, event_type="X", payload={"message": "s3cret"})]
    assert shown_rows(row, attempts, events, True) == (row, attempts, events)
    t, a, e = shown_rows(row, attempts, events, False)
    assert t.error_summary == "USER_ERROR" and a[0].message is None and e[0].payload == {}
    assert "s3cret" not in repr((t, a, e))


def test_cursor_round_trip() -> None:
    for seq in (1, 42, MAX_SEQ):
        cursor = encode_cursor(seq)
        assert "=" not in cursor and decode_cursor(cursor) == seq


@pytest.mark.parametrize("bad", [
    "nope",  # junk
    encode_cursor(5)[:-1] + "!",  # bad base64
    "c2VxOi0x",  # seq:-1
    encode_cursor(0),
    encode_cursor(MAX_SEQ + 1),  # would overflow SQLite's integer
    "aWQ6NQ",  # id:5 (another kind)
    "",
])
def test_invalid_cursors(bad: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(bad)
