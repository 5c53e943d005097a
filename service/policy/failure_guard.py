"""Failed token checks: how long a client address or an account must wait (pure, clock in).

Guessing tokens costs the service a token check (a store read for an unknown token id)
and, before this, a log line per guess. Two callers keep one ``FailureGuard`` each: the
console's sign-in form (keyed by address and by the token's public id) and the API's
bearer check (keyed by address). A few failures are free (``Backoff.free_failures``);
past them each further failure doubles the wait (``base_s``, 2 x, 4 x ... up to
``max_s``) before the next try from that key. While a key must wait, the caller answers
429 with ``Retry-After`` without checking the token the store's way. Failures are
counted, and the caller logs them in aggregate (``report``), never one line each.
Memory is bounded: keys idle for ``FORGET_S`` are dropped, and at most ``max_keys`` are
kept (the oldest go first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

FORGET_S = 3600.0


@dataclass(frozen=True, slots=True)
class Backoff:
    free_failures: int
    base_s: float
    max_s: float
    max_keys: int = 100_000


# the console's form: a person types a token, a few mistakes are plenty
SIGN_IN = Backoff(free_failures=5, base_s=1.0, max_s=300.0)
# the API: scripts retry on their own, and a rotated token fails a burst of calls at once
API = Backoff(free_failures=20, base_s=1.0, max_s=60.0)


@dataclass(slots=True)
class _Failures:
    count: int
    blocked_until: float
    last: float


class FailureGuard:
    def __init__(self, clock: Callable[[], float], backoff: Backoff = SIGN_IN) -> None:
        self._clock = clock
        self._backoff = backoff
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
            over = entry.count - self._backoff.free_failures
            if over > 0:
                entry.blocked_until = now + min(
                    self._backoff.max_s, self._backoff.base_s * 2 ** min(over - 1, 30))
            self._keys[key] = entry  # most recent last
        while len(self._keys) > self._backoff.max_keys:
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
