"""A user's webhooks: register one, list them, read a hook's deliveries, delete one. The
rules once, for the API and the console.

A hook belongs to the user who created it; its owner or an admin reads its deliveries and
deletes it (``Forbidden`` for anyone else, ``NotFound`` for no such hook). The signing
secret is in the row that ``register`` returns, and nowhere else: not in lists, not in
logs. A URL is checked by the SSRF rules here, with the addresses its host resolves to
now, and again at every delivery (``service.engine.webhook_delivery``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from service.domain.rows import DeliveryRow, WebhookRow
from service.domain.users import Principal
from service.store.webhooks import TooManyWebhooks, WebhookOwnerUnknown
from service.usecases.ports import Conflict, Forbidden, NotFound, Rejected, ServiceDeps
from service.usecases.shapes import check_shape
from service.webhooks.events import ADMIN_ONLY
from service.webhooks.schemas import NewWebhook
from service.webhooks.transport import registration_problem

log = logging.getLogger(__name__)


class HookDeps(ServiceDeps, Protocol):
    """The parts of the service the webhook use cases touch."""


async def register(deps: HookDeps, owner: str, doc: Mapping[str, Any], *,
                   admin: bool = False) -> WebhookRow:
    """Register ``doc`` (url, events, format) for ``owner`` (``admin``: an admin's, who
    may follow the node events). Refuses with ``Rejected`` (bad input, or a target the
    SSRF rules refuse), ``Forbidden`` (a node event for a non-admin), ``Conflict`` (the
    per-user limit) or ``NotFound`` (no such owner)."""
    new, errors = check_shape(NewWebhook, doc)
    if new is None:
        raise Rejected("invalid webhook", errors)
    admins_only = sorted(t.value for t in set(new.events) & ADMIN_ONLY)
    if admins_only and not admin:
        raise Forbidden(f"only an admin may subscribe to the node events {admins_only}: "
                        "nodes are cluster-wide")
    url, fmt = new.url, new.format
    problem = await registration_problem(url, deps.settings.webhooks.allow_networks)
    if problem:
        raise Rejected("webhook target refused", [{"field": "url", "message": problem}])
    events, now = [t.value for t in new.events], deps.clock()
    limit = deps.settings.webhooks.max_per_user
    try:
        hook = await deps.store.write(lambda s: s.webhooks.create_webhook(
            owner=owner, url=url, events=events, fmt=fmt, now=now, max_per_user=limit))
    except TooManyWebhooks as exc:
        raise Conflict(str(exc)) from exc
    except WebhookOwnerUnknown as exc:
        raise NotFound("user", exc.owner, str(exc)) from exc
    log.info("webhook %s of %s created (host %s)", hook.hook_id, owner,
             urlsplit(url).hostname)
    return hook


async def hooks_of(deps: HookDeps, owner: str | None) -> list[WebhookRow]:
    """``owner``'s hooks (None: everyone's, for an admin)."""
    return await deps.store.read(lambda s: s.webhooks.list_webhooks(owner))


async def owned_hook(deps: HookDeps, who: Principal, hook_id: str, action: str
                     ) -> WebhookRow:
    """The hook, when ``who`` owns it or is an admin (``action``: what they want to do,
    for the refusal's sentence)."""
    hook = await deps.store.read(lambda s: s.webhooks.get_webhook(hook_id))
    if hook is None:
        raise NotFound("webhook", hook_id[:40])
    if not who.may_act_on(hook.owner):
        raise Forbidden(f"only {hook.owner} or an admin may {action} webhook "
                        f"{hook.hook_id}; you are {who.name}")
    return hook


async def deliveries_of(deps: HookDeps, hook: WebhookRow, limit: int) -> list[DeliveryRow]:
    """The ``limit`` latest deliveries of ``hook`` (one ``owned_hook`` returned)."""
    return await deps.store.read(lambda s: s.webhooks.webhook_deliveries(hook.hook_id, limit))


async def hooks_with_deliveries(deps: HookDeps, owner: str, limit: int
                                ) -> list[tuple[WebhookRow, list[DeliveryRow]]]:
    """``owner``'s hooks, each with its ``limit`` latest deliveries (one read)."""
    return await deps.store.read(lambda s: [
        (hook, s.webhooks.webhook_deliveries(hook.hook_id,
                                             limit)) for hook in s.webhooks.list_webhooks(owner)])


async def delete(deps: HookDeps, who: Principal, hook_id: str) -> WebhookRow:
    """Delete the hook (its owner or an admin); the hook as it was."""
    hook = await owned_hook(deps, who, hook_id, "delete")
    if not await deps.store.write(lambda s: s.webhooks.delete_webhook(hook.hook_id)):
        raise NotFound("webhook", hook.hook_id)
    log.info("webhook %s of %s deleted by %s", hook.hook_id, hook.owner, who.name)
    return hook
