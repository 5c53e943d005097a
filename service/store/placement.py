"""Where attempts ran (``Store.placement``): the ``attempt_nodes`` rows, by node name.

The scheduler writes a node the first time it sees an attempt there (its driver's node
from Ray's job info, the nodes its placement groups hold GPUs on from the tick's
snapshot); a row once written is never rewritten (the insert does nothing when the row is
there), so the first sighting is the one kept. Each write that adds rows adds one
``PLACED`` event on the task, in the same transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from service.domain.rows import AttemptNode
from service.store.core import Part
from service.store.sql import QUERIES as Q

DRIVER = "driver"
GANG = "gang"
ROLES = (DRIVER, GANG)
PLACED = "PLACED"  # the event of a write that added rows


def node_of(r: sqlite3.Row) -> AttemptNode:
    return AttemptNode(name=r["name"], role=r["role"], gpus=float(r["gpus"]),
                       seen_at=r["seen_at"])


def nodes_by_attempt(rows: Iterable[sqlite3.Row]) -> dict[int, tuple[AttemptNode, ...]]:
    out: dict[int, list[AttemptNode]] = {}
    for r in rows:
        out.setdefault(r["attempt_no"], []).append(node_of(r))
    return {n: tuple(nodes) for n, nodes in out.items()}


class PlacementStore(Part):
    """The nodes each attempt ran on."""

    def record(self, task_id: str, attempt_no: int,
               nodes: Sequence[tuple[str, str, float]], now: float) -> list[AttemptNode]:
        """Record ``(name, role, gpus)`` of attempt ``attempt_no`` seen at ``now``, in
        one transaction; rows already there are kept as they are. Returns the rows added
        (none for an attempt that does not exist)."""
        for name, role, gpus in nodes:
            if role not in ROLES:
                raise ValueError(f"role must be one of {ROLES}, got {role!r}")
            if not name:
                raise ValueError("a node name must not be empty")
            if gpus < 0:
                raise ValueError(f"gpus must be >= 0, got {gpus}")
        added: list[AttemptNode] = []
        with self._tx() as conn:
            for name, role, gpus in nodes:
                cur = conn.execute(Q["attempt_node_insert"], {
                    "task_id": task_id, "attempt_no": attempt_no, "name": name,
                    "role": role, "gpus": float(gpus), "seen_at": now})
                if cur.rowcount == 1:
                    added.append(AttemptNode(name, role, float(gpus), now))
            if added:
                self._event(conn, task_id, now, PLACED, {
                    "attempt_no": attempt_no,
                    "nodes": [{"name": n.name, "role": n.role, "gpus": n.gpus}
                              for n in added]})
        return added

    def of_attempt(self, task_id: str, attempt_no: int) -> tuple[AttemptNode, ...]:
        rows = self._reader().execute(Q["attempt_nodes_of_attempt"], {
            "task_id": task_id, "attempt_no": attempt_no})
        return tuple(node_of(r) for r in rows)

    def of_task(self, task_id: str) -> dict[int, tuple[AttemptNode, ...]]:
        """Attempt number -> its nodes (attempts with none are absent)."""
        return nodes_by_attempt(self._reader().execute(Q["attempt_nodes_of_task"],
                                                       {"task_id": task_id}))
