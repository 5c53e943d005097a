"""Quarantine on evidence, the engine's side (issue 55): an attempt that failed with a
hardware error is evidence against the nodes it ran on (``Store.placement``); once
``quarantine_tasks`` different tasks left such evidence on a node within
``quarantine_window_s``, the node is cordoned with source quarantine and the evidence in
its reason (``Store.nodes.quarantine``, event NODE_QUARANTINED). The evidence is kept in
the store as it comes (``Store.nodes.add_evidence``) and read back at the first failure
after a start, so neither a restart nor another instance taking the lead forgets it. What
is evidence and when it is enough is ``service.policy.quarantine``'s; what the failed
attempt's task does next is ``service.engine.attempt_end``'s, from the ``Verdict`` given
here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from service.config import SchedulerSettings
from service.domain.nodes import NodeSource
from service.domain.states import FailureKind
from service.engine.ports import SchedulerStore
from service.policy.quarantine import (
    Evidence,
    QuarantineMemory,
    blamed,
    decide,
    hardware_line,
    is_evidence,
)
from service.store.nodes import NodeStateConflict
from service.store.writer import ActiveRow

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A failed attempt's hardware evidence: the nodes blamed, those of them quarantined
    (now or before), the matching line, and whether it is its task's first evidence in
    the window."""

    nodes: tuple[str, ...]
    quarantined: tuple[str, ...]
    line: str
    first_of_task: bool


class Quarantine:
    """The evidence memory and the quarantine writes (see the module docstring)."""

    def __init__(self, store: SchedulerStore, sched: SchedulerSettings) -> None:
        self.store = store
        self.sched = sched
        self.memory = QuarantineMemory(sched.quarantine_window_s)
        self._recalled = False  # the window's evidence read back from the store yet

    def _recall(self, now: float) -> None:
        """The evidence of the window as the store kept it: what this instance's earlier
        start, or the leader before it, saw (the memory was lost with its process)."""
        if self._recalled:
            return
        for node, evidence in self.store.nodes.evidence_since(now - self.memory.window_s):
            self.memory.add((node,), evidence)
        self._recalled = True

    def judge(self, row: ActiveRow, kind: FailureKind, message: str | None,
              log_text: str | None, now: float) -> Verdict | None:
        """Note a failed attempt's evidence and quarantine the nodes it completes; None
        when the failure is no evidence (or the quarantine is off)."""
        if not self.sched.quarantine or not is_evidence(kind):
            return None
        line = hardware_line((message, log_text))
        if line is None:
            return None
        names = blamed(self.store.placement.of_attempt(row.task_id, row.attempt_no))
        if not names:
            log.info("%s failed with a hardware error (%s), on no node seen", row.task_id, line)
            return None
        self._recall(now)
        self.memory.prune(now)
        first = not self.memory.seen_task(row.task_id)
        evidence = Evidence(row.task_id, row.attempt_no, now, line)
        self.store.nodes.add_evidence(names, evidence, now - self.memory.window_s)
        self.memory.add(names, evidence)
        states = {s.name: s for s in self.store.nodes.states()}
        out = {n for n in names
               if n in states and states[n].source is NodeSource.QUARANTINE}
        for node, reason in decide(self.memory, names, self.sched.quarantine_tasks, now):
            if node in out:
                continue  # quarantined already: its reason stays the first evidence's
            out.add(node)  # an operator's cordon there stays; the failure is the node's
            try:
                self.store.nodes.quarantine(node, now, reason)
            except NodeStateConflict as exc:
                log.warning("node %s not quarantined: %s", node, exc)
                continue
            log.warning("node %s quarantined: %s", node, reason)
        return Verdict(names, tuple(n for n in names if n in out), line, first)
