"""What users may subscribe to, and what each delivery says.

``SOURCES`` maps a store event kind (``events.event_type``) to a function of the event's
payload that names its webhook event type, or None when that event is not one. The store
consults it for every event it writes (``service.store.outbox.enqueue``), so a new kind of event
becomes subscribable with one line here; a kind that names its owner in the payload
(``owner``) needs no task behind it.

A node event (``service.domain.nodes.NodeEventKind``: a cordon, a drain, a resume, a
quarantine) is cluster-wide: its type is ``node.<kind>`` (``NODE_DRAINED`` ->
``node.drained``, ``node_event_type``), only an admin may subscribe to one
(``ADMIN_ONLY``), and its deliveries go to the hooks of admins only
(``service.store.outbox.enqueue_node``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from service.domain.nodes import NodeEventKind, NodeEventRow
from service.domain.states import FailureKind, TaskState
from service.domain.timefmt import iso


def _node_type(kind: NodeEventKind) -> str:
    return f"node.{kind.value.removeprefix('NODE_').lower()}"


# The task and pipeline types, then one node type per NodeEventKind (made from the kinds, so
# a kind added there is subscribable with no change here): NODE_CORDONED = "node.cordoned".
EventType = StrEnum("EventType", {  # type: ignore[misc]
    "TASK_SUCCEEDED": "task.succeeded",
    "TASK_FAILED": "task.failed",
    "TASK_CANCELED": "task.canceled",
    "TASK_PREEMPTED": "task.preempted",
    "TASK_TIME_LIMIT": "task.time_limit",
    "TASK_RETRIED": "task.retried",
    "PIPELINE_ENDED": "pipeline.ended",
    **{f"NODE_{kind.name}": _node_type(kind) for kind in NodeEventKind},
}, module=__name__)

_NODE_ABOUT = {
    "NODE_CORDONED": "a node was cordoned: no new attempts there",
    "NODE_DRAINED": "a node was drained: cordoned, its attempts finish or are re-queued",
    "NODE_RESUMED": "a cordoned or drained node is back in admission",
    "NODE_QUARANTINED": "the service cordoned a node on the evidence of failed attempts",
}

DESCRIPTIONS: Mapping[EventType, str] = {
    EventType.TASK_SUCCEEDED: "the task ended SUCCEEDED",
    EventType.TASK_FAILED: "the task ended FAILED (no retry left, or not retryable)",
    EventType.TASK_CANCELED: "the task ended CANCELED",
    EventType.TASK_PREEMPTED: "an attempt was stopped for a higher-priority task; the "
                              "task waits to resume",
    EventType.TASK_TIME_LIMIT: "the task ran past its max_runtime_s and ended FAILED",
    EventType.TASK_RETRIED: "an attempt failed retryably; the next one is scheduled",
    EventType.PIPELINE_ENDED: "a pipeline reached its final state",
    **{EventType(_node_type(kind)): "(admins) " + _NODE_ABOUT.get(
        kind.value, f"a node event {kind.value}") for kind in NodeEventKind},
}


def node_event_type(kind: NodeEventKind) -> EventType:
    """The webhook type of a node event: ``NODE_X`` -> ``node.x``."""
    return EventType(_node_type(kind))


# the types only an admin may subscribe to (and only admins' hooks receive)
ADMIN_ONLY: frozenset[EventType] = frozenset(node_event_type(k) for k in NodeEventKind)

_ENDED = {TaskState.SUCCEEDED.value: EventType.TASK_SUCCEEDED,
          TaskState.FAILED.value: EventType.TASK_FAILED,
          TaskState.CANCELED.value: EventType.TASK_CANCELED}


def _transition(payload: Mapping[str, Any]) -> EventType | None:
    kind = _ENDED.get(payload.get("to", ""))
    if kind is EventType.TASK_FAILED and payload.get("failure_kind") == FailureKind.TIME_LIMIT:
        return EventType.TASK_TIME_LIMIT
    return kind


def _retry(payload: Mapping[str, Any]) -> EventType:
    if payload.get("failure_kind") == FailureKind.PREEMPTED:
        return EventType.TASK_PREEMPTED
    return EventType.TASK_RETRIED


# store event kind -> its webhook event type (None: not one)
SOURCES: Mapping[str, Callable[[Mapping[str, Any]], EventType | None]] = {
    "STATE_TRANSITION": _transition,
    "RETRY_SCHEDULED": _retry,
    "PIPELINE_ENDED": lambda _payload: EventType.PIPELINE_ENDED,
}


def webhook_type(kind: str, payload: Mapping[str, Any]) -> EventType | None:
    """The webhook event type of a store event (None: nobody may subscribe to it)."""
    source = SOURCES.get(kind)
    return None if source is None else source(payload)


def parse_types(raw: object) -> tuple[tuple[EventType, ...], str | None]:
    """A subscription's event list from input: (sorted unique types, problem or None)."""
    if not isinstance(raw, list) or not raw:
        return (), f"must be a non-empty list of event types: {', '.join(EventType)}"
    known = {t.value for t in EventType}
    bad = [str(v)[:40] for v in raw if not isinstance(v, str) or v not in known]
    if bad:
        return (), f"unknown event types {bad}; known: {', '.join(EventType)}"
    return tuple(sorted({EventType(v) for v in raw})), None


@dataclass(frozen=True, slots=True)
class TaskFacts:
    """What the task row says when its event is written (the state already moved)."""

    user: str | None
    workload: str
    state: str
    error_summary: str | None


def task_data(event_type: EventType, event_id: int, task_id: str,
              payload: Mapping[str, Any], facts: TaskFacts | None) -> dict[str, Any]:
    """The ``data`` of a delivery: ids, state, owner, attempt and why."""
    data: dict[str, Any] = {"event_id": event_id, "task_id": task_id}
    if event_type is EventType.PIPELINE_ENDED or facts is None:
        return {**data, **payload}
    retried = event_type in (EventType.TASK_RETRIED, EventType.TASK_PREEMPTED)
    data.update(
        state=facts.state, owner=facts.user, workload=facts.workload,
        attempt=payload.get("failed_attempt" if retried else "attempt_no"),
        failure_kind=payload.get("failure_kind"),
        reason=facts.error_summary if not retried else payload.get("failure_kind"),
    )
    if retried:
        data.update(next_attempt=payload.get("next_attempt"),
                    next_run_at=iso(payload.get("next_run_at")))
    elif facts.error_summary is None and payload.get("reason"):
        data["reason"] = payload["reason"]
    return data


def node_data(event_id: int, row: NodeEventRow) -> dict[str, Any]:
    """The ``data`` of a node event's delivery."""
    return {"event_id": event_id, "node": row.name, "kind": row.kind.value,
            "source": row.source.value, "by": row.by, "reason": row.reason,
            "at": iso(row.ts)}


def _slack_text(event_type: str, data: Mapping[str, Any]) -> str:
    what = data.get("task_id") or data.get("pipeline_id") or data.get("node") or "?"
    parts = [f"*{event_type}* {what}"]
    for key in ("state", "owner", "attempt", "source", "by", "reason"):
        if data.get(key) is not None:
            parts.append(f"{key}: {str(data[key])[:300]}")
    return " | ".join(parts)


def body(fmt: str, event_type: str, ts: float, data: Mapping[str, Any]) -> bytes:
    """The request body: ``{type, timestamp, data}`` (standard) or ``{text}`` (slack)."""
    doc: dict[str, Any]
    if fmt == "slack":
        doc = {"text": _slack_text(event_type, data)}
    else:
        doc = {"type": event_type, "timestamp": iso(ts), "data": dict(data)}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True, default=str).encode()
