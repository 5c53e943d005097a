"""The HTTP API application: the route table and the factory that wires it.

The handlers, middlewares and JSON views live in ``service.api``; this module says which
handler answers which route (the one table the OpenAPI test compares with the document)
and builds an application around a ``Store``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from service.api import handlers as h
from service.api.body import expect_continue
from service.api.deps import DEPS, AppDeps, SchedulerLoopView
from service.api.middlewares import MIDDLEWARES, Handler
from service.api.waker import Waker
from service.artifacts import Artifacts
from service.cluster import Cluster
from service.config import Settings
from service.metrics import ServiceMetrics
from service.offload import Offload
from service.openapi import build_openapi
from service.store import Store
from service.store_async import AsyncStore

API = "/api/v2"
TASK_ID = "{task_id:[^/:]+}"
CLUSTER_THREADS = 4
WORK_THREADS = 2
WAKE_INTERVAL_S = 0.1

# (method, path, handler): the whole API, in one table (the OpenAPI test compares it).
ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("POST", f"{API}/tasks", h.submit_task),
    ("GET", f"{API}/tasks", h.list_tasks),
    ("GET", f"{API}/tasks/{TASK_ID}", h.get_task),
    ("GET", f"{API}/tasks/{TASK_ID}/attempts", h.list_attempts),
    ("GET", f"{API}/tasks/{TASK_ID}/events", h.list_events),
    ("POST", f"{API}/tasks/{TASK_ID}:cancel", h.cancel_task),
    ("GET", f"{API}/tasks/{TASK_ID}/logs", h.task_logs),
    ("GET", f"{API}/queue", h.queue),
    ("GET", f"{API}/openapi.json", h.openapi),
    ("GET", "/metrics", h.metrics),
    ("GET", "/healthz", h.healthz),
)


def create_app(
    settings: Settings,
    store: Store,
    cluster: Cluster,
    artifacts: Artifacts,
    *,
    token: str,
    scheduler_loop: SchedulerLoopView | None = None,
    clock: Callable[[], float] = time.time,
    metrics: ServiceMetrics | None = None,
    wake_interval_s: float = WAKE_INTERVAL_S,
) -> web.Application:
    """Build the API application. ``token`` must be non-empty (the service refuses to
    run open). ``metrics`` may be passed in so the process wiring can also feed it
    scheduler ticks; by default the app makes its own. ``wake_interval_s`` bounds how
    often requests wake the scheduler loop (see ``Waker``). The app's thread pools stop
    on cleanup; the ``store`` stays open (its owner closes it)."""
    if not token:
        raise ValueError("an API token is required")
    app = web.Application(middlewares=MIDDLEWARES, client_max_size=settings.max_body_bytes)
    deps = AppDeps(
        settings=settings, store=AsyncStore(store), cluster=cluster, artifacts=artifacts,
        token=token.encode(), scheduler_loop=scheduler_loop, clock=clock,
        metrics=metrics or ServiceMetrics(store.counts_by_state, scheduler_loop),
        openapi_body=json.dumps(build_openapi(settings)).encode(),
        waker=Waker(scheduler_loop, wake_interval_s),
        cluster_pool=ThreadPoolExecutor(CLUSTER_THREADS, "argus-cluster"),
        work=Offload("argus-api-work", WORK_THREADS),
    )
    app[DEPS] = deps
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler, expect_handler=expect_continue)
        if method == "GET":  # HEAD wherever GET is allowed: the same answer, no body
            app.router.add_route("HEAD", path, handler, expect_handler=expect_continue)

    async def _shutdown_pools(_: web.Application) -> None:
        deps.waker.close()
        deps.cluster_pool.shutdown(wait=False, cancel_futures=True)
        deps.work.close()
        deps.store.close()

    app.on_cleanup.append(_shutdown_pools)
    return app
