"""``/api/v2/webhooks``: a user's webhooks and their recent deliveries.

A hook belongs to the user who created it; its owner or an admin may list its
deliveries and delete it (403 for anyone else); an admin's list shows everyone's (the
``user`` query narrows it). The signing secret is in the answer that created the hook,
and nowhere else: not in lists, not in logs. A URL is checked by the SSRF rules here,
with the addresses its host resolves to now, and again at every delivery.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from service.domain.timefmt import iso
from service.store.webhooks import TooManyWebhooks, WebhookOwnerUnknown
from service.web.api.body import check_shape, read_json_object
from service.web.api.deps import AppDeps, deps_of, principal_of
from service.web.api.handlers import user_filter
from service.web.api.middlewares import ApiError
from service.web.api.params import parse_uint
from service.webhooks.rows import DeliveryRow, WebhookRow
from service.webhooks.schemas import NewWebhook
from service.webhooks.transport import registration_problem

log = logging.getLogger(__name__)

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


class Refusal(Exception):
    """A registration refused: the HTTP status, a message, the fields and why."""

    def __init__(self, status: int, message: str,
                 details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details or []


async def register(deps: AppDeps, owner: str, doc: dict[str, Any]) -> WebhookRow:
    """Register ``doc`` (url, events, format) for ``owner``: the one path of the API and
    the console. Raises ``Refusal`` (400 bad input or a refused target, 409 the limit)."""
    new, errors = check_shape(NewWebhook, doc)
    if new is None:
        raise Refusal(400, "invalid webhook", errors)
    url, fmt = new.url, new.format
    problem = await registration_problem(url, deps.settings.webhooks.allow_networks)
    if problem:
        raise Refusal(400, "webhook target refused", [{"field": "url", "message": problem}])
    try:
        hook = await deps.store.create_webhook(
            owner=owner, url=url, events=[t.value for t in new.events], fmt=fmt,
            now=deps.clock(), max_per_user=deps.settings.webhooks.max_per_user)
    except TooManyWebhooks as exc:
        raise Refusal(409, str(exc)) from exc
    except WebhookOwnerUnknown as exc:
        raise Refusal(404, str(exc)) from exc
    log.info("webhook %s of %s created (host %s)", hook.hook_id, owner,
             urlsplit(url).hostname)
    return hook


async def create_webhook(request: web.Request) -> web.Response:
    doc = await read_json_object(request, required=True)
    try:
        hook = await register(deps_of(request), principal_of(request).name, doc)
    except Refusal as exc:
        raise ApiError(exc.status, exc.message, details=exc.details or None) from exc
    return web.json_response({**webhook_json(hook), "secret": hook.secret}, status=201)


async def list_webhooks(request: web.Request) -> web.Response:
    deps = deps_of(request)
    who = principal_of(request)
    errors: list[dict[str, Any]] = []
    owner = await user_filter(request, errors) if who.is_admin else who.name
    if errors:
        raise ApiError(400, "invalid query", details=errors)
    hooks = await deps.store.list_webhooks(owner)
    return web.json_response({"webhooks": [webhook_json(h) for h in hooks]})


async def _owned(request: web.Request, action: str) -> WebhookRow:
    hook_id = request.match_info["hook_id"]
    hook = await deps_of(request).store.get_webhook(hook_id)
    if hook is None:
        raise ApiError(404, f"webhook {hook_id[:40]} not found")
    who = principal_of(request)
    if not who.may_act_on(hook.owner):
        raise ApiError(403, f"only {hook.owner} or an admin may {action} webhook "
                            f"{hook.hook_id}; you are {who.name}")
    return hook


async def delete_webhook(request: web.Request) -> web.Response:
    hook = await _owned(request, "delete")
    if not await deps_of(request).store.delete_webhook(hook.hook_id):
        raise ApiError(404, f"webhook {hook.hook_id} not found")
    log.info("webhook %s of %s deleted by %s", hook.hook_id, hook.owner,
             principal_of(request).name)
    return web.json_response({"deleted": hook.hook_id})


async def list_deliveries(request: web.Request) -> web.Response:
    hook = await _owned(request, "read the deliveries of")
    raw = request.query.get("limit") or str(DELIVERIES_DEFAULT)
    limit = parse_uint(raw, 1, DELIVERIES_MAX)
    if limit is None:
        raise ApiError(400, "invalid query", details=[{
            "field": "limit", "message": f"must be an integer between 1 and "
                                         f"{DELIVERIES_MAX}, got {raw[:40]!r}"}])
    rows = await deps_of(request).store.webhook_deliveries(hook.hook_id, limit)
    return web.json_response({"webhook": webhook_json(hook),
                              "deliveries": [delivery_json(d) for d in rows]})
