"""The HTTP API (SPEC A7): routes, bearer auth, JSON errors, request metrics.

Handlers are thin: they validate the request, call the Store (short SQLite calls, run on
the loop thread), and hand anything that talks to Ray to a small dedicated thread pool
under the configured timeout, so a hung Ray call can neither block the event loop nor
starve other requests. Ray being unreachable is never an API error: a cancel still
records the request (the scheduler finishes it) and logs fall back to the archive.

Every error leaves as ``{"error": {"code", "message", "details"}}``; a 500 carries no
traceback (it is logged instead).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from service.cluster import Cluster, ClusterError, ClusterUnavailable
from service.config import Settings
from service.ids import new_task_id
from service.jobspec import JobSpecError, parse_jobspec
from service.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from service.metrics import ServiceMetrics
from service.openapi import build_openapi
from service.states import RayStatus, TaskState
from service.store import InvalidCursor

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

API = "/api/v2"
YAML_CONTENT_TYPES = frozenset({"application/yaml", "text/yaml", "application/x-yaml"})
UTF8_CHARSETS = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})
PUBLIC_PATHS = frozenset({"/healthz"})
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 500
LOG_TAIL_DEFAULT, LOG_TAIL_MAX = 2000, 100_000
CLUSTER_THREADS = 4
WAKE_INTERVAL_S = 0.1

ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    500: "internal_error",
}


class ApiError(Exception):
    """An error answer: raised by handlers, rendered by the error middleware."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or ERROR_CODES.get(status, f"http_{status}")
        self.message = message
        self.details = details or []


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {
        "error": {
            "code": code or ERROR_CODES.get(status, f"http_{status}"),
            "message": message,
            "details": details or [],
        }
    }
    return web.json_response(body, status=status, headers=headers)


class Waker:
    """Wakes the scheduler loop, at most once per ``min_interval_s``.

    Waking on every request during a burst of submissions would make the loop tick back
    to back (each tick scans the queue), competing with the API for the GIL and the store
    lock. The first wake goes through at once; later ones inside the interval collapse
    into one wake at its end, so no request waits longer than the interval for a tick.
    """

    def __init__(self, target: Any | None, min_interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._target = target
        self._interval = min_interval_s
        self._clock = clock
        self._last = -math.inf
        self._deferred: asyncio.TimerHandle | None = None

    def wake(self) -> None:
        if self._target is None or self._deferred is not None:
            return
        wait = self._last + self._interval - self._clock()
        if wait <= 0:
            self._fire()
        else:
            self._deferred = asyncio.get_running_loop().call_later(wait, self._fire)

    def _fire(self) -> None:
        self._deferred = None
        self._last = self._clock()
        self._target.wake()

    def close(self) -> None:
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None


@dataclass
class _Deps:
    settings: Settings
    store: Any
    cluster: Cluster
    artifacts: Any
    token: bytes
    scheduler_loop: Any | None
    clock: Callable[[], float]
    metrics: ServiceMetrics
    openapi_body: bytes
    waker: Waker
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(CLUSTER_THREADS, "argus-cluster")
    )


DEPS = web.AppKey("argus_deps", _Deps)


# -- middlewares ----------------------------------------------------------------------


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def _metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    request.app[DEPS].metrics.observe_request(
        request.method, _route_label(request), response.status
    )
    return response


@web.middleware
async def _error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.message, code=exc.code, details=exc.details)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return error_response(exc.status, exc.reason, headers=headers)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal server error")


_UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="argus"'}


@web.middleware
async def _auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if _route_label(request) in PUBLIC_PATHS:
        return await handler(request)
    header = request.headers.get("Authorization")
    if header is None:
        return error_response(
            401, "missing Authorization header (expected: Bearer <token>)",
            headers=_UNAUTHORIZED_HEADERS,
        )
    scheme, _, presented = header.partition(" ")
    presented = presented.strip()
    if scheme.lower() != "bearer" or not presented:
        return error_response(
            401, "malformed Authorization header (expected: Bearer <token>)",
            headers=_UNAUTHORIZED_HEADERS,
        )
    if not hmac.compare_digest(presented.encode(), request.app[DEPS].token):
        return error_response(401, "invalid token", headers=_UNAUTHORIZED_HEADERS)
    return await handler(request)


# -- helpers --------------------------------------------------------------------------


def _deps(request: web.Request) -> _Deps:
    return request.app[DEPS]


async def _on_cluster(deps: _Deps, fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking cluster call in the cluster pool, bounded by the Ray timeout."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(deps.executor, fn, *args)
    try:
        return await asyncio.wait_for(future, timeout=deps.settings.ray_timeout_s)
    except TimeoutError as exc:
        raise ClusterUnavailable(
            f"no answer from Ray within {deps.settings.ray_timeout_s:g}s"
        ) from exc


def _wake(deps: _Deps) -> None:
    deps.waker.wake()


def _task_or_404(deps: _Deps, task_id: str) -> Any:
    task = deps.store.get_task(task_id)
    if task is None:
        raise ApiError(404, f"task {task_id} not found")
    return task


def _int_param(
    request: web.Request, name: str, default: int, lo: int, hi: int | None,
    errors: list[dict[str, Any]],
) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        errors.append({"field": name, "message": f"must be an integer {bound}, got {raw!r}"})
        return default
    return value


def _tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text`` (without splitting the whole text)."""
    end = len(text) - 1 if text.endswith("\n") else len(text)
    pos = end
    for _ in range(lines):
        pos = text.rfind("\n", 0, pos)
        if pos < 0:
            return text
    return text[pos + 1:]


async def _read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(413, f"request body is {request.content_length} bytes; limit {limit}")
    body = bytearray()
    while True:
        chunk = await request.content.read(limit + 1 - len(body))
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"request body exceeds the limit of {limit} bytes")


# -- handlers -------------------------------------------------------------------------


async def submit_task(request: web.Request) -> web.Response:
    deps = _deps(request)
    if request.content_type not in YAML_CONTENT_TYPES:
        raise ApiError(
            415,
            f"content type {request.content_type!r} is not accepted; send the JobSpec as "
            + " or ".join(sorted(YAML_CONTENT_TYPES)),
        )
    charset = request.charset
    if charset is not None and charset.lower() not in UTF8_CHARSETS:
        raise ApiError(415, f"charset {charset!r} is not accepted; send UTF-8")
    raw = await _read_body(request, deps.settings.max_body_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(
            400, "request body is not valid UTF-8",
            details=[{"field": "body", "message": f"invalid byte at offset {exc.start}"}],
        ) from exc
    try:
        spec = parse_jobspec(text, deps.settings)
    except JobSpecError as exc:
        status = exc.status if exc.status in (400, 413) else 400
        raise ApiError(
            status, "invalid JobSpec" if status == 400 else str(exc), details=exc.details
        ) from exc
    now = deps.clock()
    task_id = new_task_id(deps.settings.task_id_prefix, spec.workload, now,
                          deps.store.task_exists)
    deps.store.create_task(
        task_id=task_id, workload=spec.workload, jobspec_yaml=text, spec=spec.to_dict(),
        nnodes=spec.nnodes, n_gpus_per_node=spec.n_gpus_per_node, user=None, now=now,
    )
    deps.metrics.submits.inc()
    _wake(deps)
    return web.json_response({"task_id": task_id, "state": TaskState.QUEUED.value}, status=201)


async def list_tasks(request: web.Request) -> web.Response:
    deps = _deps(request)
    errors: list[dict[str, Any]] = []
    state: TaskState | None = None
    raw_state = request.query.get("state")
    if raw_state:
        try:
            state = TaskState(raw_state.upper())
        except ValueError:
            errors.append({"field": "state", "message": (
                f"unknown state {raw_state!r}; one of {', '.join(s.value for s in TaskState)}"
            )})
    limit = _int_param(request, "limit", LIST_LIMIT_DEFAULT, 1, LIST_LIMIT_MAX, errors)
    cursor = request.query.get("cursor") or None
    if errors:
        raise ApiError(400, "invalid query parameters", details=errors)
    try:
        tasks, next_cursor = deps.store.list_tasks(state=state, limit=limit, cursor=cursor)
    except InvalidCursor as exc:
        raise ApiError(400, "invalid query parameters",
                       details=[{"field": "cursor", "message": str(exc)}]) from exc
    return web.json_response(
        {"tasks": [t.to_dict() for t in tasks], "next_cursor": next_cursor}
    )


async def get_task(request: web.Request) -> web.Response:
    deps = _deps(request)
    return web.json_response(_task_or_404(deps, request.match_info["task_id"]).to_dict())


def _task_items(request: web.Request, key: str,
                fetch: Callable[[Any, str], Iterable[Any]]) -> web.Response:
    """``{"task_id", key: [...]}`` for one existing task (404 otherwise)."""
    deps = _deps(request)
    task_id = request.match_info["task_id"]
    _task_or_404(deps, task_id)
    items = fetch(deps.store, task_id)
    return web.json_response({"task_id": task_id, key: [i.to_dict() for i in items]})


async def list_attempts(request: web.Request) -> web.Response:
    return _task_items(request, "attempts", lambda store, tid: store.list_attempts(tid))


async def list_events(request: web.Request) -> web.Response:
    return _task_items(request, "events", lambda store, tid: store.events(tid))


async def cancel_task(request: web.Request) -> web.Response:
    deps = _deps(request)
    task_id = request.match_info["task_id"]
    outcome = deps.store.cancel(task_id, deps.clock())
    if outcome.kind == "not_found":
        raise ApiError(404, f"task {task_id} not found")
    if outcome.kind == "terminal":
        raise ApiError(409, f"task {task_id} is already {outcome.task.state}; nothing to cancel",
                       details=[{"field": "state", "message": str(outcome.task.state)}])
    if outcome.kind == "canceled":
        return web.json_response({"task_id": task_id, "state": TaskState.CANCELED.value})
    # "stopping": the attempt is (or may be) on Ray. Ask Ray now, best effort; the
    # scheduler sees cancel_requested and finishes the task (and retries the stop).
    if outcome.ray_submission_id:
        try:
            await _on_cluster(deps, deps.cluster.stop, outcome.ray_submission_id)
        except ClusterError as exc:
            log.warning("stop %s: %s (the scheduler will retry)", outcome.ray_submission_id, exc)
    _wake(deps)
    return web.json_response(
        {"task_id": task_id, "state": str(outcome.task.state), "cancel_requested": True},
        status=202,
    )


async def task_logs(request: web.Request) -> web.Response:
    deps = _deps(request)
    task_id = request.match_info["task_id"]
    errors: list[dict[str, Any]] = []
    attempt_no: int | None = None
    if request.query.get("attempt", "latest") != "latest":
        attempt_no = _int_param(request, "attempt", 0, 1, None, errors)
        if errors:
            errors[0]["message"] = "must be 'latest' or an integer >= 1, got " + repr(
                request.query["attempt"])
    tail = _int_param(request, "tail", LOG_TAIL_DEFAULT, 1, LOG_TAIL_MAX, errors)
    if errors:
        raise ApiError(400, "invalid query parameters", details=errors)
    _task_or_404(deps, task_id)
    attempt = deps.store.get_attempt(task_id, attempt_no)
    if attempt is None:
        which = "no attempts yet" if attempt_no is None else f"no attempt {attempt_no}"
        raise ApiError(404, f"task {task_id} has {which}")
    text = await _attempt_log(deps, attempt)
    if text is None:
        raise ApiError(404, f"no logs for {attempt.ray_submission_id} (live or archived)")
    return web.Response(text=_tail(text, tail), content_type="text/plain", charset="utf-8")


async def _attempt_log(deps: _Deps, attempt: Any) -> str | None:
    """Live from Ray while the attempt runs; the archive once it ended (or Ray is gone)."""
    sid = attempt.ray_submission_id
    ended = attempt.ray_status is not None and RayStatus(attempt.ray_status).is_terminal()
    if ended:
        archived = deps.artifacts.read_log(sid)
        if archived is not None:
            return archived
    try:
        return await _on_cluster(deps, deps.cluster.logs, sid)
    except ClusterError as exc:
        log.info("live logs of %s unavailable: %s", sid, exc)
    return None if ended else deps.artifacts.read_log(sid)


async def queue(request: web.Request) -> web.Response:
    pending, running = _deps(request).store.queue()
    return web.json_response({
        "pending": [t.to_dict() for t in pending],
        "running": [t.to_dict() for t in running],
    })


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=_deps(request).openapi_body, content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    body = _deps(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def healthz(request: web.Request) -> web.Response:
    loop = _deps(request).scheduler_loop
    scheduler = None
    failed = loop is not None and loop.failed
    if loop is not None:
        scheduler = {
            "alive": loop.alive,
            "ticks": loop.ticks,
            "errors": loop.errors,
            "last_tick_duration_s": loop.last_tick_duration_s,
            "last_error": None if loop.last_error is None else str(loop.last_error),
        }
    # A dead scheduler thread means accepted tasks will never run: fail the liveness
    # probe so the supervisor restarts the service (start-up reconciliation resumes).
    if failed:
        return web.json_response({"status": "scheduler stopped", "scheduler": scheduler},
                                 status=503)
    return web.json_response({"status": "ok", "scheduler": scheduler})


TASK_ID = "{task_id:[^/:]+}"

# (method, path, handler): the whole API, in one table (the OpenAPI test compares it).
ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("POST", f"{API}/tasks", submit_task),
    ("GET", f"{API}/tasks", list_tasks),
    ("GET", f"{API}/tasks/{TASK_ID}", get_task),
    ("GET", f"{API}/tasks/{TASK_ID}/attempts", list_attempts),
    ("GET", f"{API}/tasks/{TASK_ID}/events", list_events),
    ("POST", f"{API}/tasks/{TASK_ID}:cancel", cancel_task),
    ("GET", f"{API}/tasks/{TASK_ID}/logs", task_logs),
    ("GET", f"{API}/queue", queue),
    ("GET", f"{API}/openapi.json", openapi),
    ("GET", "/metrics", metrics),
    ("GET", "/healthz", healthz),
)


def create_app(
    settings: Settings,
    store: Any,
    cluster: Cluster,
    artifacts: Any,
    *,
    token: str,
    scheduler_loop: Any | None = None,
    clock: Callable[[], float] = time.time,
    metrics: ServiceMetrics | None = None,
    wake_interval_s: float = WAKE_INTERVAL_S,
) -> web.Application:
    """Build the API application. ``token`` must be non-empty (the service refuses to
    run open). ``metrics`` may be passed in so the process wiring can also feed it
    scheduler ticks; by default the app makes its own. ``wake_interval_s`` bounds how
    often requests wake the scheduler loop (see ``Waker``)."""
    if not token:
        raise ValueError("an API token is required")
    app = web.Application(
        middlewares=[_metrics_middleware, _error_middleware, _auth_middleware],
        client_max_size=settings.max_body_bytes,
    )
    deps = _Deps(
        settings=settings, store=store, cluster=cluster, artifacts=artifacts,
        token=token.encode(), scheduler_loop=scheduler_loop, clock=clock,
        metrics=metrics or ServiceMetrics(store.counts_by_state, scheduler_loop),
        openapi_body=json.dumps(build_openapi()).encode(),
        waker=Waker(scheduler_loop, wake_interval_s),
    )
    app[DEPS] = deps
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)

    async def _shutdown_pool(_: web.Application) -> None:
        deps.waker.close()
        deps.executor.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(_shutdown_pool)
    return app
