"""The HTTP API application: the route table and the factory that wires it.

The handlers, middlewares and JSON views live in ``service.web.api``; the route table
(which handler answers which route, and who may call it) in ``service.web.routes``; this
module builds an application around a ``Store`` from them.
"""

from __future__ import annotations

import json
import logging
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
from service.web.api.auth import Access, Authenticator
from service.web.api.body import expect_continue
from service.web.api.deps import DEPS, AppDeps, SchedulerLoopView
from service.web.api.middlewares import MIDDLEWARES
from service.web.api.waker import Waker
from service.web.leadership import LeaseHolder
from service.web.metrics import ServiceMetrics
from service.web.openapi import build_openapi
from service.web.routes import ROUTES, path_template

log = logging.getLogger(__name__)

__all__ = ["ROUTES", "create_app", "path_template"]  # the route table, re-exported

CLUSTER_THREADS = 4
WORK_THREADS = 3  # one party uses at most 2 (offload's fair share)
WAKE_INTERVAL_S = 0.1
# several instances on one PostgreSQL database: a token revoked through another instance
# is refused here within this (a token row read again per token every this long)
SHARED_AUTH_CACHE_TTL_S = 2.0


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
    lease: LeaseHolder | None = None,
) -> web.Application:
    """Build the API application. ``token`` (the bootstrap admin's) must be non-empty
    (the service refuses to run open). Before anything is served, the bootstrap admin
    and the default user exist and tasks created before users existed belong to the
    default user (``Store.users.ensure_users``). ``metrics`` may be passed in so the process
    wiring can also feed it scheduler ticks; by default the app makes its own.
    ``wake_interval_s`` bounds how often requests wake the scheduler loop (see
    ``Waker``); ``lease``: this instance's database lease, shown by ``/readyz``. The app's
    thread pools stop on cleanup; the ``store`` stays open (its owner closes it)."""
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
        auth=Authenticator(async_store, token, users.bootstrap_admin, clock=clock,
                           cache_ttl_s=None if store.engine_name == "sqlite" else
                           SHARED_AUTH_CACHE_TTL_S),
        access=access,
        scheduler_loop=scheduler_loop, clock=clock,
        metrics=metrics or ServiceMetrics(store.tasks.counts_by_state, scheduler_loop, users=store,
                                          queue=store.console, nodes=store.nodes,
                                          clock=clock),
        openapi_body=json.dumps(build_openapi()).encode(),
        waker=Waker(scheduler_loop, wake_interval_s),
        cluster_pool=ThreadPoolExecutor(CLUSTER_THREADS, "argus-cluster"),
        work=Offload("argus-api-work", WORK_THREADS, per_party=1, share=share),
        auth_guard=FailureGuard(clock, failure_guard.API),
        lease=lease,
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
