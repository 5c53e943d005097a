"""One coroutine per task route: validate the request, await the use case, shape the
answer. What a handler reads is a use case's too (``service.usecases.reads``,
``service.usecases.queue``): no handler reaches the store itself.

Submit, cancel and a priority change are the use cases' (``service.usecases.tasks``:
defaults, allowances, ownership, quotas, the write, the stop on Ray, the wake); a handler
parses the request and maps the outcome, or the refusal (``api.outcomes``), to JSON.

Nothing here blocks the event loop. The use cases' store calls are awaited on the store's
own threads (``service.store.aio.AsyncStore``'s lanes); JobSpec parsing runs on a small
work pool; anything that talks to Ray runs on the cluster pool under the configured
timeout, so a hung Ray call can neither block the loop nor starve other requests.
Everyone sees every task and the queue; a task's owner or an admin reads its metrics (403
for anyone else) and what its job wrote: the summary's quoted line, the attempts'
messages, the events' quoting fields (anyone else sees Argus's words: ``views``'
``job_output``, decided here by ``Principal.may_act_on``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web

from service.domain.rows import TaskRow
from service.domain.states import TaskState
from service.domain.users import ALL, ME, Principal, name_problem
from service.jobspec.model import JobSpecError
from service.policy.curves import default_keys, join
from service.usecases import queue as queue_reads
from service.usecases import reads, tasks
from service.usecases.ports import UseCaseError
from service.web.api.body import JSON_CONTENT_TYPE, read_body, read_shape
from service.web.api.deps import AppDeps, deps_of, principal_of
from service.web.api.idempotency import replay_headers, request_key
from service.web.api.middlewares import ApiError
from service.web.api.outcomes import api_error
from service.web.api.params import parse_labels, parse_reason, parse_uint
from service.web.api.views import (
    InvalidCursor,
    attempt_json,
    curves_json,
    decode_cursor,
    encode_cursor,
    event_json,
    fair_share_json,
    task_dependencies_json,
    task_json,
    task_with_progress,
)
from service.web.shapes.tasks import PriorityChange

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

YAML_CONTENT_TYPES = frozenset({"application/yaml", "text/yaml", "application/x-yaml"})
UTF8_CHARSETS = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 500
QUEUE_LIMIT_DEFAULT, QUEUE_LIMIT_MAX = 500, 1000  # waiting tasks per /queue page
QUEUE_BLOCKED_SHOWN = 100  # tasks waiting on other tasks, on the first page


# -- helpers --------------------------------------------------------------------------


async def off_loop(deps: AppDeps, fn: Callable[..., T], *args: Any) -> T:
    """Run CPU-bound or file work of a request on the work threads."""
    return await deps.work.run(fn, *args)


async def _json_off_loop(deps: AppDeps, build: Callable[[], Any]) -> web.Response:
    """A large JSON answer (hundreds of tasks) shaped and encoded on the work threads:
    the event loop, which serves everyone, never spends tens of milliseconds on one."""
    text = await off_loop(deps, lambda: json.dumps(build()))
    return web.Response(text=text, content_type="application/json")


async def _task_or_404(deps: AppDeps, task_id: str) -> TaskRow:
    task = await reads.task(deps, task_id)
    if task is None:
        raise ApiError(404, f"task {task_id} not found")
    return task


async def own_task(request: web.Request, task_id: str, action: str) -> TaskRow:
    """The task, when the caller owns it or is an admin; 404 / 403 otherwise."""
    try:
        return await tasks.owned_task(deps_of(request), principal_of(request), task_id,
                                      action)
    except UseCaseError as exc:
        raise api_error(exc) from exc


async def user_filter(request: web.Request, errors: list[dict[str, Any]]) -> str | None:
    """The ``user`` query parameter: a user name, ``me`` (the caller) or ``all`` (the
    default: everyone). A malformed or unknown name is a 400."""
    raw = request.query.get("user")
    if raw is None or raw == "" or raw == ALL:
        return None
    who: Principal = principal_of(request)
    if raw == ME:
        return who.name
    problem = name_problem(raw)
    if problem is None and raw != who.name and not await reads.user_exists(
            deps_of(request), raw):
        problem = f"no user {raw!r}"
    if problem:
        errors.append({"field": "user", "message": f"{problem} (or: me, all)"})
        return None
    return raw


def int_param(
    request: web.Request, name: str, default: int, lo: int, hi: int,
    errors: list[dict[str, Any]],
) -> int:
    """Query integer ``name`` (ASCII digits, ``lo..hi``: ``params.parse_uint``)."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    value = parse_uint(raw, lo, hi)
    if value is None:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        errors.append({"field": name,
                       "message": f"must be an integer between {lo} and {hi}, got {shown!r}"})
        return default
    return value


# -- tasks ----------------------------------------------------------------------------


async def submit_task(request: web.Request) -> web.Response:
    deps = deps_of(request)
    as_json = request.content_type == JSON_CONTENT_TYPE
    if not as_json and request.content_type not in YAML_CONTENT_TYPES:
        raise ApiError(
            415,
            f"content type {request.content_type!r} is not accepted; send the JobSpec as "
            + " or ".join(sorted({*YAML_CONTENT_TYPES, JSON_CONTENT_TYPE})),
        )
    charset = request.charset
    if charset is not None and charset.lower() not in UTF8_CHARSETS:
        raise ApiError(415, f"charset {charset!r} is not accepted; send UTF-8")
    key = request_key(request)
    raw = await read_body(request, deps.settings.max_body_bytes,
                          deps.settings.api_body_timeout_s)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(
            400, "request body is not valid UTF-8",
            details=[{"field": "body", "message": f"invalid byte at offset {exc.start}"}],
        ) from exc
    try:
        done = await tasks.submit(deps, principal_of(request), text, as_json=as_json,
                                  key=key)
    except JobSpecError as exc:
        status = exc.status if exc.status in (400, 413) else 400
        raise ApiError(
            status, "invalid JobSpec" if status == 400 else str(exc), details=exc.details
        ) from exc
    except UseCaseError as exc:
        raise api_error(exc) from exc
    return web.json_response({"task_id": done.task_id, "state": done.state.value},
                             status=201, headers=replay_headers(done.replayed))


async def list_tasks(request: web.Request) -> web.Response:
    deps = deps_of(request)
    errors: list[dict[str, Any]] = []
    state: TaskState | None = None
    raw_state = request.query.get("state")
    if raw_state is not None:  # given empty: no state, a 400 (leave it out for every state)
        try:
            state = TaskState(raw_state.upper())
        except ValueError:
            errors.append({"field": "state", "message": (
                f"unknown state {raw_state!r}; one of {', '.join(s.value for s in TaskState)}"
            )})
    limit = int_param(request, "limit", LIST_LIMIT_DEFAULT, 1, LIST_LIMIT_MAX, errors)
    user = await user_filter(request, errors)
    reason = parse_reason(request.query.get("reason"), errors)
    labels = parse_labels(request.query.getall("label", []), errors)
    before_seq: int | None = None
    cursor = request.query.get("cursor") or None
    if cursor is not None:
        try:
            before_seq = decode_cursor(cursor)
        except InvalidCursor as exc:
            errors.append({"field": "cursor", "message": str(exc)})
    if errors:
        raise ApiError(400, "invalid query parameters", details=errors)

    seen = deps.metrics.observed.last
    estimates = {} if seen is None else seen.estimates
    who = principal_of(request)

    def page(tasks: list[TaskRow], next_before: int | None, waits: dict[str, str]) -> str:
        # shaped and encoded in the read's own call on the read lane (queue.task_page);
        # waits: why each BLOCKED task waits
        return json.dumps({
            "tasks": [{**task_json(t, estimates.get(t.task_id),
                                   job_output=who.may_act_on(t.user)),
                       **({"pending_reason": waits[t.task_id]} if t.task_id in waits else {})}
                      for t in tasks],
            "next_cursor": None if next_before is None else encode_cursor(next_before),
        })

    text = await queue_reads.task_page(deps, page, state=state, limit=limit,
                                       before_seq=before_seq, user=user, reason=reason,
                                       labels=labels)
    return web.Response(text=text, content_type="application/json")


async def get_task(request: web.Request) -> web.Response:
    deps = deps_of(request)
    found = await reads.task_view(deps, request.match_info["task_id"])
    if found is None:
        raise ApiError(404, f"task {request.match_info['task_id']} not found")
    task, progress, dep = found.task, found.progress, found.dependencies
    planned = deps.metrics.observed.estimate(task.task_id)
    output = principal_of(request).may_act_on(task.user)
    body = task_with_progress(task, progress, deps.clock(), planned, job_output=output)
    return web.json_response({**body, **task_dependencies_json(
        dep.after, dep.on_unsatisfiable, dep.stage, task.state)})


MAX_CURVES = 16  # metrics one request may ask for
KEY_PARAM_MAX = 4096  # characters of ?keys=


async def task_metrics(request: web.Request) -> web.Response:
    """The training curves of a task: its metric names, and the points of ``?keys=``
    (comma-separated; default a loss and a reward) over all attempts on one step axis."""
    deps = deps_of(request)
    task_id = request.match_info["task_id"]
    raw = request.query.get("keys")
    wanted = None if raw is None else [k for k in raw[:KEY_PARAM_MAX + 1].split(",") if k]
    task = await own_task(request, task_id, "read the metrics of")
    keys = await reads.metric_keys(deps, task.task_id)
    errors: list[dict[str, Any]] = []
    if raw is not None and len(raw) > KEY_PARAM_MAX:
        errors.append({"field": "keys", "message": f"at most {KEY_PARAM_MAX} characters"})
    elif wanted is not None and len(wanted) > MAX_CURVES:
        errors.append({"field": "keys", "message": f"at most {MAX_CURVES} keys, got "
                                                    f"{len(wanted)}"})
    elif wanted is not None:
        unknown = [k for k in wanted if k not in set(keys)]
        if unknown:
            errors.append({"field": "keys", "message": "no such metric in this task: "
                                                        + ", ".join(k[:80] for k in unknown[:5])})
    if errors:
        raise ApiError(400, "invalid query parameters", details=errors)
    chosen = default_keys(keys) if wanted is None else list(dict.fromkeys(wanted))
    points = await reads.metric_points(deps, task.task_id, chosen)
    return web.json_response(curves_json(task.task_id, keys, chosen, join(points)))


async def _task_rows(request: web.Request, key: str,
                     fetch: Callable[[AppDeps, str], Awaitable[list[R]]],
                     shown: Callable[..., dict[str, Any]]) -> web.Response:
    """A task's rows of one kind (``key``), each as ``shown`` makes it: the job's own
    words only for its owner and admins."""
    deps = deps_of(request)
    task_id = request.match_info["task_id"]
    task = await _task_or_404(deps, task_id)
    output = principal_of(request).may_act_on(task.user)
    rows = await fetch(deps, task_id)
    return web.json_response({"task_id": task_id,
                              key: [shown(r, job_output=output) for r in rows]})


async def list_attempts(request: web.Request) -> web.Response:
    return await _task_rows(request, "attempts", reads.attempts, attempt_json)


async def list_events(request: web.Request) -> web.Response:
    return await _task_rows(request, "events", reads.events, event_json)


async def cancel_task(request: web.Request) -> web.Response:
    task_id = request.match_info["task_id"]
    try:
        done = await tasks.cancel(deps_of(request), principal_of(request), task_id)
    except UseCaseError as exc:
        raise api_error(exc) from exc
    if not done.stopping:
        return web.json_response({"task_id": task_id, "state": done.state.value})
    # the attempt is (or may be) on Ray: the scheduler finishes the task once it stopped
    return web.json_response(
        {"task_id": task_id, "state": done.state.value, "cancel_requested": True},
        status=202)


async def set_task_priority(request: web.Request) -> web.Response:
    """``PATCH /tasks/{id}`` with ``{"priority": N}``: a waiting task's new priority."""
    task_id = request.match_info["task_id"]
    priority = (await read_shape(request, PriorityChange, "priority request")).priority
    try:
        task = await tasks.set_priority(deps_of(request), principal_of(request), task_id,
                                        priority)
    except UseCaseError as exc:
        raise api_error(exc) from exc
    return web.json_response(task_json(
        task, deps_of(request).metrics.observed.estimate(task.task_id),
        job_output=principal_of(request).may_act_on(task.user)))


async def queue(request: web.Request) -> web.Response:
    """One page of the waiting tasks (``limit``, then ``next_cursor``) and every active
    one: a long queue is never read or sent whole."""
    errors: list[dict[str, Any]] = []
    user = await user_filter(request, errors)
    reason = parse_reason(request.query.get("reason"), errors)
    limit = int_param(request, "limit", QUEUE_LIMIT_DEFAULT, 1, QUEUE_LIMIT_MAX, errors)
    offset = 0
    cursor = request.query.get("cursor") or None
    if cursor is not None:
        try:
            offset = decode_cursor(cursor, kind="pos")
        except InvalidCursor as exc:
            errors.append({"field": "cursor", "message": str(exc)})
    if errors:
        raise ApiError(400, "invalid query parameters", details=errors)
    deps = deps_of(request)
    pending, running = await queue_reads.waiting_and_active(deps, user, limit=limit + 1,
                                                            offset=offset, reason=reason)
    blocked = [] if cursor is not None or reason is not None else await queue_reads.blocked(
        deps, QUEUE_BLOCKED_SHOWN, user)
    more = len(pending) > limit
    progress = await reads.active_progress(deps)
    seen = deps.metrics.observed.last
    now = deps.clock()
    may = principal_of(request).may_act_on
    return await _json_off_loop(deps, lambda: {
        "pending": [task_json(t, None if seen is None else seen.estimates.get(t.task_id),
                              job_output=may(t.user)) for t in pending[:limit]],
        "running": [task_with_progress(t, progress.get(t.task_id), now,
                                       job_output=may(t.user)) for t in running],
        "blocked": [{**task_json(t, job_output=may(t.user)), "pending_reason": why,
                     "waiting_on": why} for t, why in blocked],
        "fair_share": fair_share_json({} if seen is None else seen.shares),
        "next_cursor": encode_cursor(offset + limit, kind="pos") if more else None,
    })
