"""Who sent a request: the bearer token, checked against the users' tokens.

* ``bearer_token`` takes the token out of an ``Authorization`` header; anything else
  (missing, another scheme, blank, undecodable, absurdly long) is an ``AuthFailure``.
* ``Authenticator.authenticate`` turns a token into a ``Principal``: the bootstrap
  token (from the environment) is the configured bootstrap admin; an ``argus_<id>_...``
  token is looked up by its id and its hash compared in constant time. A revoked or
  expired token, or one of a disabled user, fails with a message that says which, but
  only to whoever holds that token's secret: a wrong secret is just an invalid token.
* Rows are cached per token id: every write of users or tokens goes through this
  process's API, which calls ``invalidate``, so the cache never outlives a revocation. A
  read that raced an invalidation is not cached (a generation counter says so). Where
  several instances share the database (PostgreSQL) a write may come through another
  one: there a row is read again once it is ``cache_ttl_s`` old, so a revocation made
  elsewhere holds here within that.
* ``last_used_at`` is written at most once per ``touch_interval_s`` per token, so
  requests stay reads.

No token, hash or secret reaches a log line or an error message: failures name the
token by its public id (``argus_<id>``) at most.
"""

from __future__ import annotations

import enum
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from service.domain.rows import TokenAuth
from service.domain.timefmt import iso
from service.domain.users import (
    Principal,
    Role,
    display_prefix,
    hash_matches,
    parse_token_id,
    presentable,
)
from service.usecases import sessions
from service.usecases.ports import Lanes

log = logging.getLogger(__name__)

TOUCH_INTERVAL_S = 60.0
MAX_CACHED = 10_000  # token rows kept; beyond that the cache starts over


class Access(enum.Enum):
    """Who may call a route (operations on one task or user add their own check)."""

    PUBLIC = "public"  # no token needed
    USER = "user"  # any enabled user's valid token
    ADMIN = "admin"  # an admin's token


class AuthFailure(Exception):
    """The request carries no valid token (401); ``message`` says why, secret-free."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or AuthFailure."""
    if header is None:
        raise AuthFailure("missing Authorization header (expected: Bearer <token>)")
    scheme, _, presented = header.partition(" ")
    presented = presented.strip()
    if scheme.lower() != "bearer" or not presented:
        raise AuthFailure("malformed Authorization header (expected: Bearer <token>)")
    if not presentable(presented):
        raise AuthFailure("invalid token")
    return presented


@dataclass(frozen=True, slots=True)
class _Lanes:
    """The store's lanes in the shape the use cases take (``reads.ReadDeps``)."""

    store: Lanes[Any]


class Authenticator:
    def __init__(self, store: Lanes[Any], bootstrap_token: str, bootstrap_admin: str, *,
                 clock: Callable[[], float], touch_interval_s: float = TOUCH_INTERVAL_S,
                 cache_ttl_s: float | None = None) -> None:
        """``cache_ttl_s``: how long a cached token row is trusted (None: until this
        process writes a user or token, the one-instance case)."""
        if not bootstrap_token:
            raise ValueError("an API token is required")
        self._lanes = _Lanes(store)
        self._bootstrap = bootstrap_token.encode("utf-8")
        self._bootstrap_admin = Principal(bootstrap_admin, Role.ADMIN, None)
        self._clock = clock
        self._touch_interval_s = touch_interval_s
        self._cache: dict[str, TokenAuth] = {}
        self._read_at: dict[str, float] = {}  # token id -> when its cached row was read
        self._cache_ttl_s = cache_ttl_s
        self._generation = 0

    @property
    def bootstrap_admin(self) -> str:
        return self._bootstrap_admin.name

    def invalidate(self) -> None:
        """Forget every cached token (a user or token was written)."""
        self._generation += 1
        self._cache.clear()
        self._read_at.clear()

    async def authenticate(self, token: str) -> Principal:
        """The principal ``token`` signs in as, or AuthFailure saying why not."""
        if not presentable(token):
            raise AuthFailure("invalid token")
        if hmac.compare_digest(token.encode("utf-8"), self._bootstrap):
            return self._bootstrap_admin
        token_id = parse_token_id(token)
        if token_id is None:
            raise AuthFailure("invalid token")
        row = await self._row(token_id)
        if row is None or not hash_matches(token, row.sha256):
            raise AuthFailure("invalid token")
        now = self._clock()
        name = display_prefix(token_id)
        if row.revoked_at is not None:
            raise AuthFailure(f"token {name} was revoked at {iso(row.revoked_at)}")
        if row.expires_at is not None and now >= row.expires_at:
            raise AuthFailure(f"token {name} expired at {iso(row.expires_at)}")
        if not row.user_enabled:
            raise AuthFailure(f"user {row.user} is disabled")
        await self._touch(row, now)
        return Principal(row.user, row.role, token_id)

    def known(self, token: str) -> bool:
        """Whether ``token`` is the environment's or one this process has cached, with a
        matching secret: checked without the store, so an address that must wait after
        failed checks still serves its users whose tokens are known (a shared NAT)."""
        if not presentable(token):
            return False
        if hmac.compare_digest(token.encode("utf-8"), self._bootstrap):
            return True
        token_id = parse_token_id(token)
        row = self._cache.get(token_id) if token_id is not None else None
        return row is not None and hash_matches(token, row.sha256)

    async def _row(self, token_id: str) -> TokenAuth | None:
        row = self._cache.get(token_id)
        if row is not None and (self._cache_ttl_s is None or self._clock()
                                - self._read_at[token_id] < self._cache_ttl_s):
            return row
        generation = self._generation
        read_at = self._clock()
        row = await sessions.token_auth(self._lanes, token_id)
        if row is None:
            self._cache.pop(token_id, None)
        elif generation == self._generation:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
                self._read_at.clear()
            self._cache[token_id] = row
            self._read_at[token_id] = read_at
        return row

    async def _touch(self, row: TokenAuth, now: float) -> None:
        if row.last_used_at is not None and now - row.last_used_at < self._touch_interval_s:
            return
        if row.token_id in self._cache:  # no second write while this one is on its way
            self._cache[row.token_id] = replace(row, last_used_at=now)
        try:
            await sessions.touch_token(self._lanes, row.token_id, now)
        except Exception:  # a missed "last used" must not fail the request
            log.warning("recording the use of token %s failed", display_prefix(row.token_id),
                        exc_info=True)
