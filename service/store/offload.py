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

**Time share.** Taking turns bounds how long anyone waits for a thread, not how much of
the process one party takes: a party with a heavy call always in flight on each lane
keeps a thread of each busy, and every other caller's request then waits for the
interpreter lock behind it. A ``TimeShare`` shared by the lanes counts the CPU time each
party's calls took (decayed over ``horizon_s``); while another party was served within
that horizon, a party over ``share`` of one core waits before its next call starts until
it is back under it. Alone, a party takes what it wants; the service's own calls (party
``""``) are never held. A request is its address's party until its token names the user:
addresses are held like users, but a user is never held for an address.

A call whose coroutine was cancelled before the call started is skipped; one already
running runs to its end (a write is never cut in half) and its result is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]

# who a call is made for (a user name, an address); "" for the service itself
PARTY: ContextVar[str] = ContextVar("argus_party", default="")
ADDRESS_PARTY = "@"  # the prefix of an address's party (a request before its token)
SWEEP_EVERY = 4096  # calls between two sweeps of the parties a TimeShare forgets
QUIET_HORIZONS = 20  # a party idle this many horizons has used e**-20 of anything: forgotten


class TimeShare:
    """The CPU time each party's calls used lately, across the lanes that share it (see the
    module docstring); thread-safe."""

    def __init__(self, share: float = 0.25, horizon_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0.0 < share <= 1.0 or horizon_s <= 0.0:
            raise ValueError(f"share must be in (0, 1] and horizon_s > 0, got {share}, "
                             f"{horizon_s}")
        self.share = share
        self.horizon_s = horizon_s
        self.clock = clock
        self._lock = threading.Lock()
        self._used: dict[str, tuple[float, float]] = {}  # party -> (decayed seconds, at)
        self._seen: dict[str, float] = {}  # party -> when it last asked
        self._calls = 0  # since the last sweep of the parties gone quiet

    def seen(self, party: str) -> None:
        """``party`` asks for a call now. The service's own calls hold nobody back, nor
        does a request not yet known to be anyone's (an ``ADDRESS_PARTY``): every user's
        request starts as one, and a user must not wait behind itself."""
        if not party or party.startswith(ADDRESS_PARTY):
            return
        with self._lock:
            self._seen[party] = self.clock()

    def spent(self, party: str, seconds: float) -> None:
        """A call of ``party`` took ``seconds`` of CPU time."""
        if not party:
            return
        with self._lock:
            now = self.clock()
            self._used[party] = (self._decayed(party, now) + seconds, now)
            self._calls += 1
            if self._calls >= SWEEP_EVERY:  # many addresses come and go: forget the quiet
                self._calls = 0
                quiet = now - QUIET_HORIZONS * self.horizon_s
                self._used = {p: (u, at) for p, (u, at) in self._used.items() if at >= quiet}

    def hold_s(self, party: str) -> float:
        """How long ``party`` waits before its next call: 0 unless it is over its share
        while another party was served within the horizon."""
        if not party:
            return 0.0
        allowance = self.share * self.horizon_s
        last = self._used.get(party)  # its use when last charged: only decayed since
        if last is None or last[0] <= allowance:
            return 0.0  # under it then, under it now: no lock, clock or exp (most calls)
        with self._lock:
            now = self.clock()
            used = self._decayed(party, now)
            if used <= allowance:
                return 0.0
            horizon = now - self.horizon_s
            for other, at in list(self._seen.items()):
                if at < horizon:
                    del self._seen[other]  # forgotten: the table stays small
                elif other != party:
                    return self.horizon_s * math.log(used / allowance)
            return 0.0

    def _decayed(self, party: str, now: float) -> float:
        used, at = self._used.get(party, (0.0, now))
        return used * math.exp(-max(0.0, now - at) / self.horizon_s)


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

    def __init__(self, name: str, threads: int = 1, per_party: int | None = None,
                 share: TimeShare | None = None) -> None:
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
        self._share = share  # None: turns only

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if not self._threads:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        party = PARTY.get()
        if self._share is not None:
            self._share.seen(party)
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
        """The next call to run: the first party in turn below its number of calls and
        its time share (then last in turn); None once closed with nothing left."""
        with self._cond:
            while True:
                hold: float | None = None  # the shortest time a held party waits
                for party in self._turns:
                    if self._busy[party] >= self.per_party:
                        continue
                    wait = 0.0 if self._share is None else self._share.hold_s(party)
                    if wait <= 0.0:
                        break
                    hold = wait if hold is None else min(hold, wait)
                else:
                    if self._closed and not self._queues:
                        return None
                    self._cond.wait(hold)
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
        # a call is charged this thread's CPU time since the last charge: the call and the
        # picking of it (a blocked wait costs none), one clock read a call instead of two
        charged = time.thread_time()
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
                if self._share is not None:
                    now = time.thread_time()
                    self._share.spent(party, now - charged)
                    charged = now
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody to tell
                    loop.call_soon_threadsafe(_settle, future, result, error)
                del result, error
            finally:
                self._done(party)
            del picked, future, fn, args  # keep no reference while waiting
