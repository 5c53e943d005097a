"""Where each attempt runs (issue 55): the nodes of its driver and its gang, by name,
recorded the first time the scheduler sees them (``Store.placement``).

The reconcile tells the driver's node (Ray's job info, every tick) and the tick's
snapshot the nodes each attempt's placement groups hold GPUs on (``held_on``). What was
recorded is remembered per submission id, so a tick writes only what is new: an attempt
costs a write when its driver is first seen and one when its gang is (or grows to a new
node), not one a tick. A node id is named from the last snapshot's nodes
(``NodeResources.display_name``); a driver seen before any snapshot named its node waits
for the tick's snapshot, unless its attempt ends first (then its id's prefix is its
name, as the console shows a node without one).
"""

from __future__ import annotations

from collections.abc import Iterable

from service.cluster.boundary import ClusterSnapshot
from service.engine.ports import SchedulerStore
from service.store.placement import DRIVER, GANG
from service.store.writer import ActiveRow


class PlacementRecorder:
    """Records the attempts' nodes, once each (see the module docstring)."""

    def __init__(self, store: SchedulerStore) -> None:
        self.store = store
        self._names: dict[str, str] = {}  # node id -> name, from the last snapshot
        self._recorded: dict[str, set[tuple[str, str]]] = {}  # sid -> {(name, role)}
        self._drivers: dict[str, tuple[ActiveRow, str]] = {}  # sid -> (row, node id) unnamed

    def driver(self, row: ActiveRow, node_id: str, now: float, *, ending: bool = False
               ) -> None:
        """Ray says the attempt's driver runs (or ran: ``ending``) on ``node_id``."""
        name = self._names.get(node_id)
        if name is None and not ending:
            self._drivers[row.ray_submission_id] = (row, node_id)
            return
        self._record(row, [(name or node_id[:12], DRIVER, 0.0)], now)

    def seen(self, now: float, snapshot: ClusterSnapshot, rows: Iterable[ActiveRow]) -> None:
        """The tick's snapshot: name the nodes, record the drivers that waited for a name
        and the nodes each attempt's placement groups hold GPUs on; forget attempts no
        longer on the cluster."""
        self._names = {n.node_id: n.display_name for n in snapshot.nodes}
        by_sid = {row.ray_submission_id: row for row in rows}
        drivers, self._drivers = self._drivers, {}
        for sid, (row, node_id) in drivers.items():
            if sid in by_sid:
                self.driver(row, node_id, now, ending=True)
        for sid, held in snapshot.held_on.items():
            row = by_sid.get(sid)
            if row is None or row.attempt_no < 1:
                continue
            gang = [(self._names.get(node_id, node_id[:12]), GANG, float(gpus))
                    for node_id, gpus in held.items() if gpus > 0]
            self._record(row, gang, now)
        for sid in [sid for sid in self._recorded if sid not in by_sid]:
            del self._recorded[sid]

    def _record(self, row: ActiveRow, nodes: list[tuple[str, str, float]], now: float
                ) -> None:
        done = self._recorded.setdefault(row.ray_submission_id, set())
        new = [n for n in nodes if (n[0], n[1]) not in done]
        if not new:
            return
        self.store.placement.record(row.task_id, row.attempt_no, new, now)
        done.update((name, role) for name, role, _ in new)
