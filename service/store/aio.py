"""The store for coroutines: every call runs on the store's own threads, never on the loop.

A SQLite call blocks: a write waits for the one writer lock (a scheduler tick may hold
it) and then for the commit, and every query costs CPU time. An aiohttp handler awaits
these methods instead, and the event loop serves other requests meanwhile.

* Reads run on ``READ_THREADS`` threads, each with a reading connection of its own
  (``service.store.reads``): a read never waits for a write. On SQLite one party (a user)
  runs one read at a time (``offload``'s fair share): a read is a library call that holds
  the interpreter lock for most of its time, so a second thread would buy that user
  little and cost everyone else their share. On PostgreSQL a read is mostly a wait for the
  server's answer, during which the thread holds no lock at all: there the lane has
  ``PG_READ_THREADS`` threads and a party runs up to ``PG_READ_PER_PARTY`` reads at once,
  always leaving one thread to everyone else. (One read at a time made one user's page
  loads a queue of round trips: GET one task by 50 connections of one user, 668 req/s on
  PostgreSQL with 3 threads and one a party, 1,402 with 6 and 5; ``bench/bench_api.py``.)
* Reads whose cost grows with a time window (usage over all history) run on a lane of
  their own (``HEAVY_THREADS``, one call per party at a time): they never hold the
  ordinary read threads, and one user's burst of them runs one at a time.
* Writes run on one thread: they take the store's writer lock in turn anyway, and one
  thread keeps a burst of submissions from piling threads up on that lock. Submits that
  queue up meanwhile commit together, one transaction for a group of them
  (``service.store.grouped``).

Both are ``offload.Offload`` lanes (a cheaper hand-off than ``run_in_executor``).

There is no method per store call: a caller names the lane and what to run on it,
``await lanes.read(lambda s: s.tasks.get_task(task_id))``, ``await lanes.write(lambda s:
s.tasks.cancel(task_id, now, by))``, ``await lanes.heavy(lambda s: s.usage.usage_summary(
...))``. The fair share follows the caller's party (``offload.PARTY``) on every lane.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TypeVar

from service.store.grouped import WriteGroups
from service.store.offload import PARTY, Offload, TimeShare
from service.store.writer import Store

T = TypeVar("T")

READ_THREADS = 3
PG_READ_THREADS = 6
PG_READ_PER_PARTY = PG_READ_THREADS - 1
HEAVY_THREADS = 2


def read_lane_shape(engine_name: str) -> tuple[int, int]:
    """The read lane's threads and the reads one party may run at once, by engine (see
    the module docstring)."""
    if engine_name == "sqlite":
        return READ_THREADS, 1
    return PG_READ_THREADS, PG_READ_PER_PARTY


class AsyncStore:
    """Awaitable access to a ``Store`` (see the module docstring)."""

    def __init__(self, store: Store, *, share: TimeShare | None = None) -> None:
        self._store = store
        threads, self.read_per_party = read_lane_shape(store.engine_name)
        self._reads = Offload("argus-store-read", threads, per_party=self.read_per_party,
                              share=share)
        self._heavy = Offload("argus-store-heavy", HEAVY_THREADS, per_party=1, share=share)
        self._writes = Offload("argus-store-write", 1)
        self._groups = WriteGroups(store.core.together)

    def close(self) -> None:
        """Refuse new calls and let the queued ones finish (the ``Store`` stays open)."""
        self._reads.close()
        self._heavy.close()
        self._writes.close()

    async def read(self, fn: Callable[[Store], T]) -> T:
        """``fn(store)`` on the read lane: ``await lanes.read(lambda s:
        s.tasks.get_task(task_id))``."""
        return await self._reads.run(fn, self._store)

    async def heavy(self, fn: Callable[[Store], T]) -> T:
        """``fn(store)`` on the heavy lane: reads whose cost grows with a time window
        (``s.usage.usage_summary``)."""
        return await self._heavy.run(fn, self._store)

    async def write(self, fn: Callable[[Store], T], *, grouped: bool = False) -> T:
        """``fn(store)`` on the write lane: one write at a time (``await lanes.write(lambda
        s: s.tasks.cancel(task_id, now, by))``).

        ``grouped``: ``fn`` may commit in one transaction with the other grouped writes
        queued meanwhile (``service.store.grouped``: it does all its work in one
        transaction and reads nothing after it; a submit)."""
        if not grouped:
            return await self._writes.run(fn, self._store)
        entry = self._groups.add(functools.partial(fn, self._store), PARTY.get())
        try:
            await self._writes.run(self._groups.flush, entry)
        except asyncio.CancelledError:
            self._groups.discard(entry)  # not taken yet: it never runs
            raise
        assert entry.outcome is not None  # run by this flush or an earlier one
        return entry.outcome.get()
