"""The health-driven cordon (issue 55): the scheduler's tick reads the nodes' health files
and cordons a node reported unhealthy, before admission, so an unhealthy report is out of
admission in the tick that reads it.

Every ``node_health_every_s`` (``SchedulerSettings``; 0: off) and only with
``ray.head_json`` set, the step reads ``<head.json's dir>/nodes/<name>.health.json`` of
each node Ray lists, through ``SharedTree`` (never following a link; capped at
``HEALTH_MAX_BYTES``). A missing file means no report (a node without health checks); a
malformed, foreign or stale one is ignored with a log line (once per node and cause),
never a crash. ``service.policy.nodehealth.decide`` says what to do; each cordon or
resume is the store's guarded write with its node event (a race with an operator's write
is logged and left to the next read).
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from service.cluster.sharedfs import SharedTree
from service.config import Settings
from service.domain.nodes import NodeSource
from service.engine.ports import SchedulerStore
from service.policy.nodehealth import (
    HEALTH_MAX_BYTES,
    HealthMemory,
    HealthReport,
    decide,
    health_dir,
    parse_report,
)
from service.store.nodes import NodeStateConflict

log = logging.getLogger(__name__)


class NodeHealth:
    """Reads the health files and cordons or resumes nodes (see the module docstring)."""

    def __init__(self, store: SchedulerStore, settings: Settings) -> None:
        self.store = store
        self.every_s = settings.scheduler.node_health_every_s
        self.passes = settings.scheduler.node_health_passes
        self.dir = health_dir(settings.head_json)
        self.tree = SharedTree(settings.shared_root)
        self.memory = HealthMemory()
        self._last_run: float | None = None
        self._ignored: dict[str, str] = {}  # node -> why its file was last ignored
        # the usable reports of the last run by node (/metrics' argus_node_health)
        self.reports: Mapping[str, HealthReport] = MappingProxyType({})

    @property
    def enabled(self) -> bool:
        return self.dir is not None and self.every_s > 0

    def due(self, now: float) -> bool:
        return self.enabled and (self._last_run is None or now - self._last_run >= self.every_s)

    def run(self, now: float, names: Iterable[str]) -> tuple[int, int]:
        """Read the reports of ``names`` and act on them: (cordoned, resumed)."""
        self._last_run = now
        reports = {}
        for name in sorted(set(names)):
            report = self._read(name, now)
            if report is not None:
                reports[name] = report
        self.reports = MappingProxyType(reports)
        states = {row.name: row for row in self.store.nodes.states()}
        actions = decide(reports, states, self.memory, self.passes)
        cordoned = resumed = 0
        for name, reason in actions.cordon:
            try:
                self.store.nodes.cordon(name, NodeSource.HEALTH, None, now, reason)
            except NodeStateConflict as exc:
                log.info("health: not cordoning %s: %s", name, exc)
                continue
            log.warning("node %s cordoned by the health check: %s", name, reason)
            cordoned += 1
        for name in actions.resume:
            try:
                self.store.nodes.resume(name, NodeSource.HEALTH, None, now,
                                        f"health: {self.passes} healthy checks in a row")
            except NodeStateConflict as exc:
                log.info("health: not resuming %s: %s", name, exc)
                continue
            log.warning("node %s resumed: %d healthy checks in a row", name, self.passes)
            resumed += 1
        return cordoned, resumed

    def _read(self, name: str, now: float) -> HealthReport | None:
        assert self.dir is not None
        path = posixpath.join(self.dir, f"{name}.health.json")
        try:
            read = self.tree.read(path, HEALTH_MAX_BYTES)
        except FileNotFoundError:
            self._ignored.pop(name, None)
            return None
        except OSError as exc:
            return self._ignore(name, f"unreadable: {exc}")
        parsed = parse_report(read.data, name, now, truncated=read.truncated)
        if isinstance(parsed, str):
            return self._ignore(name, parsed)
        self._ignored.pop(name, None)
        return parsed

    def _ignore(self, name: str, why: str) -> None:
        cause = why.split(":", 1)[0]
        if self._ignored.get(name) != cause:
            log.warning("health file of node %s ignored: %s", name, why)
        self._ignored[name] = cause
        return None
