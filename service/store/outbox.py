"""The webhook outbox: the deliveries an event causes, written in the event's own
transaction (``core.WriteCore.event``): a state change and the deliveries it causes
commit together or not at all. For an event kind that ``webhooks.events.SOURCES`` does not
name it costs a dictionary lookup; for one it names, the task's row by key and an indexed
look at its owner's hooks. A node event (``enqueue_node``) goes to the admins' hooks
that follow its type, and to no one else's."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from service.domain.nodes import NodeEventRow
from service.store.sql import QUERIES as Q
from service.webhooks.events import (
    EventType,
    TaskFacts,
    node_data,
    node_event_type,
    task_data,
    webhook_type,
)


def enqueue(conn: sqlite3.Connection, inserted: sqlite3.Cursor, task_id: str, now: float,
            kind: str, payload: Mapping[str, Any]) -> None:
    """The outbox rows of one event (inside its transaction), ``inserted`` the event's
    INSERT: a delivery to each hook of the owner (the payload's ``owner``, else the
    task's) that subscribed to its type. The event's id is read after the task's facts:
    on PostgreSQL both then come back in one round trip (``service.store.pg``)."""
    event_type = webhook_type(kind, payload)
    if event_type is None:
        return
    row = conn.execute(Q["webhook_task_facts"], {"task_id": task_id}).fetchone()
    facts = None if row is None else TaskFacts(row["user"], row["workload"], row["state"],
                                               row["error_summary"])
    owner = payload.get("owner") or (facts.user if facts else None)
    if owner is None:
        return
    event_id = inserted.lastrowid
    data = task_data(EventType(event_type), event_id, task_id, payload, facts)
    conn.execute(Q["webhook_enqueue"], {
        "event_id": event_id, "event_type": event_type.value, "now": now, "owner": owner,
        "data_json": json.dumps(data, sort_keys=True, default=str)})


def enqueue_node(conn: sqlite3.Connection, event_id: int, row: NodeEventRow) -> None:
    """The outbox rows of one node event (inside its transaction): a delivery to each hook
    of an enabled admin that subscribed to its type."""
    event_type = node_event_type(row.kind)
    conn.execute(Q["webhook_enqueue_admins"], {
        "event_id": event_id, "event_type": event_type.value, "now": row.ts,
        "data_json": json.dumps(node_data(event_id, row), sort_keys=True)})
