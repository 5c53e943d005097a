"""Polling with a deadline for the runtime tier (never sleep and hope)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def poll(predicate: Callable[[], object], timeout_s: float, what: str,
         explain: Callable[[], str] | None = None) -> float:
    """Poll until true; returns the seconds it took; fails the test at the deadline, with
    ``explain()`` (what the test knows) in the message."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.25)
    pytest.fail(f"not within {timeout_s:g}s: {what}" + (f"\n{explain()}" if explain else ""))
