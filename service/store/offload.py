"""Blocking calls from coroutines, on a few dedicated threads, at a low cost per call,
shared fairly between the parties that ask.

``loop.run_in_executor`` with a ``ThreadPoolExecutor`` chains two futures through
callbacks and takes a condition and a semaphore per call; for the API's short SQLite
reads that hand-off cost more server CPU than the read itself (GET one task, in
``bench/bench_api.py``: ~90 us more per request than through an ``Offload``). An
``Offload`` is served by ``threads`` threads that live as long as it does (started by
its first call): a thread takes the next call without any per-call set-up, and hands
the result back to the event loop with one ``call_soon_threadsafe``.

**Fair share.** Each call belongs to a party: the value of ``PARTY`` in the calling
coroutine's context (the API sets it to the caller's user name, or address before it
knows the user). Calls wait in one queue per party, and the threads serve the parties
in turn (round robin), one call each; a party runs at most ``per_party`` calls at once
(default: all threads but one). So one user's heavy calls queue behind each other, and
a call of anyone else waits for at most one call in progress, never for the heavy
user's backlog.

A call whose coroutine was cancelled before the call started is skipped; one already
running runs to its end (a write is never cut in half) and its result is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter, deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]

# who a call is made for (a user name, an address); "" for the service itself
PARTY: ContextVar[str] = ContextVar("argus_party", default="")


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class Offload:
    """``await offload.run(fn, *args)``: ``fn(*args)`` on one of this offload's threads,
    in turn with other parties' calls."""

    def __init__(self, name: str, threads: int = 1, per_party: int | None = None) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.name = name
        self._size = threads
        self.per_party = max(1, threads - 1) if per_party is None else per_party
        if self.per_party < 1:
            raise ValueError(f"per_party must be >= 1, got {per_party}")
        self._cond = threading.Condition()
        self._queues: dict[str, deque[_Call]] = {}  # party -> its waiting calls
        self._turns: deque[str] = deque()  # parties with waiting calls, next served first
        self._busy: Counter[str] = Counter()  # calls running per party
        self._threads: list[threading.Thread] = []
        self._closed = False

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if not self._threads:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        party = PARTY.get()
        with self._cond:
            waiting = self._queues.get(party)
            if waiting is None:
                waiting = self._queues[party] = deque()
                self._turns.append(party)
            waiting.append((loop, future, fn, args))
            self._cond.notify()
        return await future

    def waiting(self) -> int:
        """Calls queued and not started (all parties)."""
        with self._cond:
            return sum(len(q) for q in self._queues.values())

    def close(self, timeout: float | None = 30.0) -> None:
        """Let the queued calls finish, stop the threads; later calls are refused."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            threads, self._threads = self._threads, []
            self._cond.notify_all()
        # From now on ``run`` finds no thread and may start none: it raises.
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def _start(self) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self.name} is closed")
            if self._threads:
                return
            for i in range(self._size):
                thread = threading.Thread(target=self._serve, name=f"{self.name}-{i}",
                                          daemon=True)
                thread.start()
                self._threads.append(thread)

    def _next(self) -> tuple[str, _Call] | None:
        """The next call to run: the first party in turn below its share (then last in
        turn); None once closed with nothing left."""
        with self._cond:
            while True:
                for party in self._turns:
                    if self._busy[party] < self.per_party:
                        break
                else:
                    if self._closed and not self._queues:
                        return None
                    self._cond.wait()
                    continue
                self._turns.remove(party)
                waiting = self._queues[party]
                call = waiting.popleft()
                if waiting:
                    self._turns.append(party)
                else:
                    del self._queues[party]
                self._busy[party] += 1
                return party, call

    def _done(self, party: str) -> None:
        with self._cond:
            self._busy[party] -= 1
            if self._busy[party] <= 0:
                del self._busy[party]
            self._cond.notify()

    def _serve(self) -> None:
        while (picked := self._next()) is not None:
            party, (loop, future, fn, args) = picked
            try:
                if future.cancelled():
                    continue  # nobody waits for it any more and it has not started
                result: Any = None
                error: BaseException | None = None
                try:
                    result = fn(*args)
                except BaseException as exc:  # handed to the awaiting coroutine
                    error = exc
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody to tell
                    loop.call_soon_threadsafe(_settle, future, result, error)
                del result, error
            finally:
                self._done(party)
            del picked, future, fn, args  # keep no reference while waiting
