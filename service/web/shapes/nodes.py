"""The shapes of the cluster's nodes (issue 55): the list, and an admin's cordon, drain or
resume request."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field

from service.domain.nodes import REASON_MAX, NodeEventKind, NodeSource, NodeStateKind
from service.web.shapes.common import Answer, Request, Timestamp, at

NodeState = enum.StrEnum("NodeState", {k.name: k.value for k in NodeStateKind})
NodeStateSource = enum.StrEnum("NodeStateSource", {k.name: k.value for k in NodeSource})
NodeEventType = enum.StrEnum("NodeEventType", {k.name: k.value for k in NodeEventKind})
HealthState = enum.StrEnum("HealthState", {v.upper(): v for v in ("healthy", "unhealthy",
                                                                   "unknown")})


class NodeChange(Request):
    """Required for a cordon and a drain; optional for a resume."""

    reason: Annotated[str | None, Field(max_length=REASON_MAX, description=(
        f"why, at most {REASON_MAX} printable characters (no newline)"))] = None


class NodeDrain(NodeChange):
    """A drain: a reason, and whether its attempts are stopped and re-queued."""

    requeue: Annotated[bool, Field(description=(
        "stop the attempts on the node and re-queue them, as a preemption: they resume "
        "from their checkpoint elsewhere, not charged to their retries (false: they "
        "finish there). A drain without requeue may be drained again with it"))] = False


class NodeCordon(Answer):
    state: NodeState
    source: NodeStateSource
    by: Annotated[str | None, Field(description=(
        "the admin; null: the service (its health check, or a quarantine)"))]
    at: Timestamp
    reason: str
    requeue: Annotated[bool, Field(description=(
        "a drain whose attempts are stopped and re-queued (until the node is resumed)"))] = False


class NodeHealth(Answer):
    state: HealthState
    detail: Annotated[str, Field(description="the node's reason, or why nothing is known")]
    checked_at: at("when the node ran the checks (its clock)") = None


class Node(Answer):
    name: str
    state: Annotated[str, Field(description="alive: Ray lists it (as of the scheduler's "
                                            "last tick); dead: it has a stored state only")]
    schedulable: Annotated[bool, Field(description="alive and neither cordoned nor drained")]
    node_id: str | None = None
    node_ip: str | None = None
    gpus_total: float | None = None
    gpus_free: float | None = None
    cordon: NodeCordon | None = None
    health: NodeHealth


class NodeList(Answer):
    nodes: list[Node]
    observed_at: at("the scheduler's snapshot the alive nodes come from (null: none yet "
                    "or Ray unreachable)") = None


class NodeChanged(Answer):
    name: str
    action: Annotated[str, Field(description="cordon, drain or resume")]
    cordon: Annotated[NodeCordon, Field(description="the state written (resume: lifted)")]
    note: Annotated[str | None, Field(description=(
        "a resume of a node whose health check still fails: allowed, and said here (the "
        "service cordons it again at its next health read); null otherwise"))] = None


class NodeEvent(Answer):
    at: Timestamp
    kind: NodeEventType
    source: NodeStateSource
    by: Annotated[str | None, Field(description="the admin; null: the service (health "
                                                "check, quarantine)")]
    reason: str


class NodeEventList(Answer):
    name: str
    events: Annotated[list[NodeEvent], Field(description="newest first")]
