"""Text from elsewhere (a job's log) made safe to print on a terminal (pure).

A driver log is written by the user's code: it may hold escape sequences that retitle the
terminal, move the cursor and rewrite what is on screen, or worse on some terminals. The
CLI prints logs to a terminal through ``safe_for_terminal``: colour codes (SGR, common in
Ray's and verl's output) are dropped, every other control character is shown as an escape
(``\\x1b``, ``\\r``, ``\\x9b``), and only newlines and tabs pass as they are.
"""

from __future__ import annotations

import re

_SGR = re.compile(r"\x1b\[[0-9;]*m")  # colours and text style only
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but \t \n, DEL, C1


def safe_for_terminal(text: str) -> str:
    """``text`` with colour codes removed and other control characters escaped."""
    text = _SGR.sub("", text).replace("\r\n", "\n")
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
