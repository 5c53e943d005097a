"""The console's webhooks page: the signed-in user's hooks, their recent deliveries and
outcomes, a form to register one (its secret shown on the answer page, once) and one to
delete each. The forms go through the same checks as the console's other POSTs (the
request's origin, the session's form token) and the same use cases as the API
(``service.usecases.webhooks``: the SSRF rules, the per-user limit, who owns a hook)."""

from __future__ import annotations

from urllib.parse import parse_qsl

from aiohttp import web

from service.domain.rows import WebhookRow
from service.usecases import webhooks
from service.usecases.ports import Conflict, Forbidden, NotFound, Rejected, UseCaseError
from service.web.api.deps import deps_of
from service.web.ui import pages
from service.web.ui.sessions import csrf_ok
from service.webhooks.events import ADMIN_ONLY, DESCRIPTIONS, EventType
from service.webhooks.schemas import FORMATS

DELIVERIES_SHOWN = 10
PAGE = "/ui/webhooks"
# a registration refused: the status of the page that says why
REFUSAL_STATUS: dict[type[UseCaseError], int] = {Rejected: 400, Conflict: 409, NotFound: 404,
                                                  Forbidden: 403}


async def _page(request: web.Request, *, status: int = 200, created: WebhookRow | None = None,
                errors: list[str] | None = None, form: dict[str, object] | None = None
                ) -> web.Response:
    deps = deps_of(request)
    who = request[pages.SIGNED].principal
    hooks = await webhooks.hooks_with_deliveries(deps, who.name, DELIVERIES_SHOWN)
    return pages.render(
        request, "webhooks.html", status=status, nav="webhooks",
        hooks=hooks, created=created,
        errors=errors or [], form=form or {"url": "", "events": [], "format": "standard"},
        event_types=[(t.value, DESCRIPTIONS[t]) for t in EventType
                     if who.is_admin or t not in ADMIN_ONLY], formats=FORMATS,
        limit=deps.settings.webhooks.max_per_user)


@pages.signed_in
async def webhooks_page(request: web.Request) -> web.Response:
    return await _page(request)


async def _pairs(request: web.Request) -> list[tuple[str, str]]:
    """A small urlencoded form as (name, value) pairs (the events' checkboxes repeat a
    name); anything too big or undecodable is an empty one, as ``pages._form`` does."""
    if request.content_length is not None and request.content_length > pages.FORM_MAX_BYTES:
        return []
    try:
        body = await request.content.read(pages.FORM_MAX_BYTES + 1)
        if len(body) > pages.FORM_MAX_BYTES:
            return []
        return parse_qsl(body.decode("utf-8"), max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        return []


async def _checked_form(request: web.Request
                        ) -> tuple[web.Response | None, list[tuple[str, str]]]:
    """The POST's fields, or a refusal when its origin or form token is wrong (the
    console's own checks: ``pages._cross_site``, ``sessions.csrf_ok``)."""
    raw = await _pairs(request)
    token = next((v for k, v in raw if k == "csrf"), None)
    if pages._cross_site(request) or not csrf_ok(request[pages.SIGNED], token):
        return pages._refused(request), raw
    return None, raw


@pages.signed_in
async def create(request: web.Request) -> web.StreamResponse:
    refusal, raw = await _checked_form(request)
    if refusal is not None:
        return refusal
    doc: dict[str, object] = {
        "url": next((v for k, v in raw if k == "url"), "").strip(),
        "events": [v for k, v in raw if k == "events"],
        "format": next((v for k, v in raw if k == "format"), "standard"),
    }
    try:
        who = request[pages.SIGNED].principal
        hook = await webhooks.register(deps_of(request), who.name, doc, admin=who.is_admin)
    except (Rejected, Conflict, NotFound, Forbidden) as exc:
        details = exc.details if isinstance(exc, Rejected | Conflict) else []
        errors = [f"{d['field']}: {d['message']}" for d in details] or [exc.message]
        return await _page(request, status=REFUSAL_STATUS[type(exc)], errors=errors,
                           form=doc)
    return await _page(request, status=201, created=hook)


@pages.signed_in
async def delete(request: web.Request) -> web.StreamResponse:
    refusal, _ = await _checked_form(request)
    if refusal is not None:
        return refusal
    try:
        await webhooks.delete(deps_of(request), request[pages.SIGNED].principal,
                              request.match_info["hook_id"])
    except UseCaseError:  # none of theirs: not found, whoever's it is
        return pages.render(request, "error.html", status=404, title="Not found",
                            message="You have no such webhook.")
    raise web.HTTPSeeOther(PAGE, headers=pages.HEADERS)
