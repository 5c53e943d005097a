"""One deadline for an operation made of several waits, so the operation as a whole, not
each wait, is bounded; and the polling loop that waits against it. The clock and the
sleep are parameters, so tests run them on a fake clock without sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class Deadline:
    """A point on a monotonic clock that every wait of an operation counts down to."""

    at: float
    length_s: float  # how long it was when set, for messages
    clock: Clock = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Clock = time.monotonic) -> Deadline:
        return cls(clock() + seconds, seconds, clock)

    def left(self, cap: float = float("inf")) -> float:
        """Seconds until the deadline (never negative), at most ``cap``."""
        return max(0.0, min(cap, self.at - self.clock()))

    def passed(self) -> bool:
        return self.clock() >= self.at

    def capped(self, seconds: float) -> Deadline:
        """The earlier of this deadline and ``seconds`` from now: a step's own limit that
        still cannot outlast the whole operation."""
        left = self.left(cap=seconds)
        return Deadline(self.clock() + left, left, self.clock)


def poll(check: Callable[[], T | None], deadline: Deadline, interval_s: float,
         sleep: Sleep = time.sleep) -> T | None:
    """Call ``check`` until it returns a value (returned) or the deadline passes (None).
    ``check`` runs at least once; no sleep runs past the deadline."""
    while True:
        value = check()
        if value is not None:
            return value
        if deadline.passed():
            return None
        sleep(deadline.left(cap=interval_s))
