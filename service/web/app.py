"""The HTTP API application: the route table and the factory that wires it.

The handlers, middlewares and JSON views live in ``service.web.api``; this module says which
handler answers which route and who may call it (the one table the OpenAPI test compares
with the document) and builds an application around a ``Store``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from service.cluster.boundary import Cluster
from service.config import Settings
from service.engine.artifacts import Artifacts
from service.policy import failure_guard
from service.policy.failure_guard import FailureGuard
from service.store.aio import AsyncStore
from service.store.offload import Offload, TimeShare
from service.store.writer import Store
from service.web import ui
from service.web.api import accounts as a
from service.web.api import handlers as h
from service.web.api import health as hl
from service.web.api import logs as lg
from service.web.api import pipelines as pl
from service.web.api import webhooks as wh
from service.web.api.auth import Access, Authenticator
from service.web.api.body import expect_continue
from service.web.api.deps import DEPS, AppDeps, SchedulerLoopView
from service.web.api.middlewares import MIDDLEWARES, Handler
from service.web.api.waker import Waker
from service.web.metrics import ServiceMetrics
from service.web.openapi import build_openapi

log = logging.getLogger(__name__)

API = "/api/v2"
TASK_ID = "{task_id:[^/:]+}"
NAME = "{name:[^/:]+}"
TOKEN_ID = "{token_id:[^/:]+}"
HOOK_ID = "{hook_id:[^/:]+}"
PIPELINE_ID = "{pipeline_id:[^/:]+}"
CLUSTER_THREADS = 4
WORK_THREADS = 3  # one party uses at most 2 (offload's fair share)
WAKE_INTERVAL_S = 0.1

P, U, ADMIN = Access.PUBLIC, Access.USER, Access.ADMIN

# (method, path, handler, access): the whole API, in one table (the OpenAPI test compares
# it). Cancel, logs and a priority change (PATCH) are for the task's owner or an admin, a
# user's own records for that user or an admin, a webhook's deliveries and its deletion
# for its owner or an admin: their handlers check that on top of ``access``.
ROUTES: tuple[tuple[str, str, Handler, Access], ...] = (
    ("POST", f"{API}/tasks", h.submit_task, U),
    ("GET", f"{API}/tasks", h.list_tasks, U),
    ("GET", f"{API}/tasks/{TASK_ID}", h.get_task, U),
    ("PATCH", f"{API}/tasks/{TASK_ID}", h.set_task_priority, U),
    ("GET", f"{API}/tasks/{TASK_ID}/attempts", h.list_attempts, U),
    ("GET", f"{API}/tasks/{TASK_ID}/events", h.list_events, U),
    ("POST", f"{API}/tasks/{TASK_ID}:cancel", h.cancel_task, U),
    ("GET", f"{API}/tasks/{TASK_ID}/logs", lg.task_logs, U),
    ("GET", f"{API}/tasks/{TASK_ID}/metrics", h.task_metrics, U),
    ("GET", f"{API}/queue", h.queue, U),
    ("POST", f"{API}/pipelines", pl.create_pipeline, U),
    ("GET", f"{API}/pipelines", pl.list_pipelines, U),
    ("GET", f"{API}/pipelines/{PIPELINE_ID}", pl.get_pipeline, U),
    ("POST", f"{API}/pipelines/{PIPELINE_ID}/cancel", pl.cancel_pipeline, U),
    ("GET", f"{API}/me", a.me, U),
    ("GET", f"{API}/users", a.list_users, ADMIN),
    ("POST", f"{API}/users", a.create_user, ADMIN),
    ("GET", f"{API}/users/{NAME}", a.get_user, U),
    ("DELETE", f"{API}/users/{NAME}", a.delete_user, ADMIN),
    ("POST", f"{API}/users/{NAME}:disable", a.disable_user, ADMIN),
    ("POST", f"{API}/users/{NAME}:enable", a.enable_user, ADMIN),
    ("GET", f"{API}/users/{NAME}/tokens", a.list_tokens, U),
    ("POST", f"{API}/users/{NAME}/tokens", a.create_token, U),
    ("POST", f"{API}/users/{NAME}/tokens/{TOKEN_ID}:revoke", a.revoke_token, U),
    ("GET", f"{API}/usage", a.usage, U),
    ("POST", f"{API}/webhooks", wh.create_webhook, U),
    ("GET", f"{API}/webhooks", wh.list_webhooks, U),
    ("DELETE", f"{API}/webhooks/{HOOK_ID}", wh.delete_webhook, U),
    ("GET", f"{API}/webhooks/{HOOK_ID}/deliveries", wh.list_deliveries, U),
    ("GET", f"{API}/openapi.json", hl.openapi, P),
    ("GET", "/metrics", hl.metrics, U),
    ("GET", "/healthz", hl.healthz, P),
    ("GET", "/readyz", hl.readyz, P),
)


def path_template(path: str) -> str:
    """A route's path as aiohttp names its resource: ``{task_id:[^/:]+}`` -> ``{task_id}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


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
    """Build the API application. ``token`` (the bootstrap admin's) must be non-empty
    (the service refuses to run open). Before anything is served, the bootstrap admin
    and the default user exist and tasks created before users existed belong to the
    default user (``Store.users.ensure_users``). ``metrics`` may be passed in so the process
    wiring can also feed it scheduler ticks; by default the app makes its own.
    ``wake_interval_s`` bounds how often requests wake the scheduler loop (see
    ``Waker``). The app's thread pools stop on cleanup; the ``store`` stays open (its
    owner closes it)."""
    if not token:
        raise ValueError("an API token is required")
    users = settings.users
    adopted = store.users.ensure_users(bootstrap_admin=users.bootstrap_admin,
                                       default_user=users.default_user, now=clock())
    if adopted:
        log.info("%d task(s) created before users existed now belong to %s", adopted,
                 users.default_user)
    app = web.Application(middlewares=MIDDLEWARES, client_max_size=settings.max_body_bytes)
    share = TimeShare(settings.api_cpu_share_per_user)  # per party, over the lanes below
    async_store = AsyncStore(store, share=share)
    access = {(method, path_template(path)): who for method, path, _, who in ROUTES}
    deps = AppDeps(
        settings=settings, store=async_store, cluster=cluster, artifacts=artifacts,
        auth=Authenticator(async_store, token, users.bootstrap_admin, clock=clock),
        access=access,
        scheduler_loop=scheduler_loop, clock=clock,
        metrics=metrics or ServiceMetrics(store.tasks.counts_by_state, scheduler_loop, users=store,
                                          queue=store.console, clock=clock),
        openapi_body=json.dumps(build_openapi()).encode(),
        waker=Waker(scheduler_loop, wake_interval_s),
        cluster_pool=ThreadPoolExecutor(CLUSTER_THREADS, "argus-cluster"),
        work=Offload("argus-api-work", WORK_THREADS, per_party=1, share=share),
        auth_guard=FailureGuard(clock, failure_guard.API),
    )
    app[DEPS] = deps
    for method, path, handler, _ in ROUTES:
        app.router.add_route(method, path, handler, expect_handler=expect_continue)
        if method == "GET":  # HEAD wherever GET is allowed: the same answer, no body
            app.router.add_route("HEAD", path, handler, expect_handler=expect_continue)
    # the web console: public at the bearer layer, its pages check the session cookie
    access.update(dict.fromkeys(ui.setup(app, token), Access.PUBLIC))

    async def _shutdown_pools(_: web.Application) -> None:
        deps.waker.close()
        deps.cluster_pool.shutdown(wait=False, cancel_futures=True)
        deps.work.close()
        deps.store.close()

    app.on_cleanup.append(_shutdown_pools)
    return app
