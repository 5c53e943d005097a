"""Holding the service's lease (issue 54; ``service.domain.lease``, ``Store.lease``): one
instance per SQLite database, the leader election on PostgreSQL.

``LeaseKeeper.acquire`` runs at start, before any loop. On SQLite (``standby=False``) it
takes the ``leader`` lease or raises ``LeaseHeld`` with a line naming the instance that
holds it. On PostgreSQL (``standby=True``) an instance that finds the lease held starts
as a standby: it serves the API, and ``start``'s thread reads the lease every
``poll_s``; once it is free (expired, or its holder's pid gone from this host) it takes
it and ``on_elected`` starts the leader's singletons. On SQLite a lease that is not
renewed (its holder gone on another host) is waited for until it expires, at most its
TTL; one that is renewed meanwhile refuses at once. ``start`` renews it every third of
its TTL in a thread; when another instance took it over (only possible after this one
missed its renewals for a whole TTL: a stopped process, a database unwritable that long)
``on_lost`` is called once (the service then stops: its supervisor restarts it, and it
waits for the lease, or stands by, like any second instance); so does ``lose``, called by
a fenced write that found the lease taken over. ``stop`` releases it, so the next start
takes it at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from secrets import token_hex

from service.domain.lease import LEADER, Instance, LeaseRow, free_to_take, held_by
from service.store.db import StorageUnavailable, log_failure
from service.store.lease import LeaseLost, LeaseStore

log = logging.getLogger(__name__)


class LeaseHeld(Exception):
    """Another live instance holds the lease (the message names it)."""


def this_instance(port: int) -> Instance:
    """This process: a holder id unique per start, its host, pid and ``host:port``."""
    host = socket.gethostname()
    return Instance(holder=f"{host}:{os.getpid()}:{token_hex(3)}", host=host,
                    pid=os.getpid(), address=f"{host}:{port}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


class LeaseKeeper:
    """Takes, renews and releases this instance's lease (see the module docstring)."""

    def __init__(self, leases: LeaseStore, me: Instance, ttl_s: float, *,
                 standby: bool = False, poll_s: float = 1.0,
                 on_elected: Callable[[LeaseRow], None] | None = None,
                 clock: Callable[[], float] = time.time,
                 wait: Callable[[float], object] | None = None,
                 alive: Callable[[int], bool] = pid_alive,
                 on_lost: Callable[[str], None] | None = None) -> None:
        self.leases = leases
        self.me = me
        self.ttl_s = ttl_s
        self.standby = standby
        self.poll_s = min(poll_s, ttl_s / 3)
        self.on_elected = on_elected
        # called after each poll that left this instance a standby (the leader's view:
        # engine.shared_view); its errors are logged, never the keeper's end
        self.standing_by: Callable[[], object] | None = None
        self.seen: LeaseRow | None = None  # the lease as last read: who leads
        self.clock = clock
        self._stop = threading.Event()
        self.wait = wait or self._stop.wait
        self.alive = alive
        self.on_lost = on_lost
        self.lease: LeaseRow | None = None
        self.lost: str | None = None  # why the lease was lost, once it was
        self._thread: threading.Thread | None = None

    def _holder_alive(self, row: LeaseRow | None) -> bool | None:
        if row is None or row.holder.host != self.me.host:
            return None
        if row.holder.pid == self.me.pid:
            return False  # a former start of this very process id (a container restart)
        return self.alive(row.holder.pid)

    @property
    def leading(self) -> bool:
        """Whether this instance holds the lease (and has not lost it)."""
        return self.lease is not None and self.lost is None

    def acquire(self) -> LeaseRow | None:
        """Take the lease. SQLite: wait at most one TTL for one that is not renewed; raise
        ``LeaseHeld`` naming the holder of a live one. Standby allowed: one try, None when
        another instance leads (this one is a standby)."""
        if self.standby:
            if not self.try_take() and self.seen is not None:
                log.info("standing by: %s leads (epoch %d); this instance serves the API "
                         "and takes over when its lease is free", self.seen.holder.holder,
                         self.seen.epoch)
            return self.lease
        deadline = self.clock() + self.ttl_s + 1.0
        renewed: float | None = None
        while not self.try_take():
            row, now = self.seen, self.clock()
            if row is None:
                continue  # it moved as it was being taken: read again
            if (renewed is not None and row.renewed_at != renewed) or \
                    row.expires_at > deadline:
                raise LeaseHeld(held_by(row, now))
            renewed = row.renewed_at
            self.wait(min(self.ttl_s / 3, max(0.05, row.expires_at - now)))
        return self.lease

    def try_take(self) -> bool:
        """Take the lease if it is free now (a standby's poll); True when this instance
        leads from now on."""
        now = self.clock()
        row = self.leases.get(LEADER)
        self.seen = row
        if not free_to_take(row, self.me, now, self._holder_alive(row)):
            return False
        try:
            self.lease = self.seen = self.leases.take(LEADER, self.me, row, now, self.ttl_s)
        except LeaseLost as exc:
            self.seen = exc.current
            return False
        log.info("took the database lease (epoch %d) as %s%s: this instance leads",
                 self.lease.epoch, self.me.holder,
                 "" if row is None else f", after {row.holder.holder}")
        return True

    def renew_once(self) -> bool:
        """One renewal; False (and ``on_lost``) when the lease was taken over."""
        assert self.lease is not None
        try:
            self.lease = self.seen = self.leases.renew(self.lease, self.clock(), self.ttl_s)
        except StorageUnavailable as exc:
            log.warning("could not renew the database lease: %s", exc)
            return True  # the guard holds on the next try unless someone took it
        except LeaseLost as exc:
            holder = exc.current.holder.holder if exc.current is not None else "nobody"
            self.lose(f"the database lease was taken over by {holder}")
            return False
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s if self.lease is None else self.ttl_s / 3):
            if self.lease is not None:
                if not self.renew_once():
                    return
                continue
            try:
                elected = self.try_take()
            except StorageUnavailable as exc:
                log.warning("could not read the database lease: %s", exc)
                continue
            if elected and self.on_elected is not None:
                assert self.lease is not None
                self.on_elected(self.lease)
            elif not elected:
                self._stand_by()

    def _stand_by(self) -> None:
        if self.standing_by is None:
            return
        try:
            self.standing_by()
        except Exception as exc:
            log_failure(log, "following the leader's view", exc)

    def lose(self, why: str) -> None:
        """A fenced write found the lease taken over: the same end as a lost renewal."""
        if self.lost is None:
            self.lost = why
            log.critical("%s: this instance stops", why)
            if self.on_lost is not None:
                self.on_lost(why)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and release the lease (a clean stop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        if self.lease is not None and self.lost is None:
            try:
                self.leases.release(self.lease, self.clock())
            except StorageUnavailable as exc:
                log.warning("could not release the database lease: %s", exc)
