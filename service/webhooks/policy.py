"""What one delivery try's outcome means, and when the next try is due: pure, clock and
randomness passed in.

* 2xx: delivered.
* No answer (timeout, connection refused or reset, DNS failure), 5xx, 429 and 408: retried
  with exponential backoff and jitter (``base_s`` doubling per try, at most ``max_s``, a
  random half to whole of it), or after the receiver's ``Retry-After`` when it asks for
  longer (up to ``max_s``).
* Any other status (3xx: redirects are not followed; 4xx) and a target the SSRF rules
  refuse: given up at once, since trying again cannot help.
* Given up too when ``max_attempts`` tries were made or the next one would come after
  ``max_age_s`` from the event.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    DELIVERED = "DELIVERED"
    RETRY = "RETRY"
    GIVE_UP = "GIVE_UP"


@dataclass(frozen=True, slots=True)
class TryResult:
    """One try: the HTTP status (None: no answer), why it failed, the receiver's
    Retry-After in seconds, and whether the SSRF rules refused the target."""

    status: int | None
    error: str | None = None
    retry_after_s: float | None = None
    blocked: bool = False


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base_s: float = 5.0
    max_s: float = 3600.0
    max_attempts: int = 12
    max_age_s: float = 86400.0


@dataclass(frozen=True, slots=True)
class Decision:
    state: str  # DELIVERED | PENDING (try again at next_at) | FAILED
    next_at: float
    why: str | None  # the failure, as shown to the owner (None: delivered)


RETRYABLE_STATUS = frozenset({408, 429})


def classify(result: TryResult) -> Outcome:
    if result.blocked:
        return Outcome.GIVE_UP
    if result.status is None:
        return Outcome.RETRY
    if 200 <= result.status < 300:
        return Outcome.DELIVERED
    if result.status >= 500 or result.status in RETRYABLE_STATUS:
        return Outcome.RETRY
    return Outcome.GIVE_UP


def backoff_s(attempts: int, policy: RetryPolicy, rand: float) -> float:
    """The wait after ``attempts`` tries (>= 1); ``rand`` in [0, 1) picks the jitter."""
    full = min(policy.max_s, policy.base_s * 2 ** min(attempts - 1, 32))
    return full * (0.5 + 0.5 * rand)


def _why(result: TryResult) -> str:
    if result.error:
        return result.error
    if result.status is not None and 300 <= result.status < 400:
        return f"HTTP {result.status}: redirects are not followed"
    return f"HTTP {result.status}"


def decide(result: TryResult, *, attempts: int, event_ts: float, now: float,
           policy: RetryPolicy, rand: float) -> Decision:
    """After try number ``attempts`` of an event from ``event_ts``: what now."""
    outcome = classify(result)
    if outcome is Outcome.DELIVERED:
        return Decision("DELIVERED", now, None)
    why = _why(result)
    if outcome is Outcome.GIVE_UP:
        return Decision("FAILED", now, f"gave up: {why}")
    if attempts >= policy.max_attempts:
        return Decision("FAILED", now, f"gave up after {attempts} tries: {why}")
    wait = backoff_s(attempts, policy, rand)
    if result.retry_after_s is not None:
        wait = max(wait, min(result.retry_after_s, policy.max_s))
    if now + wait > event_ts + policy.max_age_s:
        return Decision("FAILED", now,
                        f"gave up: the next try would be past {policy.max_age_s:g} s: {why}")
    return Decision("PENDING", now + wait, why)
