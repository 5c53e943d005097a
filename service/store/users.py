"""Users, their API tokens and the console's sessions (``Store.users``)."""

from __future__ import annotations

import json
import logging
import sqlite3

from service.domain.rows import (
    CreatedToken,
    SessionRow,
    TokenAuth,
    TokenRow,
    UserRow,
    UserStatusChange,
)
from service.domain.states import RUNNABLE, TaskState
from service.domain.users import Role, label_problem, name_problem, new_token
from service.store.core import (
    Part,
    TokenNotFound,
    TooManyTokens,
    UserDisabled,
    UserExists,
    UserNotFound,
)
from service.store.dialect import unique_violation
from service.store.reads import ACTIVE
from service.store.sql import QUERIES as Q

_S = TaskState
log = logging.getLogger(__name__)


def user_row(r: sqlite3.Row) -> UserRow:
    return UserRow(name=r["name"], role=Role(r["role"]), enabled=bool(r["enabled"]),
                   created_at=r["created_at"], disabled_at=r["disabled_at"])


def token_row(r: sqlite3.Row) -> TokenRow:
    return TokenRow(token_id=r["token_id"], user=r["user"], label=r["label"],
                    created_at=r["created_at"], last_used_at=r["last_used_at"],
                    expires_at=r["expires_at"], revoked_at=r["revoked_at"])


class UserStore(Part):
    """Users, tokens and console sessions: their writes and reads."""

    def get_user(self, name: str) -> UserRow | None:
        row = self._reader().execute(Q["get_user"], {"name": name}).fetchone()
        return None if row is None else user_row(row)

    def list_users(self) -> list[UserRow]:
        return [user_row(r) for r in self._reader().execute(Q["list_users"]).fetchall()]

    def disabled_users(self) -> frozenset[str]:
        return frozenset(r["name"] for r in self._reader().execute(Q["disabled_users"]))

    def token_auth(self, token_id: str) -> TokenAuth | None:
        """A token and its user's role and state, by the token's (non-secret) id."""
        r = self._reader().execute(Q["token_auth"], {"token_id": token_id}).fetchone()
        if r is None:
            return None
        return TokenAuth(token_id=r["token_id"], user=r["user"], sha256=r["sha256"],
                         role=Role(r["role"]), user_enabled=bool(r["enabled"]),
                         expires_at=r["expires_at"], revoked_at=r["revoked_at"],
                         last_used_at=r["last_used_at"])

    def get_token(self, token_id: str) -> TokenRow | None:
        row = self._reader().execute(Q["get_token"], {"token_id": token_id}).fetchone()
        return None if row is None else token_row(row)

    def list_tokens(self, user: str) -> list[TokenRow]:
        return [token_row(r) for r in self._reader().execute(Q["list_tokens"], {"user": user})]

    # -- users and tokens ----------------------------------------------------------------
    def ensure_users(self, *, bootstrap_admin: str, default_user: str, now: float) -> int:
        """Start-up, in one transaction: the bootstrap admin exists as an enabled admin
        (the operator holding its token decides), the default user exists (as a user
        when it is someone else), and tasks created before users existed belong to the
        default user. Returns how many tasks got that owner."""
        for name in (bootstrap_admin, default_user):
            problem = name_problem(name)
            if problem:
                raise ValueError(problem)
        with self._tx() as conn:
            for name, role in ((bootstrap_admin, Role.ADMIN), (default_user, Role.USER)):
                if conn.execute(Q["get_user"], {"name": name}).fetchone() is None:
                    conn.execute(Q["insert_user"], {"name": name, "role": role.value,
                                                    "now": now})
            conn.execute(Q["make_admin"], {"name": bootstrap_admin})
            conn.execute(Q["adopt_gpu_seconds"], {"user": default_user})
            conn.execute(Q["adopt_task_usage"], {"user": default_user})
            return conn.execute(Q["adopt_ownerless_tasks"], {"user": default_user}).rowcount

    def create_user(self, name: str, role: Role, now: float) -> UserRow:
        problem = name_problem(name)
        if problem:
            raise ValueError(problem)
        with self._tx() as conn:
            try:
                # read now (service.store.pg: a write's results are read when looked at)
                _ = conn.execute(Q["insert_user"], {"name": name, "role": Role(role).value,
                                                    "now": now}).rowcount
            except Exception as exc:
                if unique_violation(exc):
                    raise UserExists(name) from exc
                raise
        return UserRow(name=name, role=Role(role), enabled=True, created_at=now,
                       disabled_at=None)

    def set_user_enabled(self, name: str, enabled: bool, now: float) -> UserStatusChange:
        """Enable or disable a user (guarded: a user already in that state is left as it
        is). Tasks are not touched: active ones run to their end, runnable ones wait
        while the user is disabled (the scheduler's limit check)."""
        with self._tx() as conn:
            changed = conn.execute(Q["set_user_enabled"], {
                "name": name, "enabled": int(enabled), "now": now}).rowcount == 1
            row = conn.execute(Q["get_user"], {"name": name}).fetchone()
            if row is None:
                raise UserNotFound(name)

            def count(states: frozenset[TaskState]) -> int:
                return conn.execute(Q["user_task_counts"], {
                    "user": name, "states": json.dumps(sorted(s.value for s in states)),
                }).fetchone()["n"]

            active, runnable = count(ACTIVE), count(RUNNABLE)
        return UserStatusChange(user_row(row), changed, active, runnable)

    def create_token(self, user: str, label: str, expires_at: float | None, now: float,
                     *, max_live: int) -> CreatedToken:
        """A new token for an enabled ``user`` (at most ``max_live`` unrevoked, unexpired
        tokens each). Only its hash is stored; the secret is returned this once."""
        problem = label_problem(label)
        if problem:
            raise ValueError(f"label {problem}")
        with self._tx() as conn:
            row = conn.execute(Q["get_user"], {"name": user}).fetchone()
            if row is None:
                raise UserNotFound(user)
            if not row["enabled"]:
                raise UserDisabled(user)
            live = conn.execute(Q["live_tokens"], {"user": user, "now": now}).fetchone()["n"]
            if live >= max_live:
                raise TooManyTokens(user, max_live)
            token = new_token()
            while conn.execute(Q["token_exists"], {"token_id": token.token_id}).fetchone():
                token = new_token()  # a 48-bit id clashed: take another
            conn.execute(Q["insert_token"], {
                "token_id": token.token_id, "user": user, "label": label,
                "sha256": token.sha256, "now": now, "expires_at": expires_at,
            })
        return CreatedToken(TokenRow(token_id=token.token_id, user=user, label=label,
                                     created_at=now, last_used_at=None,
                                     expires_at=expires_at, revoked_at=None),
                            token.secret)

    def revoke_token(self, user: str, token_id: str, now: float) -> tuple[TokenRow, bool]:
        """Revoke ``user``'s token ``token_id``; ``(the token, whether this call revoked
        it)`` (False: it was revoked before, and keeps its first revocation time)."""
        with self._tx() as conn:
            changed = conn.execute(Q["revoke_token"], {
                "token_id": token_id, "user": user, "now": now}).rowcount == 1
            row = conn.execute(Q["get_token"], {"token_id": token_id}).fetchone()
            if row is None or row["user"] != user:
                raise TokenNotFound(user, token_id)
        return token_row(row), changed

    def touch_token(self, token_id: str, now: float) -> None:
        """Record that a token was used at ``now`` (callers write this at most once a
        minute per token, so reads do not become writes)."""
        with self._tx() as conn:
            conn.execute(Q["touch_token"], {"token_id": token_id, "now": now})

    # -- the web console -------------------------------------------------------------------
    def create_session(self, id_sha256: str, session: SessionRow, now: float,
                       max_per_user: int = 0) -> None:
        """Store a console session (and drop the expired ones: the table stays small).
        With ``max_per_user``, the user's oldest sessions past that many are dropped."""
        with self._tx() as conn:
            conn.execute(Q["delete_expired_sessions"], {"now": now})
            conn.execute(Q["insert_session"], {
                "id_sha256": id_sha256, "user": session.user, "token_id": session.token_id,
                "token_fp": session.token_fp, "csrf": session.csrf, "now": session.created_at,
                "expires_at": session.expires_at})
            if max_per_user:
                conn.execute(Q["drop_oldest_sessions"],
                             {"user": session.user, "keep": max_per_user})

    def delete_session(self, id_sha256: str) -> None:
        with self._tx() as conn:
            conn.execute(Q["delete_session"], {"id_sha256": id_sha256})

    def get_session(self, id_sha256: str) -> SessionRow | None:
        r = self._reader().execute(Q["get_session"], {"id_sha256": id_sha256}).fetchone()
        if r is None:
            return None
        return SessionRow(user=r["user"], token_id=r["token_id"], token_fp=r["token_fp"],
                          csrf=r["csrf"], created_at=r["created_at"],
                          expires_at=r["expires_at"])
