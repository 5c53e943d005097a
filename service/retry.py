"""Retry policy for retryable attempt failures (pure).

``attempt_no`` is always the number of the attempt that just failed (1-based).
"""

from __future__ import annotations

from service.config import SchedulerSettings


def delay(attempt_no: int, sched: SchedulerSettings) -> float:
    """Seconds to wait before the next attempt after attempt ``attempt_no`` failed.

    ``fixed``: always ``retry_interval_s``. ``exponential``: ``retry_interval_s`` doubled
    for every earlier failure, capped at ``retry_max_interval_s``.
    """
    if attempt_no < 1:
        raise ValueError(f"attempt_no must be >= 1, got {attempt_no}")
    base = sched.retry_interval_s
    if sched.retry_backoff == "fixed":
        return base
    if sched.retry_backoff == "exponential":
        # Cap the exponent too, so a long-lived task cannot overflow the float.
        return min(sched.retry_max_interval_s, base * 2.0 ** min(attempt_no - 1, 60))
    raise ValueError(f"unknown retry_backoff {sched.retry_backoff!r}")


def may_retry(attempt_no: int, max_attempts: int | None) -> bool:
    """True when another attempt is allowed after attempt ``attempt_no`` failed."""
    return max_attempts is None or attempt_no < max_attempts
