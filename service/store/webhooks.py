"""Webhooks in the store (``Store.webhooks``): the hooks, and the delivery worker's
claims and outcomes. The outbox rows each event causes are written by
``service.store.outbox.enqueue`` in the event's own transaction."""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Sequence

from service.domain.rows import ClaimedDelivery, DeliveryRow, TryRow, WebhookRow
from service.store.core import Part
from service.store.sql import QUERIES as Q
from service.webhooks.policy import Decision
from service.webhooks.signing import new_secret

MAX_ERROR_CHARS = 500


class TooManyWebhooks(Exception):
    def __init__(self, owner: str, limit: int) -> None:
        super().__init__(f"user {owner} already has {limit} webhooks (the limit); delete "
                         "one first")
        self.owner = owner
        self.limit = limit


class WebhookOwnerUnknown(Exception):
    def __init__(self, owner: str) -> None:
        super().__init__(f"user {owner} not found")
        self.owner = owner


def _hook(r: sqlite3.Row) -> WebhookRow:
    return WebhookRow(hook_id=r["hook_id"], owner=r["owner"], url=r["url"],
                      events=tuple(json.loads(r["events"])), format=r["format"],
                      secret=r["secret"], created_at=r["created_at"])


_DELIVERY_COLUMNS = tuple(f for f in DeliveryRow.__slots__ if f != "tries")  # type: ignore[attr-defined]


def _delivery(r: sqlite3.Row, tries: tuple[TryRow, ...]) -> DeliveryRow:
    return DeliveryRow(**{k: r[k] for k in _DELIVERY_COLUMNS}, tries=tries)


class WebhookStore(Part):
    """Hooks, the outbox's deliveries, the worker's claims and outcomes."""

    # -- hooks -------------------------------------------------------------------------
    def create_webhook(self, *, owner: str, url: str, events: Sequence[str], fmt: str,
                       now: float, max_per_user: int) -> WebhookRow:
        """A new hook with a new secret (returned this once); ``TooManyWebhooks`` past
        ``max_per_user`` (0: no limit), ``WebhookOwnerUnknown`` for a missing user."""
        hook = WebhookRow(hook_id=f"wh_{secrets.token_hex(6)}", owner=owner, url=url,
                          events=tuple(events), format=fmt, secret=new_secret(),
                          created_at=now)
        with self._tx() as conn:
            if conn.execute(Q["get_user"], {"name": owner}).fetchone() is None:
                raise WebhookOwnerUnknown(owner)
            held = conn.execute(Q["webhook_count_owner"], {"owner": owner}).fetchone()["n"]
            if max_per_user and held >= max_per_user:
                raise TooManyWebhooks(owner, max_per_user)
            conn.execute(Q["webhook_insert"], {
                "hook_id": hook.hook_id, "owner": owner, "url": url,
                "events": json.dumps(list(events)), "format": fmt, "secret": hook.secret,
                "now": now})
        return hook

    def get_webhook(self, hook_id: str) -> WebhookRow | None:
        r = self._reader().execute(Q["webhook_get"], {"hook_id": hook_id}).fetchone()
        return None if r is None else _hook(r)

    def list_webhooks(self, owner: str | None) -> list[WebhookRow]:
        """``owner``'s hooks (None: everyone's), oldest first."""
        return [_hook(r) for r in self._reader().execute(Q["webhook_list"], {"owner": owner})]

    def delete_webhook(self, hook_id: str) -> bool:
        """Delete a hook and its deliveries (pending ones are not sent); False: none."""
        with self._tx() as conn:
            return conn.execute(Q["webhook_delete"], {"hook_id": hook_id}).rowcount == 1

    def webhook_deliveries(self, hook_id: str, limit: int) -> list[DeliveryRow]:
        """A hook's newest ``limit`` deliveries, newest first, each with its tries."""
        with self._snapshot() as conn:
            rows = conn.execute(Q["webhook_deliveries_of_hook"],
                                {"hook_id": hook_id, "limit": limit}).fetchall()
            ids = json.dumps([r["delivery_id"] for r in rows])
            tries: dict[int, list[TryRow]] = {}
            for t in conn.execute(Q["webhook_tries_of"], {"ids": ids}):
                tries.setdefault(t["delivery_id"], []).append(
                    TryRow(t["attempt"], t["at"], t["status"], t["error"]))
        return [_delivery(r, tuple(tries.get(r["delivery_id"], ()))) for r in rows]

    # -- the delivery worker ---------------------------------------------------------------
    def next_webhook_due(self) -> float | None:
        """When the earliest pending delivery is due (None: none pending); one indexed
        read that never waits for the writer."""
        return self._reader().execute(Q["webhook_next_due"]).fetchone()["next_at"]

    def claim_webhook_deliveries(self, now: float, limit: int, lease_s: float
                                 ) -> list[ClaimedDelivery]:
        """Take up to ``limit`` due deliveries nobody holds, for ``lease_s`` each."""
        with self._tx() as conn:
            rows = conn.execute(Q["webhook_claim"], {
                "now": now, "limit": limit, "lease_until": now + lease_s}).fetchall()
            hooks = {h: _hook(conn.execute(Q["webhook_get"], {"hook_id": h}).fetchone())
                     for h in {r["hook_id"] for r in rows}}
        return sorted((ClaimedDelivery(
            delivery_id=r["delivery_id"], hook=hooks[r["hook_id"]], event_id=r["event_id"],
            event_type=r["event_type"], event_ts=r["event_ts"], data_json=r["data_json"],
            attempts=r["attempts"]) for r in rows), key=lambda c: c.delivery_id)

    def release_webhook_leases(self) -> int:
        """Start-up: the leases of a process that is gone are void (re-delivered now)."""
        with self._tx() as conn:
            return conn.execute(Q["webhook_release_leases"]).rowcount

    def record_webhook_try(self, claim: ClaimedDelivery, decision: Decision,
                           status: int | None, at: float) -> bool:
        """The outcome of the try ``claim`` was for (begun at ``at``), on the delivery and
        in its tries; False when the row moved on meanwhile (deleted with its hook, or a
        newer try) and nothing is written."""
        ended = decision.next_at if decision.state != "PENDING" else None
        why = None if decision.why is None else decision.why[:MAX_ERROR_CHARS]
        key = {"delivery_id": claim.delivery_id, "attempts": claim.attempts}
        with self._tx() as conn:
            if conn.execute(Q["webhook_record"], {
                    **key, "state": decision.state, "next_at": decision.next_at,
                    "status": status, "error": why, "ended_at": ended}).rowcount != 1:
                return False
            conn.execute(Q["webhook_insert_try"], {**key, "at": at, "status": status,
                                                   "error": why})
            return True

    def prune_webhook_deliveries(self, before: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` deliveries that ended before ``before``."""
        with self._tx() as conn:
            return conn.execute(Q["webhook_prune_ended"],
                                {"before": before, "limit": limit}).rowcount

