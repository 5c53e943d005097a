"""Bearer auth, the JSON error shape, and request metrics: every request passes here.

Every error leaves as ``{"error": {"code", "message", "details"}}``; a 500 carries no
traceback (it is logged instead). A storage fault (disk full, read-only, locked:
``db.storage_fault``) is no bug of the service nor of the request: 503 with the reason
and ``Retry-After``, and no traceback.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from service.api.deps import deps_of
from service.db import storage_fault

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PUBLIC_PATHS = frozenset({"/healthz"})

ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    417: "expectation_failed",
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
        return error_response(exc.status, exc.message, code=exc.code, details=exc.details)
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


def presented_token(request: web.Request) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header as the bytes the client
    sent, or None (no header, or not that shape).

    aiohttp decodes header bytes as UTF-8 and keeps any byte that is not UTF-8 as a lone
    surrogate; encoding back the same way gives exactly the bytes on the wire, whatever
    they are, so a token with odd bytes (or in another script) compares as unequal, a
    401 like any wrong token, and never raises an encoding error.
    """
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token.encode("utf-8", "surrogateescape")


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if route_label(request) in PUBLIC_PATHS:
        return await handler(request)
    presented = presented_token(request)
    if presented is None:
        problem = "missing" if "Authorization" not in request.headers else "malformed"
        return error_response(
            401, f"{problem} Authorization header (expected: Bearer <token>)",
            headers=_UNAUTHORIZED_HEADERS,
        )
    if not hmac.compare_digest(presented, deps_of(request).token):
        return error_response(401, "invalid token", headers=_UNAUTHORIZED_HEADERS)
    return await handler(request)


MIDDLEWARES = (metrics_middleware, error_middleware, auth_middleware)
