"""``/api/v2/pipelines``: create, list, read and cancel pipelines; and the dependency part
of a task's JSON (its ``after``, why it waits, the pipeline it belongs to).

A pipeline is its owner's: GET one and cancel are for the owner or an admin (403 else);
the list shows the caller's own (an admin: everyone's, or ``?user=``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.domain.ids import TaskIdExhausted
from service.domain.rows import TaskRow
from service.domain.states import TaskState
from service.domain.timefmt import iso
from service.domain.users import ALL, ME, name_problem
from service.policy.dependencies import Dep, OnUnsatisfiable, wait_reason
from service.policy.pipelines import PipelineError, PipelineState
from service.store.pipelines import PipelineRow, PipelineView
from service.store.writer import Store
from service.usecases.pipelines import cancel_pipeline as usecase_cancel
from service.usecases.pipelines import owned_pipeline, submit_pipeline
from service.usecases.ports import UseCaseError
from service.web.api.body import read_body
from service.web.api.deps import AppDeps, deps_of, principal_of
from service.web.api.middlewares import ApiError
from service.web.api.outcomes import api_error
from service.web.api.params import parse_uint

CONTENT_TYPES = frozenset({"application/yaml", "text/yaml", "application/x-yaml",
                           "application/json"})
BODY_FACTOR = 4  # a pipeline document: at most this many times a JobSpec body
LIST_MAX = 500


# -- a task's dependencies -----------------------------------------------------------------


def dependency_json(deps: list[Dep], on_unsatisfiable: str,
                    stage: tuple[str, str] | None, state: TaskState) -> dict[str, Any]:
    """The fields a task's JSON gains: ``after`` (each parent with its state now),
    ``on_unsatisfiable``, ``waiting_on`` (a BLOCKED task's reason; null otherwise) and
    ``pipeline`` (``{pipeline_id, stage}`` or null)."""
    policy = OnUnsatisfiable(on_unsatisfiable)
    return {
        "after": [{"task_id": d.parent_id, "condition": d.condition.value,
                   "state": d.parent_state.value} for d in deps],
        "on_unsatisfiable": policy.value,
        "waiting_on": wait_reason(deps, policy) if state is TaskState.BLOCKED else None,
        "pipeline": None if stage is None else {"pipeline_id": stage[0], "stage": stage[1]},
    }


def _dependency_facts(store: Store, task_id: str
                      ) -> tuple[list[Dep], str, tuple[str, str] | None]:
    return store.deps_of(task_id), store.on_unsatisfiable_of(task_id), store.stage_of(task_id)


DependencyFacts = tuple[list[Dep], str, tuple[str, str] | None]


def dependency_facts(store: Store, task_id: str) -> DependencyFacts:
    """What ``task_dependencies_json`` shows of a task; run on the store's read lane."""
    return _dependency_facts(store, task_id)


def task_dependencies_json(task: TaskRow, facts: DependencyFacts) -> dict[str, Any]:
    """``dependency_json`` of one task from its ``dependency_facts``."""
    found, policy, stage = facts
    out = dependency_json(found, policy, stage, task.state)
    if out["waiting_on"] is not None:
        out["pending_reason"] = out["waiting_on"]  # what the CLI and console print
    return out


async def task_dependencies(deps: AppDeps, task: TaskRow) -> dict[str, Any]:
    """``dependency_json`` of one task (one read on the store's read lane)."""
    facts = await deps.store.read(lambda s: _dependency_facts(s, task.task_id))
    return task_dependencies_json(task, facts)


def _reasons(store: Store, task_ids: list[str]) -> dict[str, str]:
    found = store.deps_of_tasks(task_ids)
    out = {}
    for task_id in task_ids:
        policy = OnUnsatisfiable(store.on_unsatisfiable_of(task_id))
        reason = wait_reason(found.get(task_id, []), policy)
        out[task_id] = reason or "dependencies met: queued on the next tick"
    return out


def blocked_reasons(store: Store, tasks: list[TaskRow]) -> dict[str, str]:
    """Why each BLOCKED task of a list page waits (nothing read without any); run on the
    store's read lane."""
    blocked = [t.task_id for t in tasks if t.state is TaskState.BLOCKED]
    return _reasons(store, blocked) if blocked else {}


def blocked_tasks(store: Store, limit: int, user: str | None = None
                  ) -> list[tuple[TaskRow, str]]:
    """The oldest BLOCKED tasks (``user``'s only when given) with why each waits (the
    console queue's "waiting on other tasks", the API queue's ``blocked``); run on the
    store's read lane."""
    tasks = store.blocked_page(limit, user)
    reasons = _reasons(store, [t.task_id for t in tasks])
    return [(t, reasons[t.task_id]) for t in tasks]


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
    raw = await read_body(request, deps.settings.max_body_bytes * BODY_FACTOR,
                          deps.settings.api_body_timeout_s)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, "request body is not valid UTF-8") from exc
    try:
        done = await submit_pipeline(deps, principal_of(request), text)
    except PipelineError as exc:
        raise ApiError(400, "invalid pipeline", details=exc.details) from exc
    except UseCaseError as exc:
        raise api_error(exc) from exc
    except TaskIdExhausted as exc:  # pragma: no cover - needs a broken random source
        raise ApiError(500, str(exc)) from exc
    # no stage has started yet: shown WAITING, as a read of it now says
    return web.json_response({"pipeline_id": done.pipeline_id,
                              "state": PipelineState.WAITING.value,
                              "stages": done.stages}, status=201)


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
    rows = await deps.store.read(lambda s: s.list_pipelines(user, limit))
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
