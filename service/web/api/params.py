"""Numbers a client writes in a query string or a cursor: strict, and range-checked.

Python's ``int()`` is generous: it takes ``" 5 "``, ``"1_0"``, full-width digits
(U+FF11), Arabic-Indic ones (U+0661 U+0660), and any number of digits. A query integer here is ASCII
digits only, at most 19 of them, and must fall in the caller's range before it goes
anywhere; SQLite's integers stop at ``2**63 - 1`` (``SQLITE_MAX_INT``), so no number that
passed can overflow a query parameter.
"""

from __future__ import annotations

import re

SQLITE_MAX_INT = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")  # [0-9], not \d: \d matches every script's digits


def parse_uint(raw: str, lo: int = 0, hi: int = SQLITE_MAX_INT) -> int | None:
    """``raw`` as an integer in ``lo..hi``; None unless it is 1-19 ASCII digits in range."""
    if not _DIGITS.fullmatch(raw):
        return None
    value = int(raw)
    return value if lo <= value <= hi else None
