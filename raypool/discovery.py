"""head.json on shared storage: written atomically, read tolerantly.

The record's format and the freshness rule are in :mod:`raypool.headrecord`. Only the head
publisher writes, and only while its head is healthy; it never deletes the file (a delete
could remove a record another head just wrote): readers see it go stale.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from raypool.atomicfile import write_atomic
from raypool.headrecord import HeadRecord, parse_record

MAX_RECORD_BYTES = 65536


def write_record(path: str, record: HeadRecord) -> None:
    """Write atomically and durably (the directory is created when missing)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomic(path, record.to_json())


@dataclass(frozen=True)
class ReadResult:
    """A parsed record with its file mtime, or ``record=None`` and the reason why not."""

    record: HeadRecord | None
    mtime: float
    reason: str


def read_record(path: str, cluster_name: str) -> ReadResult:
    """Read head.json; never raises for a missing, partial, garbage or foreign file."""
    try:
        # never through a link, never blocked by a FIFO: the head writes it by rename
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return ReadResult(None, 0.0, "cannot read head.json: not a regular file")
            mtime = st.st_mtime
            text = f.read(MAX_RECORD_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        return ReadResult(None, 0.0, "no head.json")
    except OSError as exc:
        return ReadResult(None, 0.0, f"cannot read head.json: {exc.strerror}")
    try:
        return ReadResult(parse_record(text, cluster_name), mtime, "ok")
    except ValueError as exc:
        return ReadResult(None, mtime, f"unusable head.json: {exc}")
