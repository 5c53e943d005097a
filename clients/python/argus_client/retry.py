"""Retrying a call through transient failures (nothing answered, a 5xx, a 429) until a
deadline, with capped exponential backoff. A dozen lines by hand: see docs/client.md for
why no retry library.

A submit retries on fewer failures (``submit_transient``) and a bounded number of times:
it carries an ``Idempotency-Key``, so a retry of a submit that did land is answered with
the task it created, never a second one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from argus_client.errors import ApiError, ArgusConnectionError, Conflict, ServerError, is_transient

T = TypeVar("T")
OnRetry = Callable[[Exception, float], None]  # (the error, seconds until the next try)
KEY_IN_USE = "idempotency_key_in_use"  # the API's 409: the first try is still in progress


def backoff(attempt: int, *, first: float = 1.0, cap: float = 30.0) -> float:
    """Seconds before try ``attempt + 1`` (attempt 0 is the first failure): 1, 2, 4... cap."""
    return min(cap, first * 2 ** attempt)


def submit_transient(exc: BaseException) -> bool:
    """Worth sending a submit again with its key: nothing answered (refused, reset, a
    timeout, a proxy's 502/503/504), the service's 503 (restarting, its database out),
    or its 409 for the key whose first try it is still working on. Not a 429 (a quota:
    trying again changes nothing soon) nor another 5xx."""
    if isinstance(exc, ArgusConnectionError):
        return True
    if isinstance(exc, ServerError):
        return exc.status == 503
    return isinstance(exc, Conflict) and exc.code == KEY_IN_USE


def retrying(call: Callable[[], T], *, deadline: float, clock: Callable[[], float],
             sleep: Callable[[float], None], on_retry: OnRetry | None = None,
             first: float = 1.0, cap: float = 30.0,
             transient: Callable[[BaseException], bool] = is_transient,
             attempts: int | None = None) -> T:
    """``call()``, tried again after each ``transient`` failure while time is left before
    ``deadline`` (``clock``'s time) and, with ``attempts``, at most that many tries in
    all. The last failure is raised once none is left. A ``Retry-After`` the service
    sent is waited at least (never past the deadline)."""
    failures = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not transient(exc):
                raise
            if attempts is not None and failures + 1 >= attempts:
                raise
            delay = backoff(failures, first=first, cap=cap)
            if isinstance(exc, ApiError) and exc.retry_after_s is not None:
                delay = max(delay, exc.retry_after_s)
            left = deadline - clock()
            if left <= 0:
                raise
            delay = min(delay, left)
            if on_retry is not None:
                on_retry(exc, delay)
            sleep(delay)
            failures += 1
