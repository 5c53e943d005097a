"""A use case's refusal (``service.usecases.ports``) as the API's JSON error."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from service.policy.idempotency import HEADER, IN_USE_RETRY_S
from service.usecases.ports import (
    BadDependencies,
    Conflict,
    Forbidden,
    Invalid,
    KeyInUse,
    KeyReused,
    NotAllowed,
    NotFound,
    NotOwner,
    OverQuota,
    Rejected,
    UseCaseError,
    WrongState,
)
from service.web.api.middlewares import ApiError

T = TypeVar("T")


def api_error(exc: UseCaseError) -> ApiError:
    """The answer for ``exc``: 404, 403, 400, 409, 422 or 429 (with ``Retry-After``)."""
    match exc:
        case KeyReused():
            return ApiError(422, exc.message, code="idempotency_key_reused",
                            details=[{"field": HEADER, "message": exc.message}])
        case KeyInUse():
            return ApiError(409, exc.message, code="idempotency_key_in_use",
                            details=[{"field": HEADER, "message": exc.message}],
                            headers={"Retry-After": str(IN_USE_RETRY_S)})
        case NotFound():
            return ApiError(404, exc.message)
        case NotOwner() | Forbidden():
            return ApiError(403, exc.message)
        case Conflict():
            return ApiError(409, exc.message, details=exc.details or None)
        case Rejected():
            return ApiError(400, exc.message, details=exc.details or None)
        case NotAllowed():
            return ApiError(403, exc.message,
                            details=[{"field": exc.field, "message": exc.message}])
        case Invalid():
            return ApiError(400, f"invalid {exc.field} request",
                            details=[{"field": exc.field, "message": exc.message[:200]}])
        case WrongState():
            return ApiError(409, exc.message,
                            details=[{"field": "state", "message": str(exc.state)}])
        case BadDependencies():
            return ApiError(400, "invalid JobSpec",
                            details=[{"field": "after", "message": p} for p in exc.problems])
        case OverQuota():
            refusal = exc.refusal
            return ApiError(429, refusal.message, code="quota_exceeded",
                            details=[{"field": refusal.limit, "message": refusal.message}],
                            headers={"Retry-After": str(refusal.retry_after_s)})
    return ApiError(400, exc.message)  # pragma: no cover - every kind is named above


async def asked(call: Awaitable[T]) -> T:
    """What a use case answers, or its refusal as the API's error (``api_error``)."""
    try:
        return await call
    except UseCaseError as exc:
        raise api_error(exc) from exc
