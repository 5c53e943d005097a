"""Sign-in attempts: how long a client address or an account must wait (pure, clock in).

Guessing tokens at the sign-in form costs the service a token check and, before this,
a log line per guess. A few failures are free (``FREE_FAILURES``); past them each further
failure doubles the wait (``BASE_S``, 2 x, 4 x ... up to ``MAX_S``) before the next try
from that address, and for that account (the token's public id; the environment's token
is one account). A sign-in that succeeds clears its address and account. While a key
must wait, the form answers 429 with ``Retry-After`` without checking the token.
Failures are counted, and the caller logs them in aggregate (``report``), never one line
each. Memory is bounded: keys idle for ``FORGET_S`` are dropped, and at most
``MAX_KEYS`` are kept (the oldest go first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

FREE_FAILURES = 5
BASE_S = 1.0
MAX_S = 300.0
FORGET_S = 3600.0
MAX_KEYS = 100_000


@dataclass(slots=True)
class _Failures:
    count: int
    blocked_until: float
    last: float


class SignInGuard:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._keys: OrderedDict[str, _Failures] = OrderedDict()
        self._unlogged = 0
        self._reported_at = float("-inf")

    def wait_s(self, *keys: str) -> float:
        """Seconds before any of ``keys`` may try again (0: now)."""
        now = self._clock()
        self._forget(now)
        waits = [f.blocked_until - now for k in keys if (f := self._keys.get(k)) is not None]
        return max([0.0, *waits])

    def failed(self, *keys: str) -> None:
        now = self._clock()
        self._unlogged += 1
        for key in keys:
            entry = self._keys.pop(key, None) or _Failures(0, now, now)
            entry.count += 1
            entry.last = now
            over = entry.count - FREE_FAILURES
            if over > 0:
                entry.blocked_until = now + min(MAX_S, BASE_S * 2 ** min(over - 1, 30))
            self._keys[key] = entry  # most recent last
        while len(self._keys) > MAX_KEYS:
            self._keys.popitem(last=False)

    def succeeded(self, *keys: str) -> None:
        for key in keys:
            self._keys.pop(key, None)

    def report(self, every_s: float) -> int:
        """Failures since the last report, once ``every_s`` has passed since it (one
        aggregate log line); 0 when none or not yet due."""
        now = self._clock()
        if not self._unlogged or now - self._reported_at < every_s:
            return 0
        count, self._unlogged, self._reported_at = self._unlogged, 0, now
        return count

    def _forget(self, now: float) -> None:
        while self._keys:
            key, entry = next(iter(self._keys.items()))
            if now - entry.last < FORGET_S:
                return
            del self._keys[key]
