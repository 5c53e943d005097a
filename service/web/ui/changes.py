"""One watcher of the tasks' change sequence for the whole process.

Every open console page holds a live stream (``live``) that must learn when a task was
created or moved. Rather than each stream reading the database once a second, one
``ChangeFeed`` per process reads the change sequence (``Store.change_seq``: one row by its
key, the triggers of migration 0007 keep it) every ``poll_s`` while any stream waits, and
wakes every stream waiting on it. An open stream then costs nothing until something
changes, however many are open. A page render reads the sequence itself (``refresh``:
one row by key) as the marker its stream starts from: never newer than the data the page
reads after it, so no change is lost, and not older either, so a fresh page is not
refreshed again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class ChangeFeed:
    """The last change sequence seen, and an event per value that wakes its waiters."""

    def __init__(self, read: Callable[[], Awaitable[int]], poll_s: float = 1.0) -> None:
        self._read = read
        self.poll_s = poll_s
        self._seq: int | None = None
        self._changed = asyncio.Event()
        self._waiters = 0
        self.reads = 0  # database reads made (the benchmark and tests count them)

    async def refresh(self) -> int:
        """Read the sequence once; wake every waiter when it moved."""
        seq = await self._read()
        self.reads += 1
        if seq != self._seq:
            self._seq = seq
            self.wake()
        return seq

    def wake(self) -> None:
        """Wake every waiter (a change, or the service closing)."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def latest(self) -> int:
        """The last value seen while the feed polls (someone waits); else read now."""
        if self._seq is not None and self._waiters:
            return self._seq
        return await self.refresh()

    async def wait_past(self, seq: int, timeout: float) -> int:
        """The sequence once it differs from ``seq``, or after at most ``timeout`` seconds
        (then possibly still ``seq``), or at once when woken."""
        current = await self.latest()
        if current != seq:
            return current
        changed = self._changed
        self._waiters += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout)
        finally:
            self._waiters -= 1
        return self._seq if self._seq is not None else seq

    async def run(self, closing: asyncio.Event) -> None:
        """Poll while anyone waits, until ``closing`` is set; then wake every waiter. A
        failed read (the database unavailable) is logged and tried again at the next
        interval."""
        failing = False
        while not closing.is_set():
            try:
                if self._waiters:
                    await self.refresh()
                failing = False
            except Exception as exc:
                if not failing:
                    log.warning("reading the change sequence failed: %s", exc)
                failing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), self.poll_s)
        self.wake()
