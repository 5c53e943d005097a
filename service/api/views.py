"""The JSON shape of what the store returns, and the opaque cursors of task lists.

Times leave as ISO-8601 UTC strings (``timefmt.iso``); a task's ``next_run_at`` only
while it is runnable (otherwise it means nothing to a reader).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from service.api.params import parse_uint
from service.rows import MAX_SEQ, AttemptRow, EventRow, TaskRow
from service.states import RUNNABLE
from service.timefmt import iso


class InvalidCursor(ValueError):
    """A pagination cursor that this service did not hand out."""


def encode_cursor(seq: int) -> str:
    """The cursor of the list page that starts below task ``seq``."""
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


_CURSOR = re.compile(r"[A-Za-z0-9_-]{1,40}")  # what encode_cursor makes (no padding)


def decode_cursor(cursor: str) -> int:
    """The ``seq`` a cursor from ``encode_cursor`` stands for; InvalidCursor otherwise
    (also for a number out of 1..MAX_SEQ or not written as plain ASCII digits)."""
    seq = None
    if _CURSOR.fullmatch(cursor):
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        except (binascii.Error, UnicodeDecodeError):
            raw = ""
        kind, _, value = raw.partition(":")
        if kind == "seq":
            seq = parse_uint(value, 1, MAX_SEQ)
    if seq is None:
        shown = cursor if len(cursor) <= 64 else cursor[:64] + "..."
        raise InvalidCursor(f"invalid cursor {shown!r}")
    return seq


def attempt_summary_json(attempt: AttemptRow) -> dict[str, Any]:
    """The ``latest_attempt`` object of a task."""
    return {
        "attempt_no": attempt.attempt_no,
        "ray_submission_id": attempt.ray_submission_id,
        "ray_status": attempt.ray_status,
        "start_time": iso(attempt.start_time),
        "end_time": iso(attempt.end_time),
    }


def attempt_json(attempt: AttemptRow) -> dict[str, Any]:
    return {
        **attempt_summary_json(attempt),
        "failure_kind": attempt.failure_kind,
        "message": attempt.message,
        "submitted_at": iso(attempt.submitted_at),
        "exit_code": attempt.exit_code,
        "stop_requested": attempt.stop_requested,
    }


def task_json(task: TaskRow) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "state": task.state.value,
        "workload": task.workload,
        "user": task.user,
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
        "desired_resources": {
            "nnodes": task.nnodes,
            "n_gpus_per_node": task.n_gpus_per_node,
            "total_gpus": task.total_gpus,
        },
        "latest_attempt": (
            attempt_summary_json(task.latest_attempt) if task.latest_attempt else None
        ),
        "error_summary": task.error_summary,
        "pending_reason": task.pending_reason,
        "queue_position": task.queue_position,
        "next_run_at": iso(task.next_run_at) if task.state in RUNNABLE else None,
        "cancel_requested": task.cancel_requested,
    }


def event_json(event: EventRow) -> dict[str, Any]:
    return {"id": event.id, "ts": iso(event.ts), "type": event.event_type,
            "payload": event.payload}
