"""Quarantine on evidence (issue 55): a node where attempts of several different tasks
failed with a hardware error is taken out of admission (pure).

A failure is evidence against its nodes when its kind is RUNTIME_ERROR or UNKNOWN (never
USER_ERROR, nor the kinds Argus decides itself) and its message or log tail has a line
that names a hardware fault (``hardware_line``): a CUDA or NCCL error, an ECC error, an
Xid, "uncorrectable", a GPU fallen off the bus; a CUDA error a program causes itself (out
of memory, a device-side assert) is not. The nodes blamed are those its placement groups
held GPUs on (``gang``); only when none was seen, its driver's node (a verl driver uses
no GPU, and its node may host other tasks' gangs).

``QuarantineMemory`` keeps the evidence of the last ``window_s`` per node; ``decide``
names the nodes where ``tasks`` different tasks left evidence, with a reason that quotes
it (task ids, attempt numbers, the matching line) in at most ``REASON_MAX`` printable
characters. The memory is the scheduler's own: a restart forgets evidence that did not
quarantine a node yet (a node quarantined stays so: that is stored).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from service.domain.nodes import REASON_MAX
from service.domain.rows import AttemptNode
from service.domain.states import FailureKind
from service.domain.writes import RetryPlan

# What a failed attempt's text says when a GPU, its memory or its link is at fault.
HARDWARE_RE = re.compile(
    r"CUDA error|NCCL error|\bECC\b|ECC error|\bXid\b|uncorrectable|"
    r"GPU has fallen off the bus|fallen off the bus", re.IGNORECASE)
# CUDA errors a program causes itself: never evidence against a node.
SELF_MADE_RE = re.compile(r"out of memory|device-side assert", re.IGNORECASE)
EVIDENCE_KINDS = (FailureKind.RUNTIME_ERROR, FailureKind.UNKNOWN)
LINE_MAX = 160  # characters of the matching line kept
TAIL_CHARS = 64_000  # only the log's end is read (as failures.classify does)


def hardware_line(texts: Iterable[str | None]) -> str | None:
    """The last line of ``texts`` (Ray's message, the log tail) that names a hardware
    fault, stripped and cut to ``LINE_MAX`` printable characters; None when none does."""
    found = None
    for text in texts:
        for line in (text or "")[-TAIL_CHARS:].splitlines():
            if HARDWARE_RE.search(line) and not SELF_MADE_RE.search(line):
                found = line
    if found is None:
        return None
    shown = "".join(c if c.isprintable() else " " for c in found).strip()
    return shown if len(shown) <= LINE_MAX else shown[: LINE_MAX - 3] + "..."


def is_evidence(kind: FailureKind) -> bool:
    return kind in EVIDENCE_KINDS


def blamed(nodes: Sequence[AttemptNode]) -> tuple[str, ...]:
    """The nodes a hardware failure of an attempt that ran on ``nodes`` is held against."""
    gang = sorted({n.name for n in nodes if n.role == "gang"})
    if gang:
        return tuple(gang)
    return tuple(sorted({n.name for n in nodes if n.role == "driver"}))


@dataclass(frozen=True, slots=True)
class Evidence:
    task_id: str
    attempt_no: int
    at: float
    line: str


@dataclass
class QuarantineMemory:
    """Per node, the evidence of the window (oldest first)."""

    window_s: float
    by_node: dict[str, list[Evidence]] = field(default_factory=dict)

    def prune(self, now: float) -> None:
        since = now - self.window_s
        for node in list(self.by_node):
            kept = [e for e in self.by_node[node] if e.at >= since]
            if kept:
                self.by_node[node] = kept
            else:
                del self.by_node[node]

    def add(self, nodes: Iterable[str], evidence: Evidence) -> None:
        for node in nodes:
            self.by_node.setdefault(node, []).append(evidence)

    def seen_task(self, task_id: str) -> bool:
        """Whether the window holds evidence from ``task_id`` (on any node)."""
        return any(e.task_id == task_id for ev in self.by_node.values() for e in ev)


def _tasks(evidence: Sequence[Evidence]) -> list[Evidence]:
    """The evidence of each task, its latest attempt's, in the order first seen."""
    latest: dict[str, Evidence] = {}
    for e in evidence:
        latest[e.task_id] = e
    return list(latest.values())


def reason(evidence: Sequence[Evidence], window_s: float) -> str:
    """A quarantine's reason: which tasks' attempts failed there, and the last hardware
    line; at most ``REASON_MAX`` printable characters."""
    tasks = _tasks(evidence)
    who = ", ".join(f"{e.task_id}#{e.attempt_no}" for e in tasks)
    head = f"quarantine: {len(tasks)} tasks failed here within {window_s:g}s ({who}): "
    if len(head) > REASON_MAX - 20:  # many long ids: the count and the line still fit
        head = f"quarantine: {len(tasks)} tasks failed here within {window_s:g}s: "
    room = REASON_MAX - len(head)
    line = evidence[-1].line
    return head + (line if len(line) <= room else line[: room - 3] + "...")


def decide(memory: QuarantineMemory, nodes: Iterable[str], tasks: int, now: float
           ) -> list[tuple[str, str]]:
    """``(node, reason)`` for each of ``nodes`` where at least ``tasks`` different tasks
    left evidence within the window (the memory is pruned to it first)."""
    memory.prune(now)
    out = []
    for node in sorted(set(nodes)):
        evidence = memory.by_node.get(node, [])
        if len({e.task_id for e in evidence}) >= tasks:
            out.append((node, reason(evidence, memory.window_s)))
    return out


def requeue_plan(now: float, *, quarantined: bool, delay_s: float, preemptions: int,
                 waited_s: float) -> RetryPlan:
    """How a task whose attempt failed with a hardware error waits for its next one: at
    once and not counted against ``max_attempts`` (as a preemption is not) when the node
    is quarantined; else, the first time, out of the scan for ``delay_s`` (counted), so
    that other tasks try the node first. The wait it had before is kept (``retry.plan``)."""
    if waited_s < 0:
        raise ValueError(f"waited_s must be >= 0, got {waited_s}")
    if quarantined:
        return RetryPlan(next_run_at=now, runnable_since=now - waited_s,
                         preemptions=preemptions + 1)
    at = now + delay_s
    return RetryPlan(next_run_at=at, runnable_since=at - waited_s, preemptions=preemptions)
