"""``/api/v2/webhooks``: a user's webhooks and their recent deliveries.

The rules (who owns a hook, the SSRF checks, the per-user limit, the secret shown once)
are the use cases' (``service.usecases.webhooks``); a handler parses the request, calls
one and renders the hook or the refusal (``api.outcomes``). An admin's list shows
everyone's hooks (the ``user`` query narrows it).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.domain.rows import DeliveryRow, WebhookRow
from service.domain.timefmt import iso
from service.usecases import webhooks
from service.usecases.ports import UseCaseError
from service.web.api.body import read_json_object
from service.web.api.deps import deps_of, principal_of
from service.web.api.handlers import user_filter
from service.web.api.middlewares import ApiError
from service.web.api.outcomes import api_error
from service.web.api.params import parse_uint

DELIVERIES_DEFAULT, DELIVERIES_MAX = 50, 500


def webhook_json(hook: WebhookRow) -> dict[str, Any]:
    """A hook as lists show it (never its secret)."""
    return {"id": hook.hook_id, "owner": hook.owner, "url": hook.url,
            "events": list(hook.events), "format": hook.format,
            "created_at": iso(hook.created_at)}


def delivery_json(d: DeliveryRow) -> dict[str, Any]:
    return {
        "id": f"msg_{d.delivery_id}", "event_id": d.event_id, "event_type": d.event_type,
        "event_at": iso(d.event_ts), "outcome": d.state, "attempts": d.attempts,
        "status_code": d.last_status, "error": d.last_error,
        "last_attempt_at": iso(d.last_attempt_at),
        "next_retry_at": iso(d.next_at) if d.state == "PENDING" else None,
        "ended_at": iso(d.ended_at),
        "tries": [{"attempt": t.attempt, "at": iso(t.at), "status_code": t.status,
                   "error": t.error} for t in d.tries],
    }


async def create_webhook(request: web.Request) -> web.Response:
    doc = await read_json_object(request, required=True)
    try:
        who = principal_of(request)
        hook = await webhooks.register(deps_of(request), who.name, doc, admin=who.is_admin)
    except UseCaseError as exc:
        raise api_error(exc) from exc
    return web.json_response({**webhook_json(hook), "secret": hook.secret}, status=201)


async def list_webhooks(request: web.Request) -> web.Response:
    who = principal_of(request)
    errors: list[dict[str, Any]] = []
    owner = await user_filter(request, errors) if who.is_admin else who.name
    if errors:
        raise ApiError(400, "invalid query", details=errors)
    hooks = await webhooks.hooks_of(deps_of(request), owner)
    return web.json_response({"webhooks": [webhook_json(h) for h in hooks]})


async def delete_webhook(request: web.Request) -> web.Response:
    try:
        hook = await webhooks.delete(deps_of(request), principal_of(request),
                                     request.match_info["hook_id"])
    except UseCaseError as exc:
        raise api_error(exc) from exc
    return web.json_response({"deleted": hook.hook_id})


async def list_deliveries(request: web.Request) -> web.Response:
    deps = deps_of(request)
    try:
        hook = await webhooks.owned_hook(deps, principal_of(request),
                                         request.match_info["hook_id"],
                                         "read the deliveries of")
    except UseCaseError as exc:
        raise api_error(exc) from exc
    raw = request.query.get("limit") or str(DELIVERIES_DEFAULT)
    limit = parse_uint(raw, 1, DELIVERIES_MAX)
    if limit is None:
        raise ApiError(400, "invalid query", details=[{
            "field": "limit", "message": f"must be an integer between 1 and "
                                         f"{DELIVERIES_MAX}, got {raw[:40]!r}"}])
    rows = await webhooks.deliveries_of(deps, hook, limit)
    return web.json_response({"webhook": webhook_json(hook),
                              "deliveries": [delivery_json(d) for d in rows]})
