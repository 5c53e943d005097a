"""Nodes out of admission (issue 55): the stored state of a cordoned or drained node, and
the rules of an operator's reason. Pure.

A node is named as the node runtime names it (``docs/node-runtime.md``, "Node names"):
its Ray label ``argus.node``, else its ``NodeName``, else the first 12 hex digits of its
Ray node id.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

REASON_MAX = 200  # characters of an operator's reason


class NodeStateKind(StrEnum):
    CORDONED = "cordoned"  # no new attempt is placed there
    DRAINED = "drained"  # cordoned; its attempts finish there, or are re-queued (requeue)


class NodeSource(StrEnum):
    OPERATOR = "operator"
    HEALTH = "health"  # the service's health check: it resumes the node itself
    QUARANTINE = "quarantine"  # the service, on failed attempts' evidence; an operator resumes


class NodeEventKind(StrEnum):
    CORDONED = "NODE_CORDONED"
    DRAINED = "NODE_DRAINED"
    RESUMED = "NODE_RESUMED"
    QUARANTINED = "NODE_QUARANTINED"


@dataclass(frozen=True, slots=True)
class NodeStateRow:
    name: str
    state: NodeStateKind
    source: NodeSource
    by: str | None
    at: float
    reason: str
    # a drain whose attempts are stopped and re-queued (as a preemption) instead of
    # finishing there; only a drained node has it
    requeue: bool = False


@dataclass(frozen=True, slots=True)
class NodeEventRow:
    name: str
    ts: float
    kind: NodeEventKind
    source: NodeSource
    by: str | None
    reason: str


# ``attempts.preempted_for`` names what an attempt is stopped for: a task (a preemption
# makes room for it) or, with this mark before a node's name, a drained node whose attempts
# are re-queued. A task id never holds ':' before its first '-' (``service.domain.ids``).
DRAIN_MARK = "node:"


def drain_mark(name: str) -> str:
    """``preempted_for`` of an attempt stopped because node ``name`` is drained (requeue)."""
    return f"{DRAIN_MARK}{name}"


def drained_node(preempted_for: str | None) -> str | None:
    """The node whose drain stops the attempt (None: no drain stops it)."""
    if preempted_for is not None and preempted_for.startswith(DRAIN_MARK):
        return preempted_for[len(DRAIN_MARK):]
    return None


def preemptor_task(preempted_for: str | None) -> str | None:
    """The task the attempt is stopped to make room for (None: none, or a drain)."""
    return None if drained_node(preempted_for) is not None else preempted_for


def stopped_for(preempted_for: str) -> str:
    """What stops a preempted attempt, in words: "preempted for t-1", "node gpu-07 drained"."""
    node = drained_node(preempted_for)
    return f"preempted for {preempted_for}" if node is None else f"node {node} drained"


def reason_problem(reason: object, *, required: bool) -> str | None:
    """Why ``reason`` is not an acceptable reason (None: it is). At most ``REASON_MAX``
    printable characters; required for a cordon or a drain, optional for a resume."""
    if reason is None or reason == "":
        return "a reason is required" if required else None
    if not isinstance(reason, str):
        return "reason must be a string"
    if len(reason) > REASON_MAX:
        return f"reason is {len(reason)} characters; at most {REASON_MAX}"
    if not reason.isprintable():
        return "reason must be printable characters only (no newlines or control codes)"
    if required and not reason.strip():
        return "a reason is required"
    return None


def unique_names(nodes: list[tuple[str, dict[str, str] | None, str | None]]) -> list[str]:
    """``name_of`` each ``(node id, labels, NodeName)``, but a NodeName that several of
    ``nodes`` share (Ray started by hand names every node of a host by its IP) gives way to
    the id prefix: a cordon of one such node never takes the others. ``argus.node`` labels
    are kept as they are (one name per node is the runtime's rule)."""
    names = [name_of(labels, node_name, node_id) for node_id, labels, node_name in nodes]
    labelled = [bool((labels or {}).get("argus.node")) for _, labels, _ in nodes]
    shared = {n for n in names if names.count(n) > 1}
    return [node_id[:12] if name in shared and not lab else name
            for (node_id, _, _), name, lab in zip(nodes, names, labelled, strict=True)]


def name_of(labels: dict[str, str] | None, node_name: str | None, node_id: str) -> str:
    """A node's name: its ``argus.node`` label, else its Ray ``NodeName``, else the first
    12 hex digits of its id."""
    label = (labels or {}).get("argus.node")
    if label:
        return label
    if node_name:
        return node_name
    return node_id[:12]
