"""Inside a submit's write transaction: its ``Idempotency-Key`` (``policy.idempotency``).

``check_key`` runs first in the transaction: a key seen before with the same fingerprint
raises ``KeyReplayed`` with what the first request created (nothing is written), with
another fingerprint ``KeyMismatch``. ``record_key`` runs last, in the same transaction as
the inserts, so a key never exists without what it created nor the other way round; it
purges a batch of keys past their retention as it goes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from service.policy.idempotency import PURGE_BATCH, RETENTION_S, IdemKey
from service.store.core import StoreError
from service.store.sql import QUERIES as Q


class KeyReplayed(StoreError):
    """The key was used before for the same request: ``result`` is what it created."""

    def __init__(self, key: IdemKey, result: Mapping[str, Any]) -> None:
        super().__init__(f"idempotency key {key.key!r} of {key.user} was used already")
        self.key = key
        self.result = dict(result)


class KeyMismatch(StoreError):
    """The key was used before for another request (another body or route)."""

    def __init__(self, key: IdemKey, created_at: float) -> None:
        super().__init__(f"idempotency key {key.key!r} was used for another request")
        self.key = key
        self.created_at = created_at


def check_key(conn: sqlite3.Connection, key: IdemKey | None) -> None:
    """Nothing when ``key`` is None or new; else ``KeyReplayed`` or ``KeyMismatch``."""
    if key is None:
        return
    row = conn.execute(Q["idempotency_key"], {"user": key.user, "key": key.key}).fetchone()
    if row is None:
        return
    if row["fingerprint"] != key.fingerprint:
        raise KeyMismatch(key, row["created_at"])
    raise KeyReplayed(key, json.loads(row["result_json"]))


def record_key(conn: sqlite3.Connection, key: IdemKey | None, result: Mapping[str, Any],
               now: float) -> None:
    """Keep ``key`` with ``result`` (what its request created), and purge a batch of keys
    older than the retention."""
    if key is None:
        return
    conn.execute(Q["purge_idempotency_keys"],
                 {"before": now - RETENTION_S, "limit": PURGE_BATCH})
    conn.execute(Q["insert_idempotency_key"], {
        "user": key.user, "key": key.key, "fingerprint": key.fingerprint,
        "result_json": json.dumps(dict(result), sort_keys=True), "created_at": now})
