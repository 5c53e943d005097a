"""Bearer auth, the JSON error shape, and request metrics: every request passes here.

Every error leaves as ``{"error": {"code", "message", "details"}}``; a 500 carries no
traceback (it is logged instead). A storage fault (disk full, read-only, locked:
``db.storage_fault``) is no bug of the service nor of the request: 503 with the reason
and ``Retry-After``, and no traceback. Auth: each route's ``Access`` (the route table)
says who may call it; a request without a valid token gets 401 with the reason, a valid
token without the right gets 403. Checks that depend on the thing asked for (a task's
owner, the user named in the path) are the handlers'.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from service.store.db import storage_fault
from service.store.offload import ADDRESS_PARTY, PARTY
from service.web.api.auth import Access, AuthFailure, bearer_token
from service.web.api.deps import PRINCIPAL, deps_of

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    417: "expectation_failed",
    422: "unprocessable_content",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}
STORAGE_RETRY_AFTER_S = 5


class ApiError(Exception):
    """An error answer: raised by handlers, rendered by the error middleware."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or ERROR_CODES.get(status, f"http_{status}")
        self.message = message
        self.details = details or []
        self.headers = headers


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


def route_label(request: web.Request) -> str:
    """The route template (``/api/v2/tasks/{task_id}``), never the raw path."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    deps_of(request).metrics.observe_request(request.method, route_label(request),
                                             response.status)
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.message, code=exc.code, details=exc.details,
                              headers=exc.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return error_response(exc.status, exc.reason, headers=headers)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        fault = storage_fault(exc)
        if fault is not None:  # the store logs when writes start and stop failing
            return error_response(
                503, f"the database is unavailable ({fault}); retry later",
                code="storage_unavailable",
                headers={"Retry-After": str(STORAGE_RETRY_AFTER_S)},
            )
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal server error")


_UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="argus"'}
AUTH_FAILURE_LOG_S = 60.0  # failed token checks are logged in aggregate, this often at most


def access_of(request: web.Request) -> Access:
    """The route's access; a path or method no route has needs a token (so unknown
    paths are no probe for anyone without one)."""
    access = deps_of(request).access
    route = route_label(request)
    found = access.get((request.method, route))
    if found is None and request.method == "HEAD":
        found = access.get(("GET", route))
    return Access.USER if found is None else found


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    # the store and work lanes share their threads between parties: the caller's address
    # until the token says which user it is
    PARTY.set(f"{ADDRESS_PARTY}{request.remote}")
    access = access_of(request)
    if access is Access.PUBLIC:
        return await handler(request)
    deps = deps_of(request)
    try:
        presented = bearer_token(request.headers.get("Authorization"))
    except AuthFailure as exc:  # no token to guess with: costs nothing, not counted
        return error_response(401, exc.message, headers=_UNAUTHORIZED_HEADERS)
    # a presented token that fails is a guess (or a stale one): each costs a token check,
    # so past a few from one address, only tokens known without the store are checked
    address = f"address:{request.remote}"
    wait = deps.auth_guard.wait_s(address)
    if wait > 0 and not deps.auth.known(presented):
        retry = max(1, math.ceil(wait))
        return error_response(
            429, f"too many failed token checks from this address; try again in {retry} s",
            code="auth_backoff", headers={"Retry-After": str(retry)})
    try:
        principal = await deps.auth.authenticate(presented)
    except AuthFailure as exc:
        deps.auth_guard.failed(address)
        if failures := deps.auth_guard.report(AUTH_FAILURE_LOG_S):
            log.warning("%d failed API token check(s) since the last report", failures)
        return error_response(401, exc.message, headers=_UNAUTHORIZED_HEADERS)
    if access is Access.ADMIN and not principal.is_admin:
        return error_response(
            403, f"{request.method} {route_label(request)} is for admins; "
                 f"user {principal.name} has the role {principal.role}")
    request[PRINCIPAL] = principal
    PARTY.set(principal.name)
    return await handler(request)


MIDDLEWARES = (metrics_middleware, error_middleware, auth_middleware)
