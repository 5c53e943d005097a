"""The console's node actions (issue 55): an admin cordons, drains or resumes a node from
the cluster page. Each action is a page of its own (the node's state, health and recent
events, a reason field; for a drain the "re-queue running attempts" box) whose form POSTs
with the console's origin and form-token checks, then goes through the same use case as
the API (``service.usecases.nodes.change``): a non-admin sees no form and is refused (403)
if they post one anyway, and a refusal writes nothing.

A page of its own rather than a form in the cluster page: that page's live part is
re-rendered whenever something changes, which would wipe a reason being typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from service.cluster.boundary import NodeResources
from service.domain.nodes import REASON_MAX
from service.usecases import nodes as node_cases
from service.usecases.ports import Conflict, Forbidden, NotFound, Rejected, UseCaseError
from service.web.api.deps import deps_of
from service.web.ui import pages

ACTIONS = ("cordon", "drain", "resume")
EVENTS_SHOWN = 10
ABOUT = {
    "cordon": "No new attempt is placed on it; what runs there goes on.",
    "drain": "Cordoned, and the attempts on it finish there; with re-queue they are stopped "
             "and resume elsewhere from their last checkpoint (a preemption, never a failure).",
    "resume": "Back into admission: lifts any cordon or drain (the health check's and a "
              "quarantine's too).",
}
STATUS: dict[type[UseCaseError], int] = {Rejected: 400, Forbidden: 403, NotFound: 404,
                                         Conflict: 409}


def ray_nodes(request: web.Request) -> Sequence[NodeResources] | None:
    """The alive nodes of the scheduler's last snapshot (None: none yet, or Ray did not
    answer): the console never calls Ray."""
    seen = deps_of(request).metrics.observed.last
    return None if seen is None or seen.snapshot is None else seen.snapshot.nodes


async def _page(request: web.Request, *, status: int = 200, error: str | None = None,
                form: dict[str, Any] | None = None) -> web.Response:
    deps = deps_of(request)
    name, action = request.match_info["node"], request.match_info["action"]
    alive = ray_nodes(request)
    try:
        events = await node_cases.events_of(deps, name, EVENTS_SHOWN, alive)
    except NotFound as exc:
        return pages.render(request, "error.html", status=404, title="Not found",
                            message=exc.message)
    views = await node_cases.list_nodes(deps, alive)
    node = next((v for v in views if v.name == name), None)
    return pages.render(
        request, "node_action.html", status=status, nav="cluster", node=node, node_name=name,
        action=action, about=ABOUT[action], events=events, error=error,
        may_act=request[pages.SIGNED].principal.is_admin, reason_max=REASON_MAX,
        form=form or {"reason": "", "requeue": False})


@pages.signed_in
async def action_form(request: web.Request) -> web.Response:
    return await _page(request)


@pages.signed_in
async def act(request: web.Request) -> web.StreamResponse:
    """The form's answer: the checks of the use case (an admin, a reason, a known node in
    the right state), then back to the cluster page."""
    refusal, form = await pages._checked_form(request)
    if refusal is not None:
        return refusal
    name, action = request.match_info["node"], request.match_info["action"]
    requeue = action == "drain" and form.get("requeue") == "on"
    doc: dict[str, Any] = {"reason": form.get("reason", "").strip()}
    if requeue:  # the drain's re-queue (the API's field); only when asked for
        doc["requeue"] = True
    deps = deps_of(request)
    try:
        await node_cases.change(deps, request[pages.SIGNED].principal, name, action, doc,
                                ray_nodes(request))
    except (Rejected, Forbidden, NotFound, Conflict) as exc:
        details = exc.details if isinstance(exc, Rejected | Conflict) else []
        error = "; ".join(f"{d['field']}: {d['message']}" for d in details) or exc.message
        return await _page(request, status=STATUS[type(exc)], error=error,
                           form={"reason": doc["reason"], "requeue": requeue})
    deps.waker.wake()  # admission sees the change at the next tick, now
    raise web.HTTPSeeOther(f"{pages.UI}/cluster", headers=pages.HEADERS)
