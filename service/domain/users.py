"""Users, roles and API tokens: the rules, as values (no I/O).

* A user name is ``[a-z][a-z0-9_-]{0,31}`` without ``--`` and not ending in ``-``: it
  becomes part of task ids (``<prefix>-<user>-<workload>-...``), Ray submission ids
  (``<task_id>--aNN``, where ``--`` separates the attempt) and paths
  (``<shared_root>/users/<user>/``), so ``--`` stays a separator everywhere and a name
  can never add one. ``all``, ``me`` and ``mine`` are words of the API and the CLI
  (``?user=all``, ``/users/me``), never names.
* Roles: ``admin`` (manages users, cancels and reads anyone's tasks) and ``user``.
* A token is ``argus_<id>_<secret>``: ``<id>`` (12 hex digits) is not secret and finds
  the token's row; ``<secret>`` is 256 random bits. The store keeps only the SHA-256 of
  the whole token: tokens are long random secrets, so a fast hash is enough (a slow KDF
  protects guessable passwords, which these are not). The check compares hashes with
  ``hmac.compare_digest``.
* The bootstrap token (the environment variable named by ``v2.auth.token_env``) is no
  row: it signs in as the configured bootstrap admin.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

USER_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
USER_NAME_RULE = ("1-32 characters: a lowercase letter, then lowercase letters, digits, "
                  "'_' or '-'; no '--' and no '-' at the end")
RESERVED_NAMES = frozenset({"all", "me", "mine"})
ME = "me"  # the caller, in /api/v2/users/me and ?user=me
ALL = "all"  # every user, in ?user=all

TOKEN_PREFIX = "argus_"
TOKEN_ID_HEX = 12
_TOKEN_RE = re.compile(rf"{TOKEN_PREFIX}(?P<id>[0-9a-f]{{{TOKEN_ID_HEX}}})_[A-Za-z0-9_-]{{43}}")
# Longer than any token Argus makes or an operator would put in an environment variable;
# anything longer is refused before it is hashed or compared.
MAX_TOKEN_LEN = 512
MAX_TOKEN_LIFETIME_S = 5 * 366 * 86400.0
MIN_TOKEN_LIFETIME_S = 1.0  # less would make a token expired when created (5e-324 s)
MAX_LABEL_LEN = 64


class Role(enum.StrEnum):
    ADMIN = "admin"
    USER = "user"


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a user name, or None when it can."""
    if not isinstance(name, str):
        return f"must be a string ({USER_NAME_RULE})"
    if not USER_NAME_RE.fullmatch(name) or "--" in name or name.endswith("-"):
        return f"{name[:40]!r} is not a valid user name ({USER_NAME_RULE})"
    if name in RESERVED_NAMES:
        return f"{name!r} is reserved (all, me and mine are words of the API)"
    return None


def is_user_name(name: object) -> bool:
    return name_problem(name) is None


def label_problem(label: object) -> str | None:
    """Why ``label`` cannot label a token, or None."""
    if not isinstance(label, str) or not label.strip():
        return "must be a non-empty string"
    if len(label) > MAX_LABEL_LEN:
        return f"must be at most {MAX_LABEL_LEN} characters"
    if not label.isprintable():
        return "must not contain control or non-printable characters"
    return None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who sent a request: the token's user and role (``token_id`` None: bootstrap)."""

    name: str
    role: Role
    token_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def may_act_on(self, owner: str | None) -> bool:
        """Cancel a task or read its logs and whatever else its job wrote (the summary's
        quoted line, Ray's messages): its owner or an admin."""
        return self.is_admin or (owner is not None and owner == self.name)

    def may_manage(self, name: str) -> bool:
        """Read a user and create, list or revoke its tokens: that user or an admin."""
        return self.is_admin or name == self.name


# -- tokens ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewToken:
    token_id: str
    secret: str  # the whole token, shown once
    sha256: str


def new_token() -> NewToken:
    """A fresh token (the id may clash with an existing one: the store then retries)."""
    token_id = secrets.token_hex(TOKEN_ID_HEX // 2)
    text = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    if parse_token_id(text) != token_id:  # token_urlsafe(32) is 43 characters
        raise AssertionError("token format drifted from its parser")
    return NewToken(token_id, text, token_hash(text))


def token_hash(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def parse_token_id(text: str) -> str | None:
    """The id of an Argus token, or None when ``text`` is not shaped like one."""
    match = _TOKEN_RE.fullmatch(text)
    return match["id"] if match else None


def display_prefix(token_id: str) -> str:
    """What lists show of a token: its non-secret start, ``argus_<id>``."""
    return f"{TOKEN_PREFIX}{token_id}"


def hash_matches(text: str, stored_sha256: str) -> bool:
    """Constant time in the secret: compares digests of equal length (``text`` is an
    Argus token, so ASCII)."""
    return hmac.compare_digest(token_hash(text).encode(), stored_sha256.encode())


def presentable(text: str) -> bool:
    """Whether a presented token is worth checking at all: printable, valid Unicode (an
    undecodable header arrives with surrogates), not absurdly long. Argus's own tokens
    are ASCII; the bootstrap token may be any printable text.

    Everything else is a wrong token (401) without being hashed or looked up."""
    if not 0 < len(text) <= MAX_TOKEN_LEN or not text.isprintable():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
