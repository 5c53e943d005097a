"""``/api/v2/nodes``: the cluster's nodes by name, and an admin's cordon, drain and resume
(issue 55). The rules are ``service.usecases.nodes``'; the alive nodes come from the
scheduler's last snapshot (``observed``), never from a Ray call of the request."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.domain.nodes import NodeEventRow, NodeStateRow
from service.domain.timefmt import iso
from service.usecases import nodes
from service.usecases.ports import UseCaseError
from service.web.api.body import read_json_object
from service.web.api.deps import AppDeps, deps_of, principal_of
from service.web.api.handlers import int_param
from service.web.api.middlewares import ApiError
from service.web.api.outcomes import api_error


def _ray_nodes(deps: AppDeps) -> tuple[Any, ...] | None:
    seen = deps.metrics.observed.last
    return None if seen is None or seen.snapshot is None else seen.snapshot.nodes


def cordon_json(row: NodeStateRow) -> dict[str, Any]:
    return {"state": row.state.value, "source": row.source.value, "by": row.by,
            "at": iso(row.at), "reason": row.reason, "requeue": row.requeue}


def node_json(view: nodes.NodeView) -> dict[str, Any]:
    return {
        "name": view.name, "state": "alive" if view.alive else "dead",
        "schedulable": view.alive and view.state is None,
        "node_id": view.node_id, "node_ip": view.node_ip,
        "gpus_total": view.gpus_total, "gpus_free": view.gpus_free,
        "cordon": None if view.state is None else cordon_json(view.state),
        "health": {"state": view.health.state, "detail": view.health.detail,
                   "checked_at": iso(view.health.checked_at)},
    }


async def list_nodes(request: web.Request) -> web.Response:
    deps = deps_of(request)
    seen = deps.metrics.observed.last
    views = await nodes.list_nodes(deps, _ray_nodes(deps))
    observed = None if seen is None or seen.snapshot is None else iso(seen.at)
    return web.json_response({"nodes": [node_json(v) for v in views],
                              "observed_at": observed})


def event_json(row: NodeEventRow) -> dict[str, Any]:
    return {"at": iso(row.ts), "kind": row.kind.value, "source": row.source.value,
            "by": row.by, "reason": row.reason}


async def node_events(request: web.Request) -> web.Response:
    deps = deps_of(request)
    name = request.match_info["node"]
    errors: list[dict[str, Any]] = []
    limit = int_param(request, "limit", 100, 1, nodes.EVENTS_MAX, errors)
    if errors:
        raise ApiError(400, "invalid query parameters", details=errors)
    try:
        rows = await nodes.events_of(deps, name, limit, _ray_nodes(deps))
    except UseCaseError as exc:
        raise api_error(exc) from exc
    return web.json_response({"name": name, "events": [event_json(r) for r in rows]})


async def _change(request: web.Request, action: str) -> web.Response:
    deps = deps_of(request)
    name = request.match_info["node"]
    doc = await read_json_object(request, required=False)
    try:
        row = await nodes.change(deps, principal_of(request), name, action, doc or {},
                                 _ray_nodes(deps))
    except UseCaseError as exc:
        raise api_error(exc) from exc
    deps.waker.wake()  # admission sees the change at the next tick, now
    note = await nodes.resume_note(deps, name) if action == "resume" else None
    return web.json_response({"name": name, "action": action, "cordon": cordon_json(row),
                              "note": note})


async def cordon_node(request: web.Request) -> web.Response:
    return await _change(request, "cordon")


async def drain_node(request: web.Request) -> web.Response:
    return await _change(request, "drain")


async def resume_node(request: web.Request) -> web.Response:
    return await _change(request, "resume")
