"""The cluster's nodes by name, and an admin's cordon, drain and resume (issue 55). The
rules once, for the API, the CLI and the console's buttons.

A node is known when Ray lists it (the scheduler's last snapshot, which the caller hands
in: no Ray call here) or it has a stored state. Reading is for any signed-in user; a
change is for admins (``Forbidden`` otherwise). A cordon or drain needs a reason (at most
``REASON_MAX`` printable characters; ``Rejected`` otherwise); cordoning a node that is out
of admission already, or resuming one that is not, is a ``Conflict`` naming who put it
there. A drain is a cordon whose attempts finish on their own; a drain with ``requeue``
(a boolean; only a drain has it) also has the scheduler stop its attempts and re-queue
them as preemptions (``service.engine.drain_requeue``). Draining a cordoned node, or one
drained without requeue with it, turns it into that drain; the same drain twice is a
``Conflict``. Resume lifts any cordon, the health check's and a quarantine's too (the
answer's state lifted says which).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from service.cluster.boundary import NodeResources
from service.cluster.sharedfs import SharedTree
from service.config import Settings
from service.domain.nodes import NodeEventRow, NodeSource, NodeStateRow, reason_problem
from service.domain.resources import GPU
from service.domain.users import Principal
from service.policy.nodehealth import HEALTH_MAX_BYTES, HealthReport, health_dir, parse_report
from service.store.nodes import NodeStateConflict
from service.store.offload import Offload
from service.usecases.ports import Conflict, Forbidden, NotFound, Rejected, ServiceDeps

log = logging.getLogger(__name__)


class NodeDeps(ServiceDeps, Protocol):
    """The parts of the service the node use cases touch."""

    @property
    def work(self) -> Offload: ...


@dataclass(frozen=True, slots=True)
class Health:
    state: str  # healthy | unhealthy | unknown
    detail: str
    checked_at: float | None = None


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    alive: bool  # Ray lists it alive (the scheduler's last snapshot)
    node_id: str | None
    node_ip: str | None
    gpus_total: float | None
    gpus_free: float | None
    state: NodeStateRow | None  # cordoned or drained; None: schedulable
    health: Health


def read_health(settings: Settings, names: Sequence[str], now: float) -> dict[str, Health]:
    """Each node's last health report, as the service judges it (blocking: file reads)."""
    where = health_dir(settings.head_json)
    if where is None:
        return {n: Health("unknown", "no ray.head_json: health files not read") for n in names}
    tree, out = SharedTree(settings.shared_root), {}
    for name in names:
        try:
            read = tree.read(f"{where}/{name}.health.json", HEALTH_MAX_BYTES)
        except FileNotFoundError:
            out[name] = Health("unknown", "no health file")
            continue
        except OSError as exc:
            out[name] = Health("unknown", f"health file unreadable: {exc.strerror or exc}")
            continue
        got = parse_report(read.data, name, now, truncated=read.truncated)
        if isinstance(got, HealthReport):
            out[name] = Health("healthy" if got.healthy else "unhealthy", got.reason,
                               got.checked_at)
        else:
            out[name] = Health("unknown", f"health file ignored: {got}")
    return out


async def list_nodes(deps: NodeDeps, ray_nodes: Sequence[NodeResources] | None
                     ) -> list[NodeView]:
    """Every known node by name: those Ray lists (``ray_nodes``: the scheduler's last
    snapshot, None when Ray did not answer) and those with a stored state."""
    states = {row.name: row for row in await deps.store.read(lambda s: s.nodes.states())}
    alive = {n.display_name: n for n in ray_nodes or ()}
    names = sorted(alive.keys() | states.keys())
    health = await deps.work.run(read_health, deps.settings, names, deps.clock())
    views = []
    for name in names:
        node = alive.get(name)
        total = None if node is None or node.total is None else float(node.total.get(GPU, 0))
        views.append(NodeView(
            name=name, alive=node is not None, node_id=node.node_id if node else None,
            node_ip=node.node_ip if node else None, gpus_total=total,
            gpus_free=node.get(GPU) if node else None, state=states.get(name),
            health=health[name]))
    return views


EVENTS_MAX = 1000  # a node's events one read returns at most


async def events_of(deps: NodeDeps, name: str, limit: int,
                    ray_nodes: Sequence[NodeResources] | None) -> list[NodeEventRow]:
    """Node ``name``'s newest ``limit`` events (1..``EVENTS_MAX``), newest first, for any
    signed-in user. ``NotFound`` for a node Ray does not list with no state and no
    events."""
    if not 1 <= limit <= EVENTS_MAX:
        raise Rejected("invalid node events request", [
            {"field": "limit", "message": f"must be 1..{EVENTS_MAX}, got {limit}"}])
    rows = await deps.store.read(lambda s: s.nodes.latest_events(name, limit))
    if not rows:
        await _known(deps, name, ray_nodes)
    return rows


def _check(who: Principal, doc: Mapping[str, Any], action: str) -> tuple[str, bool]:
    """The request's reason and requeue, or ``Forbidden`` / ``Rejected`` (every problem)."""
    if not who.is_admin:
        raise Forbidden("only an admin may cordon, drain or resume a node")
    fields = {"reason", "requeue"} if action == "drain" else {"reason"}
    unknown = sorted(set(doc) - fields)
    problems = [{"field": k, "message": "unknown field" if k != "requeue" else
                 "only a drain re-queues its attempts"} for k in unknown]
    problem = reason_problem(doc.get("reason"), required=action != "resume")
    if problem:
        problems.append({"field": "reason", "message": problem})
    requeue = doc.get("requeue", False)
    if "requeue" in fields and not isinstance(requeue, bool):
        problems.append({"field": "requeue", "message": "requeue must be true or false"})
    if problems:
        raise Rejected("invalid node request", problems)
    return str(doc.get("reason") or ""), requeue is True


async def _known(deps: NodeDeps, name: str, ray_nodes: Sequence[NodeResources] | None
                 ) -> None:
    if any(n.display_name == name for n in ray_nodes or ()):
        return
    if await deps.store.read(lambda s: s.nodes.state(name)) is None:
        raise NotFound("node", name, f"node {name} not found: Ray does not list it "
                       "(as of the scheduler's last tick) and it has no stored state or "
                       "events")


async def change(deps: NodeDeps, who: Principal, name: str, action: str,
                 doc: Mapping[str, Any], ray_nodes: Sequence[NodeResources] | None
                 ) -> NodeStateRow:
    """``action`` (cordon, drain, resume) on node ``name`` for ``who``; the state written
    (for a resume: the state lifted). Refuses with Forbidden, Rejected, NotFound,
    Conflict; a refusal writes nothing."""
    reason, requeue = _check(who, doc, action)
    await _known(deps, name, ray_nodes)
    now = deps.clock()
    try:
        if action == "cordon":
            row = await deps.store.write(lambda s: s.nodes.cordon(
                name, NodeSource.OPERATOR, who.name, now, reason))
        elif action == "drain":
            row = await deps.store.write(lambda s: s.nodes.drain(name, who.name, now, reason,
                                                                 requeue=requeue))
        else:
            row = await deps.store.write(lambda s: s.nodes.resume(
                name, None, who.name, now, reason))
    except NodeStateConflict as exc:
        raise Conflict(str(exc)) from exc
    log.warning("node %s: %s%s by %s (%s)", name, action, " with requeue" if requeue else "",
                who.name, reason or "no reason")
    return row


async def resume_note(deps: NodeDeps, name: str) -> str | None:
    """What a resume leaves wrong (None: nothing known): a node whose health check still
    fails is back in admission as asked, until the service's next health read cordons it
    again (the operator may resume a quarantined or unhealthy node; this says so)."""
    health = (await deps.work.run(read_health, deps.settings, [name], deps.clock()))[name]
    if health.state != "unhealthy":
        return None
    return (f"the node's health check still fails ({health.detail}): the service cordons "
            "it again at its next health read")
