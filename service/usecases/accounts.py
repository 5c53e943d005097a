"""Users, their tokens and GPU accounting: the rules once, for the API (and any other
front end).

* an admin creates, lists, disables and enables users; users are never deleted (their
  tasks and their GPU time stay theirs);
* a user reads themself and creates, lists and revokes their own tokens; an admin does it
  for anyone (``Forbidden`` for anyone else);
* the bootstrap admin (the token in the environment) cannot be disabled (``Conflict``):
  whoever holds the machine's environment would lock everyone out, and the token is
  revoked by changing the environment variable;
* disabling a user refuses their tokens at once; their tasks on the cluster run to their
  end; their queued tasks are not started while the user is disabled;
* everyone may read the usage of everyone (everyone sees every task anyway).

Every write here makes the authenticator forget its cached tokens (``Tokens.invalidate``),
so a revocation or a disable takes effect on the next request.
"""

from __future__ import annotations

import logging
from typing import Protocol

from service.domain.rows import CreatedToken, TokenRow, UserRow, UserStatusChange
from service.domain.users import Principal, Role, display_prefix
from service.policy.usage import Summary
from service.store.writer import (
    TokenNotFound,
    TooManyTokens,
    UserDisabled,
    UserExists,
    UserNotFound,
)
from service.usecases.ports import Conflict, Forbidden, NotFound, ServiceDeps

log = logging.getLogger(__name__)

MAX_LIVE_TOKENS = 50  # per user: unrevoked, unexpired


class Tokens(Protocol):
    """What the use cases need of the authenticator."""

    @property
    def bootstrap_admin(self) -> str: ...

    def invalidate(self) -> None: ...


class AccountDeps(ServiceDeps, Protocol):
    """The parts of the service the account use cases touch."""

    @property
    def auth(self) -> Tokens: ...


def may_manage(who: Principal, name: str, action: str) -> None:
    """Refuse (``Forbidden``) unless ``who`` is ``name`` or an admin (``action``: what they
    want to do, for the sentence)."""
    if not who.may_manage(name):
        raise Forbidden(f"only {name} or an admin may {action}; you are {who.name}")


async def me(deps: AccountDeps, who: Principal) -> tuple[UserRow | None, TokenRow | None]:
    """The caller's user row and the token they came with (None: no row, or the
    bootstrap token), in one read."""
    token_id = who.token_id
    return await deps.store.read(lambda s: (
        s.users.get_user(who.name), None if token_id is None else s.users.get_token(token_id)))


async def users(deps: AccountDeps) -> list[UserRow]:
    return await deps.store.read(lambda s: s.users.list_users())


async def create_user(deps: AccountDeps, who: Principal, name: str, role: Role) -> UserRow:
    """A new user (``Conflict`` when the name is taken)."""
    now = deps.clock()
    try:
        user = await deps.store.write(lambda s: s.users.create_user(name, role, now))
    except UserExists as exc:
        raise Conflict(str(exc), [{"field": "name", "message": "already exists"}]) from exc
    deps.auth.invalidate()
    log.info("user %s (%s) created by %s", user.name, user.role, who.name)
    return user


async def user(deps: AccountDeps, who: Principal, name: str,
               action: str = "read this user") -> UserRow:
    """User ``name``, for themself or an admin (``Forbidden``; ``NotFound``)."""
    may_manage(who, name, action)
    row = await deps.store.read(lambda s: s.users.get_user(name))
    if row is None:
        raise NotFound("user", name)
    return row


async def set_enabled(deps: AccountDeps, who: Principal, name: str, enabled: bool
                      ) -> UserStatusChange:
    """Enable or disable ``name`` (never the bootstrap admin: ``Conflict``)."""
    if not enabled and name == deps.auth.bootstrap_admin:
        raise Conflict(f"{name} is the bootstrap admin (the token in "
                       f"{deps.settings.token_env}) and cannot be disabled; change that "
                       "variable to revoke its token")
    now = deps.clock()
    try:
        change = await deps.store.write(lambda s: s.users.set_user_enabled(name, enabled, now))
    except UserNotFound as exc:
        raise NotFound("user", name, str(exc)) from exc
    deps.auth.invalidate()
    if change.changed:
        log.info("user %s %s by %s", name, "enabled" if enabled else "disabled", who.name)
    return change


async def create_token(deps: AccountDeps, who: Principal, name: str, label: str,
                       expires_at: float | None, now: float) -> CreatedToken:
    """A new token of ``name`` (its secret in the result, this once). Refuses with
    ``Forbidden``, ``NotFound`` (no such user) or ``Conflict`` (disabled, too many)."""
    may_manage(who, name, "create tokens for this user")
    try:
        created = await deps.store.write(lambda s: s.users.create_token(
            name, label, expires_at, now, max_live=MAX_LIVE_TOKENS))
    except UserNotFound as exc:
        raise NotFound("user", name, str(exc)) from exc
    except (UserDisabled, TooManyTokens) as exc:
        raise Conflict(f"no token created: {exc}") from exc
    deps.auth.invalidate()
    log.info("token %s (%s) created for %s by %s", display_prefix(created.row.token_id),
             label, name, who.name)
    return created


async def tokens(deps: AccountDeps, who: Principal, name: str) -> list[TokenRow]:
    """``name``'s tokens (``Forbidden``; ``NotFound`` for no such user)."""
    await user(deps, who, name, "list this user's tokens")
    return await deps.store.read(lambda s: s.users.list_tokens(name))


async def revoke_token(deps: AccountDeps, who: Principal, name: str, token_id: str
                       ) -> tuple[TokenRow, bool]:
    """Revoke ``name``'s token; the token after, and whether this request changed it."""
    may_manage(who, name, "revoke this user's tokens")
    now = deps.clock()
    try:
        token, changed = await deps.store.write(lambda s: s.users.revoke_token(name, token_id, now))
    except TokenNotFound as exc:
        raise NotFound("token", token_id, str(exc)[:200]) from exc
    deps.auth.invalidate()
    if changed:
        log.info("token %s of %s revoked by %s", display_prefix(token_id), name, who.name)
    return token, changed


async def usage(deps: AccountDeps, window_from: float, window_to: float, now: float,
                of_user: str | None, task_limit: int) -> Summary:
    """GPU time in the window, per user and task (``of_user``: one user's only).

    This read's cost grows with the window, so it runs on the store's lane for heavy
    reads, where one party's burst of them runs one at a time.
    """
    return await deps.store.heavy(lambda s: s.usage.usage_summary(window_from, window_to, now,
                                                                  of_user, task_limit))
