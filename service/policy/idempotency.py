"""Idempotent submits (``Idempotency-Key``, draft-ietf-httpapi-idempotency-key-header): which
keys are valid, what makes two requests "the same", how long a key is kept.

A key is a user's: the same key from two users are two keys. Two requests with one key
are the same request when their fingerprints are equal: a hash of the route and the
canonical body (a JSON body re-encoded with sorted keys and no spaces, so key order and
layout do not matter; a YAML body as sent, line endings normalised). The store keeps a
key with what its request created (``service.store.idempotency``) for ``RETENTION_S``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"  # on an answer replayed for a key seen before
MAX_KEY_LEN = 255
RETENTION_S = 24 * 3600.0  # a key is kept at least this long, then purged
PURGE_BATCH = 100  # expired keys purged per new key (more than one: the purge keeps up)
IN_USE_RETRY_S = 1  # Retry-After of a 409 for a key whose first request is not done yet


@dataclass(frozen=True, slots=True)
class IdemKey:
    """A submit's key as the store keeps it: whose, the key, the request's fingerprint."""

    user: str
    key: str
    fingerprint: str


def parse_key(raw: str) -> str:
    """The key of an ``Idempotency-Key`` header value; ``ValueError`` saying what is wrong
    with it. The draft sends the key as a structured-field string (``"8e03978e-..."``);
    a bare token is taken as it is: ``"abc"`` and ``abc`` are the same key."""
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
        if '"' in value or "\\" in value:
            raise ValueError("a quoted key may not contain a quote or a backslash")
    if not value:
        raise ValueError("the key is empty")
    if len(value) > MAX_KEY_LEN:
        raise ValueError(f"the key is {len(value)} characters, over the limit of "
                         f"{MAX_KEY_LEN}")
    if not all(" " <= c <= "~" for c in value):
        raise ValueError("the key must be printable ASCII (a UUID is a good key)")
    return value


def canonical_body(text: str, *, as_json: bool) -> str:
    """The body as compared: a JSON document re-encoded canonically (a body that is not
    JSON as it is: it is refused anyway), YAML with its line endings normalised."""
    if as_json:
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return text
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("\r\n", "\n").strip()


def fingerprint(route: str, text: str, *, as_json: bool) -> str:
    """The hash two requests of one key are compared by (``route``: which submit)."""
    kind = "json" if as_json else "yaml"
    data = f"{route}\n{kind}\n{canonical_body(text, as_json=as_json)}"
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()
