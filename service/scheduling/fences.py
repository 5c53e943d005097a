"""Which fences should exist (issue 55). Pure.

A node out of admission (cordoned or drained: ``service.scheduling.cordon``) that Ray lists
alive gets one fence (``service.cluster.fence``): a Ray job that holds the node's free
resources so that Ray places no new driver or placement group there. ``plan_fences`` takes
the stored node states, the alive nodes and the fences Ray runs, and says which to start
and which to stop:

* one fence per (node name, Ray node id) out of admission; a second one is stopped;
* a fence whose node was resumed, left the cluster or came back under a new Ray id (a
  restarted raylet) is stopped; the node under its new id gets a new one;
* a fence that ended on its own (stopped by hand, a head restart, a crash) is started
  again, but not sooner than ``retry_s`` after the last start for that node: a fence that
  cannot run (no ``python3`` on the head) must not flood Ray with jobs.

``settling`` names the nodes whose fence was just started and does not hold them yet:
admission waits for them (a few seconds), or Ray could still place a new gang there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from service.cluster.boundary import FenceJob, NodeResources

RETRY_S = 30.0  # at least this long between two starts of a fence for one node
# A fence just started takes a few seconds to hold its node (its driver starts on the
# head, then its actors on the node); admission submits nothing meanwhile, for at most
# this long. Below ``HELD_BELOW`` of a resource the node counts as held.
SETTLE_S = 60.0
HELD_BELOW = 0.01


@dataclass(frozen=True, slots=True)
class FencePlan:
    start: tuple[tuple[str, str], ...] = ()  # (node name, Ray node id)
    stop: tuple[str, ...] = ()  # submission ids
    keep: tuple[str, ...] = ()  # submission ids


def plan_fences(out: Collection[str], nodes: Iterable[NodeResources],
                running: Iterable[FenceJob], last_start: Mapping[tuple[str, str], float],
                now: float, retry_s: float = RETRY_S) -> FencePlan:
    """The fences to start and stop for the nodes named in ``out`` (out of admission), given
    the alive ``nodes`` and the fences not ended (``running``); ``last_start``: when a
    fence was last started for each (name, node id)."""
    wanted = sorted({(n.display_name, n.node_id) for n in nodes if n.display_name in out})
    keep: dict[tuple[str, str], str] = {}
    stop: list[str] = []
    for fence in sorted(running, key=lambda f: f.submission_id):
        key = (fence.node_name, fence.node_id)
        if key in wanted and key not in keep:
            keep[key] = fence.submission_id
        else:
            stop.append(fence.submission_id)
    start = tuple(key for key in wanted if key not in keep
                  and (key not in last_start or now - last_start[key] >= retry_s))
    return FencePlan(start=start, stop=tuple(stop), keep=tuple(sorted(keep.values())))


def settling(started: Mapping[tuple[str, str], float], nodes: Iterable[NodeResources],
             holds: Collection[str], now: float, settle_s: float = SETTLE_S) -> tuple[str, ...]:
    """The names of the nodes whose fence, started at ``started[(name, node id)]`` less
    than ``settle_s`` ago, does not hold them yet: the node still has some of ``holds``
    free. Ray could place a new driver or gang there until it does."""
    by_key = {(n.display_name, n.node_id): n for n in nodes}
    out = []
    for key, at in sorted(started.items()):
        node = by_key.get(key)
        if node is None or now - at >= settle_s:
            continue
        if any(node.get(kind) >= HELD_BELOW for kind in holds):
            out.append(key[0])
    return tuple(out)
