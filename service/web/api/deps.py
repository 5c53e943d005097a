"""What the handlers are given: one ``AppDeps`` per application, under ``DEPS``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from service.cluster.boundary import Cluster
from service.config import Settings
from service.domain.users import Principal
from service.engine.artifacts import Artifacts
from service.policy.failure_guard import FailureGuard
from service.store.aio import AsyncStore
from service.store.offload import Offload
from service.usecases.idempotency import KeysInFlight
from service.web.api.auth import Access, Authenticator
from service.web.api.waker import Waker
from service.web.leadership import LeaseHolder
from service.web.metrics import ServiceMetrics


class SchedulerLoopView(Protocol):
    """What the API reads of the scheduler loop (``scheduler.SchedulerLoop``) and how it
    wakes it."""

    @property
    def alive(self) -> bool: ...

    @property
    def failed(self) -> bool: ...

    @property
    def ticks(self) -> int: ...

    @property
    def errors(self) -> int: ...

    @property
    def last_error(self) -> str | None: ...

    @property
    def last_tick_duration_s(self) -> float: ...

    @property
    def degraded(self) -> str | None: ...

    def wake(self) -> None: ...


@dataclass(frozen=True)
class AppDeps:
    settings: Settings
    store: AsyncStore
    cluster: Cluster
    artifacts: Artifacts
    auth: Authenticator
    access: Mapping[tuple[str, str], Access]  # (method, route template) -> who may call
    scheduler_loop: SchedulerLoopView | None
    clock: Callable[[], float]
    metrics: ServiceMetrics
    openapi_body: bytes
    waker: Waker
    cluster_pool: ThreadPoolExecutor  # blocking Ray calls, each bounded by ray_timeout_s
    work: Offload  # CPU or file work of a request: JobSpec parsing, logs, metrics
    auth_guard: FailureGuard  # failed bearer checks per address: backoff, then 429
    lease: LeaseHolder | None = None  # this instance's database lease (None: not held here)
    # the Idempotency-Keys of submits in progress (a second request meanwhile: 409)
    in_flight: KeysInFlight = field(default_factory=KeysInFlight)


DEPS = web.AppKey("argus_deps", AppDeps)
PRINCIPAL = web.RequestKey("argus_principal", Principal)


def deps_of(request: web.Request) -> AppDeps:
    return request.app[DEPS]


def principal_of(request: web.Request) -> Principal:
    """Who sent the request (set by the auth middleware on every non-public route)."""
    return request[PRINCIPAL]
