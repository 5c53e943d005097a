"""Nodes out of admission (``Store.nodes``): cordon, drain, resume; the quarantine's
evidence against them (``add_evidence``, ``evidence_since``).

Every change is one transaction: a guarded write of ``node_states`` (an insert that does
nothing when the node already has a row, an update or delete guarded by the state or the
source read) and its row in ``node_events``. A guard that finds another state raises
``NodeStateConflict`` carrying the row that is there, so nothing is half-written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from service.domain.nodes import (
    NodeEventKind,
    NodeEventRow,
    NodeSource,
    NodeStateKind,
    NodeStateRow,
)
from service.policy.quarantine import Evidence
from service.store.core import Part, StoreError
from service.store.outbox import enqueue_node
from service.store.sql import QUERIES as Q


class NodeStateConflict(StoreError):
    """The node is not in the state the change needs: ``current`` is what is there."""

    def __init__(self, name: str, current: NodeStateRow | None, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.current = current


def _row(r: sqlite3.Row) -> NodeStateRow:
    return NodeStateRow(name=r["name"], state=NodeStateKind(r["state"]),
                        source=NodeSource(r["source"]), by=r["by_user"], at=r["at"],
                        reason=r["reason"], requeue=bool(r["requeue"]))


def _event(r: sqlite3.Row) -> NodeEventRow:
    return NodeEventRow(name=r["name"], ts=r["ts"], kind=NodeEventKind(r["kind"]),
                        source=NodeSource(r["source"]), by=r["by_user"], reason=r["reason"])


def who(row: NodeStateRow) -> str:
    """Who put the node out of admission, in words."""
    if row.source is NodeSource.OPERATOR:
        return row.by or "an operator"
    return "the health check" if row.source is NodeSource.HEALTH else "the quarantine"


def describe(row: NodeStateRow) -> str:
    what = f"{row.state.value} with requeue" if row.requeue else row.state.value
    return f"node {row.name} is already {what} (by {who(row)}: {row.reason})"


class NodeStore(Part):
    """The nodes' stored states and events."""

    def states(self) -> list[NodeStateRow]:
        """Every node's stored state. A tick asks three times (fences, health, admission):
        read again only when a commit may have come since this thread's last read
        (``Readers.version``); the rows are frozen."""
        return self._reread_on_change(
            "node_states", lambda conn: [_row(r) for r in conn.execute(Q["node_states"])])

    def state(self, name: str) -> NodeStateRow | None:
        r = self._reader().execute(Q["node_state"], {"name": name}).fetchone()
        return None if r is None else _row(r)

    def events(self, name: str) -> list[NodeEventRow]:
        return [_event(r) for r in self._reader().execute(Q["node_events_of"], {"name": name})]

    def latest_events(self, name: str, limit: int) -> list[NodeEventRow]:
        """The newest ``limit`` events of node ``name``, newest first."""
        return [_event(r) for r in self._reader().execute(
            Q["node_events_latest"], {"name": name, "limit": limit})]

    def observed(self, after: int = 0) -> tuple[list[NodeStateRow], dict[tuple[str, str], int],
                                                int]:
        """The stored states, the count of node events after id ``after`` by (kind,
        source), and the last event id counted (``after`` when none), read in one
        snapshot (``/metrics``: it passes the last id back, so a scrape reads only the
        events written since the one before)."""
        with self._snapshot() as conn:
            states = [_row(r) for r in conn.execute(Q["node_states"])]
            counts, last = {}, after
            for r in conn.execute(Q["node_event_counts"], {"after": after}):
                counts[(r["kind"], r["source"])] = r["n"]
                last = max(last, r["last"])
        return states, counts, last

    @staticmethod
    def _node_event(conn: sqlite3.Connection, row: NodeStateRow,
               kind: NodeEventKind) -> None:
        """The event of ``row``'s change and, in the same transaction, the webhook
        deliveries it causes (admins' hooks that follow its type)."""
        cur = conn.execute(Q["node_event_insert"], {
            "name": row.name, "ts": row.at, "kind": kind.value, "source": row.source.value,
            "by_user": row.by, "reason": row.reason})
        assert cur.lastrowid is not None
        enqueue_node(conn, cur.lastrowid, NodeEventRow(
            row.name, row.at, kind, row.source, row.by, row.reason))

    def cordon(self, name: str, source: NodeSource, by: str | None, now: float,
               reason: str) -> NodeStateRow:
        """Cordon a node with no stored state. Raises ``NodeStateConflict`` when it is
        cordoned or drained already."""
        row = NodeStateRow(name, NodeStateKind.CORDONED, source, by, now, reason)
        with self._tx() as conn:
            cur = conn.execute(Q["node_state_insert"], {
                "name": name, "state": row.state.value, "source": source.value,
                "by_user": by, "at": now, "reason": reason, "requeue": 0})
            if cur.rowcount != 1:
                current = _row(conn.execute(Q["node_state"], {"name": name}).fetchone())
                raise NodeStateConflict(name, current, describe(current))
            self._node_event(conn, row, NodeEventKind.CORDONED)
        return row

    def quarantine(self, name: str, now: float, reason: str) -> NodeStateRow:
        """Cordon a node on the evidence of failed attempts (source ``quarantine``, event
        NODE_QUARANTINED): a node with no stored state, or one the health check cordoned
        (its cordon becomes the quarantine's, which the health check never lifts).
        Raises ``NodeStateConflict`` when an operator's state or a quarantine is there."""
        row = NodeStateRow(name, NodeStateKind.CORDONED, NodeSource.QUARANTINE, None, now,
                           reason)
        params = {"name": name, "state": row.state.value, "source": row.source.value,
                  "by_user": None, "at": now, "reason": reason,
                  "from_source": NodeSource.HEALTH.value, "requeue": 0}
        with self._tx() as conn:
            if conn.execute(Q["node_state_insert"], params).rowcount != 1 and \
                    conn.execute(Q["node_state_take_over"], params).rowcount != 1:
                current = _row(conn.execute(Q["node_state"], {"name": name}).fetchone())
                raise NodeStateConflict(name, current, describe(current))
            self._node_event(conn, row, NodeEventKind.QUARANTINED)
        return row

    def drain(self, name: str, by: str | None, now: float, reason: str, *,
              requeue: bool = False) -> NodeStateRow:
        """Drain a node (an operator's): cordon it, or turn its cordon into a drain, or (with
        ``requeue``) a drain without requeue into one with it: the scheduler then stops the
        attempts there and re-queues them. Raises ``NodeStateConflict`` when it is drained
        already (with requeue, or ``requeue`` is not asked)."""
        row = NodeStateRow(name, NodeStateKind.DRAINED, NodeSource.OPERATOR, by, now, reason,
                           requeue)
        params = {"name": name, "state": row.state.value, "source": row.source.value,
                  "by_user": by, "at": now, "reason": reason, "requeue": int(requeue)}
        with self._tx() as conn:
            if conn.execute(Q["node_state_insert"], params).rowcount != 1 and \
                    conn.execute(Q["node_state_drain"], params).rowcount != 1:
                current = _row(conn.execute(Q["node_state"], {"name": name}).fetchone())
                raise NodeStateConflict(name, current, describe(current))
            self._node_event(conn, row, NodeEventKind.DRAINED)
        return row

    def resume(self, name: str, source: NodeSource | None, by: str | None, now: float,
               reason: str) -> NodeStateRow:
        """Put a node back into admission. ``source``: only a state of that source is
        lifted (the health check lifts its own cordons only); None: any. Returns the state
        lifted. Raises ``NodeStateConflict`` when the node has no such state."""
        with self._tx() as conn:
            found = conn.execute(Q["node_state"], {"name": name}).fetchone()
            current = None if found is None else _row(found)
            cur = conn.execute(Q["node_state_delete"], {
                "name": name, "source": None if source is None else source.value})
            if current is None or cur.rowcount != 1:
                message = (f"node {name} is not cordoned" if current is None else
                           f"node {name} was {current.state.value} by {current.source.value}"
                           f" ({who(current)}), not by {source}")
                raise NodeStateConflict(name, current, message)
            self._node_event(conn, NodeStateRow(name, current.state, source or NodeSource.OPERATOR,
                                           by, now, reason), NodeEventKind.RESUMED)
        return current

    # -- the quarantine's evidence ------------------------------------------------------
    def add_evidence(self, nodes: Iterable[str], evidence: Evidence, since: float) -> None:
        """``evidence`` against each of ``nodes``; the evidence older than ``since`` (out
        of the window) dropped in the same transaction."""
        with self._tx() as conn:
            conn.execute(Q["node_evidence_drop_before"], {"since": since})
            for node in nodes:
                conn.execute(Q["node_evidence_add"], {
                    "node": node, "task_id": evidence.task_id,
                    "attempt_no": evidence.attempt_no, "at": evidence.at,
                    "line": evidence.line})

    def evidence_since(self, since: float) -> list[tuple[str, Evidence]]:
        """``(node, evidence)`` from ``since`` on, oldest first."""
        return [(r["node"], Evidence(r["task_id"], r["attempt_no"], r["at"], r["line"]))
                for r in self._reader().execute(Q["node_evidence_since"], {"since": since})]
