"""Who a request is: the console's sign-in sessions and the bearer tokens' rows.

The console's sessions are kept by the SHA-256 of the cookie's value; a token's row is
what the authenticator checks (and caches). Each function is one call on a store lane:
reads on the read lane, writes on the write lane."""

from __future__ import annotations

from service.domain.rows import SessionRow, TokenAuth
from service.usecases.reads import ReadDeps


async def create_session(deps: ReadDeps, id_sha256: str, row: SessionRow, now: float,
                         max_per_user: int) -> None:
    """Store a session (the user's oldest go beyond ``max_per_user``; 0: no limit)."""
    await deps.store.write(lambda s: s.users.create_session(id_sha256, row, now,
                                                            max_per_user))


async def session(deps: ReadDeps, id_sha256: str) -> SessionRow | None:
    return await deps.store.read(lambda s: s.users.get_session(id_sha256))


async def end_session(deps: ReadDeps, id_sha256: str) -> None:
    await deps.store.write(lambda s: s.users.delete_session(id_sha256))


async def token_auth(deps: ReadDeps, token_id: str) -> TokenAuth | None:
    """What authenticates a token: its hash, expiry, revocation, its user's role."""
    return await deps.store.read(lambda s: s.users.token_auth(token_id))


async def touch_token(deps: ReadDeps, token_id: str, now: float) -> None:
    """Record that the token was used at ``now``."""
    await deps.store.write(lambda s: s.users.touch_token(token_id, now))
