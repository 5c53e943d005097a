"""What the scheduler saw last, for readers that must not call Ray themselves.

The console's cluster page and ``/metrics`` show nodes and free resources as admission
sees them. They read the snapshot of the scheduler's last tick (``Observed``), never Ray:
a page view or a scrape costs no Ray call, and shows exactly what admission used.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from service.cluster.boundary import ClusterSnapshot, ClusterUnavailable, NodeResources
from service.domain.reasons import Planned
from service.domain.resources import CPU, GPU
from service.policy.nodehealth import HealthReport
from service.scheduling.fairshare import Share


@dataclass(frozen=True, slots=True)
class Seen:
    """One tick's view: the snapshot, or why Ray did not answer; and when."""

    at: float
    snapshot: ClusterSnapshot | None
    unreachable: str | None
    shares: Mapping[str | None, Share] = field(  # fair share per user
        default_factory=lambda: MappingProxyType({}))
    estimates: Mapping[str, Planned] = field(  # task id -> its start estimate
        default_factory=lambda: MappingProxyType({}))


class Observed:
    """The last ``Seen``, written by the scheduler thread, read by the API's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: Seen | None = None
        self._health: Mapping[str, HealthReport] = MappingProxyType({})

    def record_health(self, reports: Mapping[str, HealthReport]) -> None:
        """The health reports the scheduler's last health read used (node -> report; a
        node without a usable report is absent)."""
        frozen = MappingProxyType(dict(reports))
        with self._lock:
            self._health = frozen

    @property
    def health(self) -> Mapping[str, HealthReport]:
        with self._lock:
            return self._health

    def record(self, now: float, snapshot: ClusterSnapshot | ClusterUnavailable | None,
               shares: Mapping[str | None, Share] | None = None,
               estimates: Mapping[str, Planned] | None = None) -> None:
        if snapshot is None:
            return
        frozen = MappingProxyType(dict(shares or {}))
        planned = MappingProxyType(dict(estimates or {}))
        if isinstance(snapshot, ClusterUnavailable):
            seen = Seen(now, None, str(snapshot), frozen, planned)
        else:
            seen = Seen(now, snapshot, None, frozen, planned)
        with self._lock:
            self._seen = seen

    def adopt(self, seen: Seen, health: Mapping[str, HealthReport]) -> None:
        """Another instance's view as this one's (a standby's copy of the leader's:
        ``engine.shared_view``)."""
        frozen = MappingProxyType(dict(health))
        with self._lock:
            self._seen, self._health = seen, frozen

    @property
    def last(self) -> Seen | None:
        with self._lock:
            return self._seen

    def estimate(self, task_id: str) -> Planned | None:
        """When the last plan expects ``task_id`` to start (None: it planned none)."""
        seen = self.last
        return None if seen is None else seen.estimates.get(task_id)


def total_of(node: NodeResources, name: str) -> float:
    """A node's capacity of ``name`` (its free amount when the capacity is unknown)."""
    if node.total is not None and name in node.total:
        return float(node.total[name])
    return node.get(name)


def gpu_totals(snapshot: ClusterSnapshot) -> tuple[float, float]:
    """(GPUs in use, GPUs in all) over the snapshot's alive nodes."""
    total = sum(total_of(n, GPU) for n in snapshot.nodes)
    free = sum(n.get(GPU) for n in snapshot.nodes)
    return max(0.0, total - free), total


RESOURCES = (GPU, CPU)
