"""Retrying a call through transient failures (nothing answered, a 5xx, a 429) until a
deadline, with capped exponential backoff. A dozen lines by hand: see docs/client.md for
why no retry library."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from argus_client.errors import RateLimited, ServerError, is_transient

T = TypeVar("T")
OnRetry = Callable[[Exception, float], None]  # (the error, seconds until the next try)


def backoff(attempt: int, *, first: float = 1.0, cap: float = 30.0) -> float:
    """Seconds before try ``attempt + 1`` (attempt 0 is the first failure): 1, 2, 4... cap."""
    return min(cap, first * 2 ** attempt)


def retrying(call: Callable[[], T], *, deadline: float, clock: Callable[[], float],
             sleep: Callable[[float], None], on_retry: OnRetry | None = None,
             first: float = 1.0, cap: float = 30.0) -> T:
    """``call()``, tried again after each transient failure while time is left before
    ``deadline`` (``clock``'s time). The last failure is raised once none is."""
    failures = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = backoff(failures, first=first, cap=cap)
            if isinstance(exc, RateLimited | ServerError) and exc.retry_after_s is not None:
                delay = max(delay, exc.retry_after_s)
            left = deadline - clock()
            if left <= 0:
                raise
            delay = min(delay, left)
            if on_retry is not None:
                on_retry(exc, delay)
            sleep(delay)
            failures += 1
