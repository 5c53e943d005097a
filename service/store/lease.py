"""The service's lease (``Store.lease``; ``service.domain.lease``): take, renew, release.

Every change is one guarded write: the first take inserts (nothing when a row exists), a
later take is guarded by the holder and epoch the caller read, a renewal and a release by
the caller's own holder and epoch. A lost guard raises ``LeaseLost`` with the row there.
"""

from __future__ import annotations

import sqlite3

from service.domain.lease import Instance, LeaseRow, PublishedView
from service.store.core import Part, StoreError
from service.store.sql import QUERIES as Q


class LeaseLost(StoreError):
    """The lease is not (or no longer) the caller's: ``current`` is what is there."""

    def __init__(self, current: LeaseRow | None, message: str) -> None:
        super().__init__(message)
        self.current = current


def _row(r: sqlite3.Row) -> LeaseRow:
    return LeaseRow(name=r["name"], holder=Instance(r["holder"], r["host"], r["pid"],
                                                     r["address"]),
                    epoch=r["epoch"], acquired_at=r["acquired_at"],
                    renewed_at=r["renewed_at"], expires_at=r["expires_at"])


class LeaseStore(Part):
    """The lease rows."""

    def get(self, name: str) -> LeaseRow | None:
        r = self._reader().execute(Q["lease_get"], {"name": name}).fetchone()
        return None if r is None else _row(r)

    def take(self, name: str, me: Instance, seen: LeaseRow | None, now: float,
             ttl_s: float) -> LeaseRow:
        """Take the lease from ``seen`` (None: nobody ever held it); the caller decided it
        may (``domain.lease.free_to_take``). Raises ``LeaseLost`` when the row moved."""
        params = {"name": name, "holder": me.holder, "host": me.host, "pid": me.pid,
                  "address": me.address, "now": now, "expires_at": now + ttl_s}
        with self._tx() as conn:
            if seen is None:
                done = conn.execute(Q["lease_insert"], params).rowcount == 1
            else:
                done = conn.execute(Q["lease_take"], {
                    **params, "seen_epoch": seen.epoch,
                    "seen_holder": seen.holder.holder}).rowcount == 1
            row = conn.execute(Q["lease_get"], {"name": name}).fetchone()
            if not done:
                current = None if row is None else _row(row)
                raise LeaseLost(current, "the lease changed hands while it was being taken")
        return _row(row)

    def renew(self, lease: LeaseRow, now: float, ttl_s: float) -> LeaseRow:
        """Extend ``lease`` (ours). Raises ``LeaseLost`` when another instance took it."""
        with self._tx() as conn:
            cur = conn.execute(Q["lease_renew"], {
                "name": lease.name, "holder": lease.holder.holder, "epoch": lease.epoch,
                "now": now, "expires_at": now + ttl_s})
            if cur.rowcount != 1:
                row = conn.execute(Q["lease_get"], {"name": lease.name}).fetchone()
                raise LeaseLost(None if row is None else _row(row),
                                f"lease {lease.name} epoch {lease.epoch} was taken over")
        return LeaseRow(lease.name, lease.holder, lease.epoch, lease.acquired_at, now,
                        now + ttl_s)

    def release(self, lease: LeaseRow, now: float) -> bool:
        """Let ``lease`` expire now (a clean stop); False when it was no longer ours."""
        with self._tx() as conn:
            return conn.execute(Q["lease_release"], {
                "name": lease.name, "holder": lease.holder.holder, "epoch": lease.epoch,
                "now": now}).rowcount == 1

    def publish_view(self, name: str, view: PublishedView) -> None:
        """Replace the leader's published view (``engine.shared_view``); the caller holds
        the lease (the leader's writes are fenced by its epoch)."""
        with self._tx() as conn:
            conn.execute(Q["leader_view_put"], {
                "name": name, "holder": view.holder, "epoch": view.epoch, "at": view.at,
                "view_json": view.view_json})

    def view_since(self, name: str, at: float) -> PublishedView | None:
        """The published view when it is newer than ``at`` (None: nothing newer)."""
        r = self._reader().execute(Q["leader_view_since"], {"name": name, "at": at}
                                   ).fetchone()
        return None if r is None else PublishedView(r["holder"], r["epoch"], r["at"],
                                                    r["view_json"])
