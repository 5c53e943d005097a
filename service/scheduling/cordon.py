"""Cordoned nodes are out of admission (issue 55). Pure.

The one place where cordons enter admission: ``out_of_admission`` takes the tick's
snapshot and the stored node states and returns the snapshot without the cordoned (or
drained) nodes, and those nodes. The planner then sees them as absent: no new attempt is
planned there, no reservation or starvation guard counts on them, their capacity is not
the cluster's. ``explain`` adds to a gang's wait reason the cordoned nodes that could have
taken one node's share of it, with their reasons ("node-b is cordoned: bad ECC").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from service.cluster.boundary import ClusterSnapshot, NodeResources
from service.domain.nodes import NodeStateRow
from service.domain.reasons import Cordoned, Reason, WaitKind
from service.domain.resources import CPU, GPU
from service.scheduling.admission import Gang

# the waits a cordoned node may explain: the gang has no room, or could never fit
EXPLAINED = frozenset({WaitKind.RESOURCES, WaitKind.NEVER_FITS})


def out_of_admission(snapshot: ClusterSnapshot, states: Mapping[str, NodeStateRow]
                     ) -> tuple[ClusterSnapshot, tuple[NodeResources, ...]]:
    """``snapshot`` without the nodes ``states`` names (by node name), and those nodes."""
    if not states:
        return snapshot, ()
    kept = tuple(n for n in snapshot.nodes if n.display_name not in states)
    out = tuple(n for n in snapshot.nodes if n.display_name in states)
    if not out:
        return snapshot, ()
    return replace(snapshot, nodes=kept), out


def _could_take(node: NodeResources, gang: Gang) -> bool:
    room = node.total if node.total is not None else node.free
    return (float(room.get(GPU, 0.0)) >= gang.gpus_per_node
            and float(room.get(CPU, 0.0)) >= gang.cpus_per_node)


def explain(reason: Reason, gang: Gang, out: tuple[NodeResources, ...],
            states: Mapping[str, NodeStateRow]) -> Reason:
    """``reason`` naming the cordoned nodes that could take one node's share of ``gang``
    (unchanged when none could, or the wait is not for room)."""
    if reason.kind not in EXPLAINED or not out:
        return reason
    named = [states[n.display_name] for n in out if _could_take(n, gang)]
    if not named:
        return reason
    text = "; ".join(f"{s.name} is {s.state.value}: {s.reason}" for s in named)
    return Reason(reason.kind, Cordoned(reason.details, text), reason.ahead, reason.planned)
