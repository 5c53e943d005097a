"""The ``Idempotency-Key`` header of the submits (``POST /api/v2/tasks``, ``POST
/api/v2/pipelines``): read and checked here (400 for a malformed one), judged by the use
cases and the store (``service.usecases.idempotency``). A replayed answer carries
``Idempotent-Replayed: true``."""

from __future__ import annotations

from aiohttp import web

from service.policy.idempotency import HEADER, REPLAYED_HEADER, parse_key
from service.web.api.middlewares import ApiError


def request_key(request: web.Request) -> str | None:
    """The request's key (None: it sent none); a malformed one is a 400."""
    values = request.headers.getall(HEADER, [])
    if not values:
        return None
    if len(values) > 1:
        raise ApiError(400, f"invalid {HEADER} header: sent {len(values)} times; send one",
                       details=[{"field": HEADER, "message": "sent more than once"}])
    try:
        return parse_key(values[0])
    except ValueError as exc:
        raise ApiError(400, f"invalid {HEADER} header: {exc}",
                       details=[{"field": HEADER, "message": str(exc)}]) from exc


def replay_headers(replayed: bool) -> dict[str, str] | None:
    """The headers of a submit's answer: the replay marker when it is one."""
    return {REPLAYED_HEADER: "true"} if replayed else None
