"""Requests wake the scheduler loop, at most once per interval."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Protocol


class Wakeable(Protocol):
    def wake(self) -> None: ...


class Waker:
    """Wakes the scheduler loop, at most once per ``min_interval_s``.

    Waking on every request during a burst of submissions would make the loop tick back
    to back (each tick scans the queue), competing with the API for the GIL and the store
    lock. The first wake goes through at once; later ones inside the interval collapse
    into one wake at its end, so no request waits longer than the interval for a tick.
    """

    def __init__(self, target: Wakeable | None, min_interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._target = target
        self._interval = min_interval_s
        self._clock = clock
        self._last = -math.inf
        self._deferred: asyncio.TimerHandle | None = None

    def wake(self) -> None:
        if self._target is None or self._deferred is not None:
            return
        wait = self._last + self._interval - self._clock()
        if wait <= 0:
            self._fire()
        else:
            self._deferred = asyncio.get_running_loop().call_later(wait, self._fire)

    def _fire(self) -> None:
        self._deferred = None
        self._last = self._clock()
        if self._target is not None:
            self._target.wake()

    def close(self) -> None:
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None
