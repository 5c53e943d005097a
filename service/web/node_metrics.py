"""The nodes' Prometheus families (issue 55), by node name, computed at scrape time from
one store read (``NodeStore.observed``: the stored states, and the node events written
since the last scrape counted by kind and source, in one snapshot; the first scrape
counts them all, later ones only the new rows by primary key) and the scheduler's last
tick (``observed.Observed``: the alive nodes and their GPUs, the health reports its last
health read used). A scrape costs no Ray call, no file read and no query per node, and
does not grow with the events' history. The event counter restarts with the process
from the database's whole count (Prometheus' ``increase()`` takes a restart as a reset
only when the count drops, and it never does: the rows stay).

- ``argus_node_state{node,state,source}``: per known node (alive in the last snapshot or
  with a stored state) one series per state: ``schedulable`` (alive, not cordoned or
  drained) and every ``NodeStateKind`` (``cordoned``, ``drained``), 1 for the one it is
  in, else 0 (a dead node with no stored state is in none). ``source`` is who put it
  there (``NodeSource``: operator, health, quarantine), ``""`` when it has no stored
  state. A dead node without a stored state is not known, so it has no series.
- ``argus_node_alive{node}``: 1 when Ray listed it at the last tick, 0 for a node known
  by its stored state only.
- ``argus_node_health{node}``: 1 healthy, 0 unhealthy, as the last health read judged the
  node's report; no series when there is no usable report (no file, an ignored one, the
  checks or their reading off): ``absent()`` finds those.
- ``argus_node_gpus{node,kind}``: ``total`` and ``free`` GPUs per alive node, as admission
  saw them.
- ``argus_node_events_total{kind,source}``: node events since the store began, every
  (``NodeEventKind``, ``NodeSource``) pair from 0 (quarantines are
  ``kind="NODE_QUARANTINED"``, or any kind with ``source="quarantine"``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from service.domain.nodes import NodeEventKind, NodeSource, NodeStateKind, NodeStateRow
from service.domain.resources import GPU
from service.engine.observed import Observed, total_of

SCHEDULABLE = "schedulable"
STATES = (SCHEDULABLE, *(k.value for k in NodeStateKind))


class NodeStatsSource(Protocol):
    """What the node families read from the store (``store.nodes``)."""

    def observed(self, after: int = 0) -> tuple[
        Sequence[NodeStateRow], Mapping[tuple[str, str], int], int]: ...


class NodeCollector(Collector):
    """The node families (see the module docstring)."""

    def __init__(self, source: NodeStatsSource, observed: Observed) -> None:
        self._source = source
        self._observed = observed
        self._lock = threading.Lock()  # scrapes may overlap
        self._counts: dict[tuple[str, str], int] = {}  # node events by (kind, source)
        self._last_id = 0  # the last node event counted

    def _read(self) -> tuple[Sequence[NodeStateRow], dict[tuple[str, str], int]]:
        """The stored states, and the event counts brought up to date with the events
        written since the last scrape (the first scrape counts them all)."""
        with self._lock:
            rows, new, self._last_id = self._source.observed(self._last_id)
            for key, n in new.items():
                self._counts[key] = self._counts.get(key, 0) + n
            return rows, dict(self._counts)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        rows, counts = self._read()
        stored = {row.name: row for row in rows}
        seen = self._observed.last
        snapshot = None if seen is None else seen.snapshot
        alive = {n.display_name: n for n in (snapshot.nodes if snapshot else ())}
        names = sorted(alive.keys() | stored.keys())
        state = GaugeMetricFamily(
            "argus_node_state", "1 for the state each node is in (schedulable: alive and "
            "neither cordoned nor drained), 0 for the others; source: who put it there.",
            labels=["node", "state", "source"])
        up = GaugeMetricFamily("argus_node_alive", "1: Ray listed the node at the "
                               "scheduler's last tick; 0: known by its stored state only.",
                               labels=["node"])
        for name in names:
            row = stored.get(name)
            now_in = row.state.value if row else SCHEDULABLE if name in alive else None
            source = row.source.value if row else ""
            for kind in STATES:
                state.add_metric([name, kind, source], 1.0 if kind == now_in else 0.0)
            up.add_metric([name], 1.0 if name in alive else 0.0)
        yield state
        yield up
        yield self._health()
        gpus = GaugeMetricFamily(
            "argus_node_gpus", "GPUs per alive node (kind: total or free), as admission saw "
            "them at the scheduler's last tick.", labels=["node", "kind"])
        for name, node in sorted(alive.items()):
            gpus.add_metric([name, "total"], total_of(node, GPU))
            gpus.add_metric([name, "free"], node.get(GPU))
        yield gpus
        events = CounterMetricFamily(
            "argus_node_events", "Node events (cordoned, drained, resumed, quarantined) by "
            "kind and source, since the store began.", labels=["kind", "source"])
        for kind in NodeEventKind:
            for src in NodeSource:
                events.add_metric([kind.value, src.value],
                                  float(counts.get((kind.value, src.value), 0)))
        yield events

    def _health(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "argus_node_health", "1: the node's last health report is healthy, 0: "
            "unhealthy; no series: no usable report.", labels=["node"])
        for name, report in sorted(self._observed.health.items()):
            family.add_metric([name], 1.0 if report.healthy else 0.0)
        return family
