"""Numbers a client writes in a query string or a cursor: strict, and range-checked.

Python's ``int()`` is generous: it takes ``" 5 "``, ``"1_0"``, full-width digits
(U+FF11), Arabic-Indic ones (U+0661 U+0660), and any number of digits. A query integer here is ASCII
digits only, at most 19 of them, and must fall in the caller's range before it goes
anywhere; SQLite's integers stop at ``2**63 - 1`` (``SQLITE_MAX_INT``), so no number that
passed can overflow a query parameter.
"""

from __future__ import annotations

import re
from typing import Any

from service.domain.reasons import WaitKind, parse_kind
from service.jobspec.model import LABEL_FILTER, MAX_LABEL_VALUE

SQLITE_MAX_INT = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")  # [0-9], not \d: \d matches every script's digits


def parse_uint(raw: str, lo: int = 0, hi: int = SQLITE_MAX_INT) -> int | None:
    """``raw`` as an integer in ``lo..hi``; None unless it is 1-19 ASCII digits in range."""
    if not _DIGITS.fullmatch(raw):
        return None
    value = int(raw)
    return value if lo <= value <= hi else None


def parse_reason(raw: str | None, errors: list[dict[str, Any]]) -> WaitKind | None:
    """The ``reason`` filter of the task lists: a ``reasons.WaitKind`` value (a 400 in
    ``errors`` otherwise); None when absent or empty."""
    if not raw:
        return None
    try:
        return parse_kind(raw)
    except ValueError as exc:
        errors.append({"field": "reason", "message": str(exc)})
        return None


_LABEL_FILTER = re.compile(LABEL_FILTER)


def parse_labels(raws: list[str], errors: list[dict[str, Any]]) -> dict[str, str]:
    """The ``label`` filters of the task list (repeatable, all must hold): each
    ``key=value`` with a JobSpec label's key and value (a 400 in ``errors`` otherwise);
    one key asked twice with two values matches nothing, as asked."""
    out: dict[str, str] = {}
    for raw in raws:
        if _LABEL_FILTER.match(raw) is None:
            errors.append({"field": "label", "message": (
                f"must be key=value (a label's key, a value of at most {MAX_LABEL_VALUE} "
                f"printable characters), got {raw[:80]!r}")})
            continue
        key, _, value = raw.partition("=")  # a key has no '='
        if out.setdefault(key, value) != value:
            out[key] = "\x00"  # two values for one key: no task has both
    return out
