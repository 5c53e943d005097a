"""The console's sign-in and sign-out: an API token exchanged for a session cookie, with
a backoff per address and per account after failed attempts (``failure_guard``)."""

from __future__ import annotations

import logging
import math

from aiohttp import web

from service.domain.users import parse_token_id, presentable
from service.usecases import sessions
from service.web.api.auth import AuthFailure
from service.web.api.deps import deps_of
from service.web.ui.pages import (
    BOOTSTRAP_FP,
    GUARD,
    HEADERS,
    SIGNED,
    UI,
    _cross_site,
    _form,
    _refused,
    render,
    signed_in,
)
from service.web.ui.sessions import (
    clear_cookie,
    csrf_ok,
    set_cookie,
    sign_in,
)

log = logging.getLogger(__name__)

SIGNIN_LOG_S = 60.0  # failed sign-ins are logged in aggregate, at most this often


def _safe_next(raw: str | None) -> str:
    """Where to go after signing in: a console path only (no other site, no ``//``)."""
    if (raw and raw.startswith(UI + "/") and not raw.startswith("//") and "\\" not in raw
            and raw.isprintable() and len(raw) <= 2000):
        return raw
    return UI + "/queue"


async def root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther(UI + "/queue", headers=HEADERS)


async def signin_form(request: web.Request) -> web.Response:
    return render(request, "signin.html", next=_safe_next(request.query.get("next")),
                  error=None)


async def signin(request: web.Request) -> web.StreamResponse:
    if _cross_site(request):
        return _refused(request)
    form = await _form(request)
    token = form.get("token", "").strip()
    target = _safe_next(form.get("next"))
    guard = request.app[GUARD]
    # who is guessing: the client's address, and the account the token names (its public
    # id; the environment's token, or anything else, is one account)
    keys = (f"address:{request.remote}", f"account:{parse_token_id(token) or 'other'}")
    wait = guard.wait_s(*keys)
    if wait > 0:
        retry = max(1, math.ceil(wait))
        response = render(request, "signin.html", status=429, next=target, error=(
            f"Too many failed sign-ins from this address or for this token; try again in "
            f"{retry} s."))
        response.headers["Retry-After"] = str(retry)
        return response
    error = "Enter an API token."
    if token:
        if not presentable(token):
            error = "That is not a valid token."
        else:
            try:
                raw, _ = await sign_in(request, token, request.app[BOOTSTRAP_FP])
            except AuthFailure as exc:
                error = f"Sign-in refused: {exc.message}."
            else:
                guard.succeeded(*keys)
                response = web.HTTPSeeOther(target, headers=HEADERS)
                set_cookie(request, response, raw)
                raise response
        guard.failed(*keys)
        if failures := guard.report(SIGNIN_LOG_S):
            log.warning("%d failed console sign-in(s) since the last report", failures)
    return render(request, "signin.html", status=401, next=target, error=error)


@signed_in
async def signout(request: web.Request) -> web.StreamResponse:
    signed = request[SIGNED]
    form = await _form(request)
    if _cross_site(request) or not csrf_ok(signed, form.get("csrf")):
        return _refused(request)
    await sessions.end_session(deps_of(request), signed.id_sha256)
    response = web.HTTPSeeOther(UI + "/signin", headers=HEADERS)
    clear_cookie(response)
    raise response
