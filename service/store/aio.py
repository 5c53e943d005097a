"""The store for coroutines: every call runs on the store's own threads, never on the loop.

A SQLite call blocks: a write waits for the one writer lock (a scheduler tick may hold
it) and then for the commit, and every query costs CPU time. An aiohttp handler awaits
these methods instead, and the event loop serves other requests meanwhile.

* Reads run on ``READ_THREADS`` threads, each with a reading connection of its own
  (``service.store.reads``): a read never waits for a write. One party (a user) uses at
  most all of them but one at a time (``offload``'s fair share), so a user's slow reads
  leave a thread to everyone else.
* Reads whose cost grows with a time window (usage over all history) run on a lane of
  their own (``HEAVY_THREADS``, one call per party at a time): they never hold the
  ordinary read threads, and one user's burst of them runs one at a time.
* Writes run on one thread: they take the store's writer lock in turn anyway, one thread
  keeps a burst of submissions from piling threads up on that lock, and a task id found
  free (``tasks.create_task`` mints it) is still free when it is inserted.

Both are ``offload.Offload`` lanes (a cheaper hand-off than ``run_in_executor``).

There is no method per store call: a caller names the lane and what to run on it,
``await lanes.read(lambda s: s.tasks.get_task(task_id))``, ``await lanes.write(lambda s:
s.tasks.cancel(task_id, now, by))``, ``await lanes.heavy(lambda s: s.usage.usage_summary(
...))``. The fair share follows the caller's party (``offload.PARTY``) on every lane.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from service.store.offload import Offload, TimeShare
from service.store.writer import Store

T = TypeVar("T")

READ_THREADS = 3
HEAVY_THREADS = 2


class AsyncStore:
    """Awaitable access to a ``Store`` (see the module docstring)."""

    def __init__(self, store: Store, *, read_threads: int = READ_THREADS,
                 share: TimeShare | None = None) -> None:
        self._store = store
        self._reads = Offload("argus-store-read", read_threads, per_party=1, share=share)
        self._heavy = Offload("argus-store-heavy", HEAVY_THREADS, per_party=1, share=share)
        self._writes = Offload("argus-store-write", 1)

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

    async def write(self, fn: Callable[[Store], T]) -> T:
        """``fn(store)`` on the write lane: one write at a time, so an id found free
        (``s.tasks.create_task`` minting one) is still free when inserted."""
        return await self._writes.run(fn, self._store)
