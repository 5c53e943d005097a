"""``/api/v2/pipelines``: create, list, read and cancel pipelines.

A pipeline is its owner's: GET one and cancel are for the owner or an admin (403 else);
the list shows the caller's own (an admin: everyone's, or ``?user=``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.domain.ids import TaskIdExhausted
from service.domain.rows import PipelineRow
from service.domain.states import PipelineState
from service.domain.timefmt import iso
from service.domain.users import ALL, ME, name_problem
from service.policy.pipelines import PipelineError
from service.store.pipelines import PipelineView
from service.usecases.pipelines import cancel_pipeline as usecase_cancel
from service.usecases.pipelines import list_pipelines as usecase_list
from service.usecases.pipelines import owned_pipeline, submit_pipeline
from service.usecases.ports import UseCaseError
from service.web.api.body import read_body
from service.web.api.deps import deps_of, principal_of
from service.web.api.idempotency import replay_headers, request_key
from service.web.api.middlewares import ApiError
from service.web.api.outcomes import api_error
from service.web.api.params import parse_uint

CONTENT_TYPES = frozenset({"application/yaml", "text/yaml", "application/x-yaml",
                           "application/json"})
BODY_FACTOR = 4  # a pipeline document: at most this many times a JobSpec body
LIST_MAX = 500


# -- pipelines -----------------------------------------------------------------------------


def pipeline_json(row: PipelineRow) -> dict[str, Any]:
    return {"pipeline_id": row.pipeline_id, "name": row.name, "user": row.user,
            "state": row.state.value, "created_at": iso(row.created_at),
            "updated_at": iso(row.updated_at), "ended_at": iso(row.ended_at),
            "cancel_requested": row.cancel_requested_at is not None}


def pipeline_view_json(view: PipelineView) -> dict[str, Any]:
    return {**pipeline_json(view.pipeline),
            "stages": [{"stage": s.stage, "task_id": s.task_id, "state": s.state.value,
                        "skipped": s.skipped, "error_summary": s.error_summary,
                        "attempts": s.attempt_no} for s in view.stages],
            "edges": [{"from": e.parent, "to": e.child, "condition": e.condition.value}
                      for e in view.edges]}


async def _pipeline_of(request: web.Request, action: str) -> PipelineView:
    try:
        return await owned_pipeline(deps_of(request), principal_of(request),
                                    request.match_info["pipeline_id"], action)
    except UseCaseError as exc:
        raise api_error(exc) from exc


async def create_pipeline(request: web.Request) -> web.Response:
    deps = deps_of(request)
    if request.content_type not in CONTENT_TYPES:
        raise ApiError(415, f"content type {request.content_type!r} is not accepted; send "
                            "the pipeline as " + " or ".join(sorted(CONTENT_TYPES)))
    key = request_key(request)
    raw = await read_body(request, deps.settings.max_body_bytes * BODY_FACTOR,
                          deps.settings.api_body_timeout_s)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, "request body is not valid UTF-8") from exc
    try:
        done = await submit_pipeline(deps, principal_of(request), text,
                                     as_json=request.content_type == "application/json",
                                     key=key)
    except PipelineError as exc:
        raise ApiError(400, "invalid pipeline", details=exc.details) from exc
    except UseCaseError as exc:
        raise api_error(exc) from exc
    except TaskIdExhausted as exc:  # pragma: no cover - needs a broken random source
        raise ApiError(500, str(exc)) from exc
    # no stage has started yet: shown WAITING, as a read of it now says
    return web.json_response({"pipeline_id": done.pipeline_id,
                              "state": PipelineState.WAITING.value,
                              "stages": done.stages}, status=201,
                             headers=replay_headers(done.replayed))


async def list_pipelines(request: web.Request) -> web.Response:
    deps = deps_of(request)
    who = principal_of(request)
    raw_limit = request.query.get("limit", "50")
    limit = parse_uint(raw_limit, 1, LIST_MAX)
    if limit is None:
        raise ApiError(400, f"limit must be an integer from 1 to {LIST_MAX}",
                       details=[{"field": "limit", "message": raw_limit[:40]}])
    asked = request.query.get("user")
    if asked in (None, "", ME):
        user: str | None = who.name if asked == ME or not who.is_admin else None
    elif asked == ALL:
        user = None if who.is_admin else who.name
    else:
        problem = name_problem(asked)
        if problem:
            raise ApiError(400, "invalid query parameters", details=[
                {"field": "user", "message": f"{problem} (or: me, all)"}])
        if not who.may_act_on(asked):
            raise ApiError(403, f"only an admin may list {asked}'s pipelines")
        user = asked
    rows = await usecase_list(deps, user, limit)
    return web.json_response({"pipelines": [pipeline_json(r) for r in rows]})


async def get_pipeline(request: web.Request) -> web.Response:
    return web.json_response(pipeline_view_json(await _pipeline_of(request, "read")))


async def cancel_pipeline(request: web.Request) -> web.Response:
    """Cancel every stage that has not ended (``usecases.pipelines.cancel_pipeline``)."""
    try:
        done = await usecase_cancel(deps_of(request), principal_of(request),
                                    request.match_info["pipeline_id"])
    except UseCaseError as exc:
        raise api_error(exc) from exc
    return web.json_response({**pipeline_view_json(done.view), "canceled": done.canceled})
