"""Where attempts ran (``Store.placement``): the ``attempt_nodes`` rows, by node name.

The scheduler writes a node the first time it sees an attempt there (its driver's node
from Ray's job info, the nodes its placement groups hold GPUs on from the tick's
snapshot); a row once written is never rewritten (the insert does nothing when the row is
there), so the first sighting is the one kept. Each write that adds rows adds one
``PLACED`` event on the task, in the same transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence

from service.domain.rows import AttemptNode
from service.store.core import Part
from service.store.sql import QUERIES as Q

DRIVER = "driver"
GANG = "gang"
ROLES = (DRIVER, GANG)
PLACED = "PLACED"  # the event of a write that added rows


def ordered(nodes: Iterable[AttemptNode]) -> tuple[AttemptNode, ...]:
    """An attempt's nodes as shown: first seen first, then the driver's, then by name."""
    return tuple(sorted(nodes, key=lambda n: (n.seen_at, n.role, n.name)))


def nodes_of(rows: Iterable[sqlite3.Row]) -> tuple[AttemptNode, ...]:
    return ordered(AttemptNode(name=r["name"], role=r["role"], gpus=float(r["gpus"]),
                               seen_at=r["seen_at"]) for r in rows)


def nodes_of_json(text: str) -> tuple[AttemptNode, ...]:
    """The nodes from a ``json_group_array`` of ``[name, role, gpus, seen_at]``."""
    if text == "[]":
        return ()
    return ordered(AttemptNode(name, role, float(gpus), seen_at)
                   for name, role, gpus, seen_at in json.loads(text))


def nodes_by_attempt(rows: Iterable[sqlite3.Row]) -> dict[int, tuple[AttemptNode, ...]]:
    out: dict[int, list[sqlite3.Row]] = {}
    for r in rows:
        out.setdefault(r["attempt_no"], []).append(r)
    return {n: nodes_of(rs) for n, rs in out.items()}


class PlacementStore(Part):
    """The nodes each attempt ran on."""

    def record(self, task_id: str, attempt_no: int,
               nodes: Sequence[tuple[str, str, float]], now: float) -> list[AttemptNode]:
        """Record ``(name, role, gpus)`` of attempt ``attempt_no`` seen at ``now``, in
        one transaction; rows already there are kept as they are. Returns the rows added
        (none for an attempt that does not exist)."""
        return self.record_many([(task_id, attempt_no, nodes)], now)[(task_id, attempt_no)]

    def record_many(self, seen: Sequence[tuple[str, int, Sequence[tuple[str, str, float]]]],
                    now: float) -> dict[tuple[str, int], list[AttemptNode]]:
        """``record`` of several attempts, ``(task_id, attempt_no, nodes)`` each, in one
        transaction (a tick's sightings). Returns the rows added per attempt."""
        for _, _, nodes in seen:
            for name, role, gpus in nodes:
                if role not in ROLES:
                    raise ValueError(f"role must be one of {ROLES}, got {role!r}")
                if not name:
                    raise ValueError("a node name must not be empty")
                if gpus < 0:
                    raise ValueError(f"gpus must be >= 0, got {gpus}")
        out: dict[tuple[str, int], list[AttemptNode]] = {}
        with self._tx() as conn:
            for task_id, attempt_no, nodes in seen:
                added = out.setdefault((task_id, attempt_no), [])
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
        return out

    def of_attempt(self, task_id: str, attempt_no: int) -> tuple[AttemptNode, ...]:
        return nodes_of(self._reader().execute(Q["attempt_nodes_of_attempt"], {
            "task_id": task_id, "attempt_no": attempt_no}))

    def of_task(self, task_id: str) -> dict[int, tuple[AttemptNode, ...]]:
        """Attempt number -> its nodes (attempts with none are absent)."""
        return nodes_by_attempt(self._reader().execute(Q["attempt_nodes_of_task"],
                                                       {"task_id": task_id}))
