"""``drain --requeue`` (issue 55): which attempts a drained node's requeue stops. Pure.

A node drained with requeue keeps no attempt: every attempt on the cluster whose driver
or gang is there is stopped and re-queued as a preemption (it resumes from its
checkpoint elsewhere; never a failure, never charged to its retries). The scheduler asks
every tick, so a drain stored in the database goes on stopping whatever is found there
(an attempt whose driver Ray places there later, a restart of the service) until the
node is resumed; an attempt being stopped already (a cancel, a preemption, this) is not
asked twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from service.cluster.boundary import ClusterSnapshot
from service.domain.nodes import NodeStateKind, NodeStateRow
from service.domain.rows import ActiveRow


@dataclass(frozen=True, slots=True)
class Requeue:
    """An attempt to stop because node ``node`` (its drain: ``state``) holds part of it."""

    row: ActiveRow
    node: str
    state: NodeStateRow


def requeuing(states: Iterable[NodeStateRow]) -> dict[str, NodeStateRow]:
    """The nodes drained with requeue, by name."""
    return {s.name: s for s in states if s.state is NodeStateKind.DRAINED and s.requeue}


def to_requeue(active: Iterable[ActiveRow], snapshot: ClusterSnapshot,
               drains: Mapping[str, NodeStateRow],
               driver_nodes: Mapping[str, str]) -> list[Requeue]:
    """The attempts of ``active`` with their driver (``driver_nodes``: submission id ->
    node id, as Ray said) or a placement group (``snapshot.held_on``) on a node of
    ``drains`` (``requeuing``), each once, the driver's node first; those already being
    stopped are left out."""
    if not drains:
        return []
    names = {n.node_id: n.display_name for n in snapshot.nodes}
    out = []
    for row in active:
        if row.cancel_requested or row.preempted_for is not None:
            continue
        sid = row.ray_submission_id
        where = [driver_nodes[sid]] if sid in driver_nodes else []
        where += sorted(snapshot.held_on.get(sid, {}))
        hit = next((names[n] for n in where if names.get(n) in drains), None)
        if hit is not None:
            out.append(Requeue(row, hit, drains[hit]))
    return out
