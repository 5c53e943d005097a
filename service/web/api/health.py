"""The service's own routes: its OpenAPI document, Prometheus metrics, liveness
(``/healthz``) and readiness (``/readyz``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from aiohttp import web

from service.store.db import storage_fault
from service.usecases import reads
from service.web.api.deps import deps_of
from service.web.api.handlers import off_loop
from service.web.leadership import leadership, role_of
from service.web.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=deps_of(request).openapi_body, content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    deps = deps_of(request)
    body = await off_loop(deps, deps.metrics.render)  # counts tasks by state in the store
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def healthz(request: web.Request) -> web.Response:
    """Liveness and what is wrong: reads the loop's counters only, never the database."""
    deps = deps_of(request)
    loop = deps.scheduler_loop
    scheduler: dict[str, Any] | None = None
    failed = loop is not None and loop.failed
    degraded = None if loop is None else loop.degraded
    if loop is not None:
        scheduler = {
            "alive": loop.alive,
            "ticks": loop.ticks,
            "errors": loop.errors,
            "last_tick_duration_s": loop.last_tick_duration_s,
            "last_error": None if loop.last_error is None else str(loop.last_error),
            "role": role_of(deps.lease),
        }
    # A dead scheduler thread means accepted tasks will never run: fail the liveness
    # probe so the supervisor restarts the service (start-up reconciliation resumes).
    if failed:
        return web.json_response({"status": "scheduler stopped", "scheduler": scheduler},
                                 status=503)
    # Storage trouble (disk full...) is reported, not failed: a restart would not bring
    # the disk back, and the service resumes by itself once writes work again.
    if degraded is not None:
        return web.json_response({"status": "degraded", "reason": degraded,
                                  "scheduler": scheduler})
    return web.json_response({"status": "ok", "scheduler": scheduler})


READY_DEADLINE_S = 1.0  # a probe read or work call slower than this: not ready


async def _lane_latency(call: Awaitable[Any]) -> float | None:
    """Seconds ``call`` took, or None past ``READY_DEADLINE_S``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await asyncio.wait_for(call, READY_DEADLINE_S)
    except TimeoutError:
        return None
    return loop.time() - started


async def readyz(request: web.Request) -> web.Response:
    """Readiness: can this process answer requests in time now? A probe read through the
    store's read lane and a no-op through the work lane must come back within
    ``READY_DEADLINE_S`` (both queue behind what the requests in flight asked for), and
    the scheduler must be running with a writable database. 503 with the reasons
    otherwise: an orchestrator then stops sending traffic here (``/healthz`` tells it
    whether to restart the process)."""
    deps = deps_of(request)
    reasons: list[str] = []
    loop = deps.scheduler_loop
    if loop is not None and loop.failed:
        reasons.append("the scheduler thread stopped")
    if loop is not None and loop.degraded is not None:
        reasons.append(f"the database cannot be written: {loop.degraded}")
    try:
        read_s = await _lane_latency(reads.change_seq(deps))
    except Exception as exc:  # any failure of the read is a reason, not a 500
        read_s = None
        reasons.append(f"a database read failed: {storage_fault(exc) or type(exc).__name__}")
    else:
        if read_s is None:
            reasons.append(f"a database read took over {READY_DEADLINE_S} s")
    work_s = await _lane_latency(deps.work.run(int))
    if work_s is None:
        reasons.append(f"the work lane took over {READY_DEADLINE_S} s")
    if deps.lease is not None and deps.lease.lost is not None:
        reasons.append(deps.lease.lost)
    instance = None if deps.lease is None else leadership(deps.lease)
    body = {"status": "not ready" if reasons else "ready", "reasons": reasons,
            "read_s": read_s, "work_s": work_s, "instance": instance}
    return web.json_response(body, status=503 if reasons else 200)
