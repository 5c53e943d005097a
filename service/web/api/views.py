"""The JSON shape of what the store returns, and the opaque cursors of task lists.

Times leave as ISO-8601 UTC strings (``timefmt.iso``); a task's ``next_run_at`` only
while it is runnable (otherwise it means nothing to a reader).

What the job wrote reaches its task's owner and admins only, like its logs: a view of a
task, an attempt or an event takes ``job_output`` (the caller decides it:
``Principal.may_act_on(task.user)``); without it, ``error_summary`` is in Argus's words
(``failures.public_summary``), an attempt's ``message`` is null and an event's payload
loses the fields that quote the job or its owner's JobSpec (``OWNER_ONLY_FIELDS``).
"""

from __future__ import annotations

import base64
import binascii
import heapq
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from service.domain.progress import Point
from service.domain.reasons import RUN_HISTORY, UNKNOWN, Planned, WaitKind
from service.domain.rows import (
    MAX_SEQ,
    AttemptRow,
    EventRow,
    ProgressRow,
    TaskRow,
    TokenRow,
    UserRow,
)
from service.domain.states import RUNNABLE, TaskState
from service.domain.timefmt import iso
from service.domain.users import display_prefix
from service.jobspec.shown import SHOWN
from service.policy.dependencies import Dep, OnUnsatisfiable, wait_reason
from service.policy.failures import public_summary
from service.policy.quotas import Limits
from service.policy.usage import AttemptUsage, Report, TaskUsage, UserUsage
from service.scheduling.fairshare import Share
from service.web.api.params import parse_uint


class InvalidCursor(ValueError):
    """A pagination cursor that this service did not hand out."""


def encode_cursor(seq: int, kind: str = "seq") -> str:
    """The cursor of the list page that starts below task ``seq`` (``kind`` "pos": the
    queue page that starts after that many pending tasks)."""
    return base64.urlsafe_b64encode(f"{kind}:{seq}".encode()).decode().rstrip("=")


_CURSOR = re.compile(r"[A-Za-z0-9_-]{1,40}")  # what encode_cursor makes (no padding)


def decode_cursor(cursor: str, kind: str = "seq") -> int:
    """The number a cursor from ``encode_cursor`` of ``kind`` stands for; InvalidCursor
    otherwise (also for a number out of 1..MAX_SEQ or not written as plain ASCII
    digits)."""
    seq = None
    if _CURSOR.fullmatch(cursor):
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        except (binascii.Error, UnicodeDecodeError):
            raw = ""
        found, _, value = raw.partition(":")
        if found == kind:
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
        "nodes": None if attempt.nodes is None else [
            {"name": n.name, "role": n.role, "gpus": n.gpus, "seen_at": iso(n.seen_at)}
            for n in attempt.nodes],
    }


def attempt_json(attempt: AttemptRow, *, job_output: bool) -> dict[str, Any]:
    """An attempt; its ``message`` (Ray's, which quotes the driver log's tail when the job
    failed) only with ``job_output`` (``message_hidden`` says when it was withheld)."""
    return {
        **attempt_summary_json(attempt),
        "failure_kind": attempt.failure_kind,
        "message": attempt.message if job_output else None,
        "message_hidden": not job_output and attempt.message is not None,
        "submitted_at": iso(attempt.submitted_at),
        "exit_code": attempt.exit_code,
        "stop_requested": attempt.stop_requested,
    }


def estimate_json(estimate: Planned | None, waiting: bool) -> dict[str, Any]:
    """A waiting task's start estimate, what it comes from, and the limits' bound; nulls
    for a task that does not wait. From run history it is good to minutes: rounded so."""
    if not waiting:
        return {"estimated_start": None, "estimate_basis": None, "estimated_start_bound": None}
    if estimate is None:
        return {"estimated_start": None, "estimate_basis": UNKNOWN,
                "estimated_start_bound": None}
    start = estimate.start
    if estimate.basis == RUN_HISTORY:
        start = round(start / 60) * 60
    return {"estimated_start": iso(start), "estimate_basis": estimate.basis,
            "estimated_start_bound": iso(estimate.bound)}


def task_json(task: TaskRow, estimate: Planned | None = None, *, job_output: bool
              ) -> dict[str, Any]:
    """A task as the API shows it; ``estimate``: when the scheduler's last plan expects it
    to start (a waiting task's; None: it planned none); ``job_output``: the caller may
    read what the job wrote (else ``error_summary`` is in Argus's words only). The
    JobSpec's shown fields (``SHOWN``) come from its stored spec, decoded once."""
    spec = task.spec
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
        "error_summary": task.error_summary if job_output else public_summary(
            task.error_summary),
        "pending_reason": task.pending_reason,
        "reason_kind": (task.reason_kind or WaitKind.NEW.value) if task.state in RUNNABLE
                       else None,
        "queue_position": task.queue_position,
        "priority": task.priority,
        "max_runtime_s": task.max_runtime_s,
        **{shown.name: shown.value(spec) for shown in SHOWN},
        "next_run_at": iso(task.next_run_at) if task.state in RUNNABLE else None,
        **estimate_json(estimate, task.state in RUNNABLE),
        "cancel_requested": task.cancel_requested,
    }


def progress_json(row: ProgressRow | None, now: float) -> dict[str, Any] | None:
    """How far the task's latest attempt got (None: no step line read yet). Rate and ETA
    only while it runs: they are the attempt's own pace, not a promise after it ended."""
    if row is None:
        return None
    p = row.progress
    running = row.state is TaskState.RUNNING
    rate, eta_at = (p.rate, p.eta_at) if running else (None, None)
    return {
        "attempt_no": row.attempt_no,
        "step": p.step,
        "total_steps": p.total,
        "fraction": None if p.fraction is None else round(p.fraction, 4),
        "resumed_from": p.resumed_from,
        "rate_steps_per_s": None if rate is None else round(rate, 4),
        "eta_s": None if eta_at is None else round(max(0.0, eta_at - now), 1),
        "eta_at": iso(eta_at),
        "last_step_at": iso(p.last_at),
    }


def task_with_progress(task: TaskRow, progress: ProgressRow | None,
                       now: float, estimate: Planned | None = None, *, job_output: bool
                       ) -> dict[str, Any]:
    """``task_json`` and the ``progress`` of its latest attempt."""
    return {**task_json(task, estimate, job_output=job_output),
            "progress": progress_json(progress, now)}


def curves_json(task_id: str, keys: list[str], chosen: list[str],
                joined: Mapping[str, list[Point]]) -> dict[str, Any]:
    """Every metric name of the task, and the chosen ones' points on one step axis."""
    return {
        "task_id": task_id,
        "keys": keys,
        "series": [{
            "key": key,
            "steps": [p.step for p in joined.get(key, [])],
            "values": [p.value for p in joined.get(key, [])],
            "attempts": [p.attempt_no for p in joined.get(key, [])],
        } for key in chosen],
    }


def fair_share_json(shares: Mapping[str | None, Share]) -> list[dict[str, Any]]:
    """Each user's standing at the scheduler's last tick, smallest weighted share first
    (the user fair share serves next among equal priorities)."""
    return [
        {"user": user, "gpus": round(s.charge, 3), "share": round(s.share, 4),
         "weight": s.weight, "weighted_share": round(s.weighted, 4)}
        for user, s in sorted(shares.items(), key=lambda kv: (kv[1].weighted, kv[0] or ""))
    ]


# An event payload's fields that quote the job (Ray's message, a summary, a log's lines)
# or its owner's JobSpec (a pipeline stage's, resolved): dropped for anyone but the task's
# owner and admins; an ``error_summary`` field is kept in Argus's words.
OWNER_ONLY_FIELDS = frozenset({"message", "log", "log_tail", "resolved"})


def shown_payload(payload: Mapping[str, Any], job_output: bool) -> dict[str, Any]:
    """An event's payload as the caller may see it (``job_output``: all of it)."""
    if job_output:
        return dict(payload)
    out = {k: v for k, v in payload.items() if k not in OWNER_ONLY_FIELDS}
    if "error_summary" in out:
        summary = out["error_summary"]
        out["error_summary"] = public_summary(summary) if isinstance(summary, str) else None
    return out


def event_json(event: EventRow, *, job_output: bool) -> dict[str, Any]:
    return {"id": event.id, "ts": iso(event.ts), "type": event.event_type,
            "payload": shown_payload(event.payload, job_output)}


def shown_rows(task: TaskRow, attempts: list[AttemptRow], events: list[EventRow],
               job_output: bool) -> tuple[TaskRow, list[AttemptRow], list[EventRow]]:
    """A task, its attempts and its events as the caller may see them (the console's task
    page): whole with ``job_output``; else as the JSON views above show them."""
    if job_output:
        return task, attempts, events
    return (shown_task(task, False), [replace(a, message=None) for a in attempts],
            [replace(e, payload=shown_payload(e.payload, False)) for e in events])


def shown_task(task: TaskRow, job_output: bool) -> TaskRow:
    """A task row as the caller may see it (the console's lists)."""
    if job_output or task.error_summary is None:
        return task
    return replace(task, error_summary=public_summary(task.error_summary))


# -- users, tokens, accounting ---------------------------------------------------------


def limits_json(limits: Limits) -> dict[str, Any]:
    """A user's limits; 0 means no limit."""
    return {"max_running_tasks": limits.max_running_tasks, "max_gpus": limits.max_gpus,
            "max_waiting_tasks": limits.max_waiting_tasks,
            "max_spec_bytes_per_day": limits.max_spec_bytes_per_day}


def user_json(user: UserRow, limits: Limits) -> dict[str, Any]:
    return {
        "name": user.name,
        "role": user.role.value,
        "enabled": user.enabled,
        "created_at": iso(user.created_at),
        "disabled_at": iso(user.disabled_at),
        "limits": limits_json(limits),
    }


def token_state(token: TokenRow, now: float) -> str:
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at is not None and now >= token.expires_at:
        return "expired"
    return "active"


def token_json(token: TokenRow, now: float) -> dict[str, Any]:
    """A token as lists show it: its public id and prefix, never the secret or its hash."""
    return {
        "token_id": token.token_id,
        "prefix": display_prefix(token.token_id),
        "user": token.user,
        "label": token.label,
        "state": token_state(token, now),
        "created_at": iso(token.created_at),
        "last_used_at": iso(token.last_used_at),
        "expires_at": iso(token.expires_at),
        "revoked_at": iso(token.revoked_at),
    }


def _rounded(seconds: float) -> float:
    return round(seconds, 3)


def _attempt_usage_json(used: AttemptUsage) -> dict[str, Any]:
    span = used.span
    return {
        "attempt_no": span.attempt_no,
        "ray_status": span.ray_status,
        "failure_kind": span.failure_kind,
        "failed": used.failed,
        "running": used.running,
        "start_time": iso(span.start_time),
        "end_time": iso(span.end_time),
        "counted_from": iso(used.counted_from),
        "counted_to": iso(used.counted_to),
        "gpu_seconds": _rounded(used.gpu_seconds),
    }


def _task_usage_json(task: TaskUsage) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "user": task.user,
        "gpus": task.gpus,
        "gpu_seconds": _rounded(task.gpu_seconds),
        "failed_gpu_seconds": _rounded(task.failed_gpu_seconds),
        "attempts": [_attempt_usage_json(a) for a in task.attempts],
    }


def _user_usage_json(user: UserUsage) -> dict[str, Any]:
    return {
        "user": user.user,
        "gpu_seconds": _rounded(user.gpu_seconds),
        "gpu_hours": round(user.gpu_seconds / 3600, 4),
        "failed_gpu_seconds": _rounded(user.failed_gpu_seconds),
        "tasks": user.tasks,
        "attempts": user.attempts,
        "running_attempts": user.running_attempts,
    }


def usage_json(report: Report, now: float, task_limit: int) -> dict[str, Any]:
    """Every user's totals; the ``task_limit`` tasks that used the most GPU time."""
    top = heapq.nsmallest(task_limit, report.tasks, key=lambda t: (-t.gpu_seconds, t.task_id))
    return {
        "from": iso(report.window_from),
        "to": iso(report.window_to),
        "generated_at": iso(now),
        "users": [_user_usage_json(u) for u in report.users],
        "tasks": [_task_usage_json(t) for t in top],
        "tasks_total": len(report.tasks) if report.tasks_total is None else report.tasks_total,
    }


# -- a task's dependencies ----------------------------------------------------------------


def dependency_json(deps: list[Dep], on_unsatisfiable: str,
                    stage: tuple[str, str] | None, state: TaskState) -> dict[str, Any]:
    """The fields a task's JSON gains: ``after`` (each parent with its state now),
    ``on_unsatisfiable``, ``waiting_on`` (a BLOCKED task's reason; null otherwise) and
    ``pipeline`` (``{pipeline_id, stage}`` or null)."""
    policy = OnUnsatisfiable(on_unsatisfiable)
    return {
        "after": [{"task_id": d.parent_id, "condition": d.condition.value,
                   "state": d.parent_state.value} for d in deps],
        "on_unsatisfiable": policy.value,
        "waiting_on": wait_reason(deps, policy) if state is TaskState.BLOCKED else None,
        "pipeline": None if stage is None else {"pipeline_id": stage[0], "stage": stage[1]},
    }


def task_dependencies_json(deps: list[Dep], on_unsatisfiable: str,
                           stage: tuple[str, str] | None, state: TaskState
                           ) -> dict[str, Any]:
    """``dependency_json`` with ``pending_reason`` (what the CLI and console print) set to
    ``waiting_on`` when the task waits on its parents."""
    out = dependency_json(deps, on_unsatisfiable, stage, state)
    if out["waiting_on"] is not None:
        out["pending_reason"] = out["waiting_on"]
    return out
