"""Console sign-in: an API token in, a session cookie out.

* Signing in checks the token exactly as the API does (``Authenticator.authenticate``)
  and stores a server-side session: the cookie holds 32 random bytes, the database only
  their SHA-256, so a copy of the database signs nobody in. No server secret is needed.
* The token itself is never kept, put in a URL or in a page. The session remembers which
  token it came from (its public id; for the bootstrap token a hash of it), and every
  request checks that token again: a revoked or expired token, a disabled user, or a
  changed bootstrap token ends the session at the next request.
* The cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's
  page sends it), ``Path=/ui``, and ``Secure`` when the request came over HTTPS.
* Every state-changing form carries the session's synchronizer token (``csrf``), compared
  in constant time: SameSite already keeps other sites' forms out, this keeps out what
  SameSite does not cover (old browsers, same-site subdomains).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from aiohttp import web

from service.domain.rows import SessionRow
from service.domain.users import Principal, Role
from service.usecases import sessions
from service.web.api.auth import AuthFailure
from service.web.api.deps import AppDeps, deps_of

COOKIE = "argus_session"
SESSION_TTL_S = 12 * 3600.0
_MAX_COOKIE = 128  # what new_session makes is 43 characters


@dataclass(frozen=True, slots=True)
class Signed:
    """A request's valid session: who, and the form token of its forms."""

    principal: Principal
    csrf: str
    id_sha256: str


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint(bootstrap_token: str) -> str:
    """What a bootstrap-token session remembers of that token."""
    return _sha256("argus-console-bootstrap:" + bootstrap_token)


async def sign_in(request: web.Request, token: str, bootstrap_fp: str) -> tuple[str, Principal]:
    """Check ``token`` and store a session; (the cookie value, who). AuthFailure when
    the token does not sign anyone in."""
    deps = deps_of(request)
    principal = await deps.auth.authenticate(token)
    now = deps.clock()
    raw = secrets.token_urlsafe(32)
    row = SessionRow(
        user=principal.name, token_id=principal.token_id,
        token_fp=bootstrap_fp if principal.token_id is None else None,
        csrf=secrets.token_urlsafe(32), created_at=now, expires_at=now + SESSION_TTL_S)
    await sessions.create_session(deps, _sha256(raw), row, now,
                                  deps.settings.ui_max_sessions_per_user)
    return raw, principal


def session_key(request: web.Request) -> str | None:
    """The key of the session the request's cookie names (not looked up: it may be
    unknown or expired); None without a well-formed cookie."""
    raw = request.cookies.get(COOKIE, "")
    if not raw or len(raw) > _MAX_COOKIE or not raw.isascii():
        return None
    return _sha256(raw)


async def current(request: web.Request, bootstrap_fp: str) -> Signed | None:
    """The request's session when it is still valid; None otherwise (no cookie, unknown,
    expired, or its token or user no longer valid)."""
    key = session_key(request)
    if key is None:
        return None
    deps = deps_of(request)
    row = await sessions.session(deps, key)
    if row is None or deps.clock() >= row.expires_at:
        return None
    principal = await _principal(deps, row, bootstrap_fp)
    if principal is None:
        await sessions.end_session(deps, key)
        return None
    return Signed(principal, row.csrf, key)


async def _principal(deps: AppDeps, row: SessionRow, bootstrap_fp: str) -> Principal | None:
    if row.token_id is None:
        if row.token_fp is None or not hmac.compare_digest(row.token_fp, bootstrap_fp):
            return None
        if row.user != deps.auth.bootstrap_admin:
            return None
        return Principal(row.user, Role.ADMIN, None)
    auth = await sessions.token_auth(deps, row.token_id)
    if auth is None or auth.revoked_at is not None or not auth.user_enabled:
        return None
    if auth.expires_at is not None and deps.clock() >= auth.expires_at:
        return None
    return Principal(auth.user, auth.role, row.token_id)


def csrf_ok(signed: Signed, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(
        signed.csrf.encode(), str(presented).encode("utf-8", "replace"))


def set_cookie(request: web.Request, response: web.StreamResponse, raw: str) -> None:
    secure = request.secure or deps_of(request).settings.ui_secure_cookie
    response.set_cookie(COOKIE, raw, max_age=int(SESSION_TTL_S), path="/ui", httponly=True,
                        samesite="Strict", secure=secure)


def clear_cookie(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/ui")


__all__ = ["COOKIE", "AuthFailure", "Signed", "clear_cookie", "csrf_ok", "current",
           "fingerprint", "set_cookie", "sign_in"]
