"""A task event's payload as the console shows it (pure): one ``key=value`` field per key,
in the payload's order. A non-empty string is shown as it is (``reason=cancelled by
alice``); any other value as compact JSON (``max_runtime_s=null``, ``ok=true``,
``after={"ok": ["t-1"]}``), so what a reader sees is what the API returns, never a Python
repr. The ``argus events`` CLI renders the same payloads in its own package: the client
and the server share no code, only the API."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def value_text(value: Any) -> str:
    """One payload value: a non-empty string as is, anything else as JSON."""
    if isinstance(value, str) and value:
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def payload_fields(payload: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``[(key, value text)]`` of an event's payload, in its order (none for no payload)."""
    return [(str(key), value_text(value)) for key, value in (payload or {}).items()]
