"""How the service writes a point in time for people: ISO-8601 UTC with milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(ts: float | None) -> str | None:
    """Epoch seconds -> ISO-8601 UTC with milliseconds, e.g. 2025-12-23T14:32:01.000Z."""
    if ts is None:
        return None
    text = datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")
