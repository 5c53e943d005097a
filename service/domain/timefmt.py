"""How the service writes a point in time for people (ISO-8601 UTC with milliseconds),
and reads one back; and a span of time (``duration``)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

# Times people may give: from the epoch to the end of year 9999 (what datetime can show).
MAX_EPOCH_S = 253_402_300_799.0


def iso(ts: float | None) -> str | None:
    """Epoch seconds -> ISO-8601 UTC with milliseconds, e.g. 2025-12-23T14:32:01.000Z."""
    if ts is None:
        return None
    text = datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def parse_time(text: str) -> float:
    """Epoch seconds from ISO-8601 (``2025-12-23T14:32:01Z``, an offset, or no zone =
    UTC; a date alone is its midnight UTC) or from a plain number of epoch seconds.

    ValueError, with the reason, for anything else or a time outside 1970..9999."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"not an ISO-8601 time or epoch seconds: {text[:40]!r}") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        value = parsed.timestamp()
    if not math.isfinite(value) or not 0 <= value <= MAX_EPOCH_S:
        raise ValueError(f"{text[:40]!r} is outside 1970-01-01 .. 9999-12-31")
    return value


def duration(seconds: float | None) -> str:
    """``42s``, ``5m 03s``, ``2h 05m``, ``3d 04h`` (the console's and the CLI's)."""
    if seconds is None:
        return ""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"
