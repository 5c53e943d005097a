"""Where each attempt runs (issue 55): the nodes of its driver and its gang, by name,
recorded the first time the scheduler sees them (``Store.placement``).

The reconcile tells the driver's node (Ray's job info, every tick) and the tick's
snapshot the nodes each attempt's placement groups hold GPUs on (``held_on``). What was
recorded is remembered per submission id, so a tick writes only what is new, and all of
it in one transaction after the snapshot; an attempt that ends in the reconcile has its
driver's node written at once (its end's quarantine reads it). A node id is named from
the snapshot's nodes (``NodeResources.display_name``); one that no snapshot lists (a node
that left) is named by its id's prefix, as the console shows a node without a name.
"""

from __future__ import annotations

from collections.abc import Iterable

from service.cluster.boundary import ClusterSnapshot
from service.engine.ports import SchedulerStore
from service.store.placement import DRIVER, GANG
from service.store.writer import ActiveRow

Sighting = tuple[str, str, float]  # (node name, role, GPUs)


class PlacementRecorder:
    """Records the attempts' nodes, once each (see the module docstring)."""

    def __init__(self, store: SchedulerStore) -> None:
        self.store = store
        self._names: dict[str, str] = {}  # node id -> name, from the last snapshot
        self._recorded: dict[str, set[tuple[str, str]]] = {}  # sid -> {(name, role)}
        self._drivers: dict[str, tuple[ActiveRow, str]] = {}  # sid -> (row, node id)

    def _name(self, node_id: str) -> str:
        return self._names.get(node_id) or node_id[:12]

    def driver(self, row: ActiveRow, node_id: str, now: float, *, ending: bool = False
               ) -> None:
        """Ray says the attempt's driver runs (or ran: ``ending``) on ``node_id``: kept
        for the tick's write, or written now when the attempt ends."""
        if ending:
            self._drivers.pop(row.ray_submission_id, None)
            self._write([(row, [(self._name(node_id), DRIVER, 0.0)])], now)
        elif (self._names.get(node_id), DRIVER) not in self._recorded.get(
                row.ray_submission_id, ()):
            self._drivers[row.ray_submission_id] = (row, node_id)

    def seen(self, now: float, snapshot: ClusterSnapshot, rows: Iterable[ActiveRow]) -> None:
        """The tick's snapshot: name the nodes, then write the drivers kept and the nodes
        each attempt's placement groups hold GPUs on, in one transaction; forget attempts
        no longer on the cluster."""
        self._names = {n.node_id: n.display_name for n in snapshot.nodes}
        by_sid = {row.ray_submission_id: row for row in rows}
        seen: dict[str, list[Sighting]] = {}
        for sid, (_, node_id) in self._drivers.items():
            if sid in by_sid:
                seen.setdefault(sid, []).append((self._name(node_id), DRIVER, 0.0))
        self._drivers = {}
        for sid, held in snapshot.held_on.items():
            if sid in by_sid:
                seen.setdefault(sid, []).extend(
                    (self._name(node_id), GANG, float(gpus))
                    for node_id, gpus in held.items() if gpus > 0)
        self._write([(by_sid[sid], nodes) for sid, nodes in seen.items()], now)
        for sid in [sid for sid in self._recorded if sid not in by_sid]:
            del self._recorded[sid]

    def _write(self, seen: list[tuple[ActiveRow, list[Sighting]]], now: float) -> None:
        """The sightings not recorded yet, in one transaction (none: no write)."""
        new = []
        for row, nodes in seen:
            done = self._recorded.get(row.ray_submission_id, set())
            fresh = [n for n in nodes if (n[0], n[1]) not in done]
            if fresh:
                new.append((row, fresh))
        if not new:
            return
        self.store.placement.record_many(
            [(row.task_id, row.attempt_no, nodes) for row, nodes in new], now)
        for row, nodes in new:
            self._recorded.setdefault(row.ray_submission_id, set()).update(
                (name, role) for name, role, _ in nodes)
