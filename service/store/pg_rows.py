"""What the store's PostgreSQL connections (``service.store.pg``) return: rows read by
column name like ``sqlite3.Row`` and by position like a tuple, a cursor with the part of
``sqlite3.Cursor`` the store uses, and the value conversions that make PostgreSQL's values
read as SQLite gives them (an integral ``numeric`` an int, a bool written as 0 or 1)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.adapt import Dumper, Loader


class Row(tuple):
    """A result row: ``row["name"]`` like ``sqlite3.Row``, ``row[0]`` and unpacking like a
    tuple."""

    _index: dict[str, int]

    def __getitem__(self, key):  # type: ignore[no-untyped-def, override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


_ROW_CLASSES: dict[tuple[str, ...], type[Row]] = {}


def row_factory(cursor: psycopg.Cursor[Any]):  # type: ignore[no-untyped-def]
    """A ``Row`` class per column list, made once (the names read from the result itself:
    ``cursor.description`` builds an object per column on every call)."""
    result = cursor.pgresult
    if result is None or not result.nfields:
        return tuple
    names = tuple((result.fname(i) or b"").decode() for i in range(result.nfields))
    cls = _ROW_CLASSES.get(names)
    if cls is None:
        index = {name: i for i, name in enumerate(names)}
        cls = _ROW_CLASSES.setdefault(names, type("Row", (Row,), {"_index": index}))
    return cls


class NumericLoader(Loader):
    """``numeric`` as SQLite gives it: an int when integral, else a float."""

    def load(self, data: Any) -> int | float:
        text = bytes(data).decode()
        return int(text) if re.fullmatch(r"-?\d+", text) else float(text)


class BoolAsInt(Dumper):
    """A Python bool written as the integer 0 or 1 (the columns are integers)."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


class PgCursor:
    """The part of ``sqlite3.Cursor`` the store uses, over a psycopg cursor. Its result is
    read at once (rows, count), or, for a statement sent in a write's pipeline, on first
    use: that syncs the pipeline (one round trip for every statement sent so far)."""

    def __init__(self, cur: psycopg.Cursor[Any] | None,
                 pipeline: psycopg.Pipeline | None = None) -> None:
        self._cur = cur
        self._pipeline = pipeline
        self._rows: list[Any] = []
        self._pos = 0
        self._count = -1
        self.row_factory = None  # accepted and ignored: a Row also unpacks as a tuple
        if pipeline is None and cur is not None:  # None: a statement without a result
            self._read()

    def _read(self) -> None:
        if self._pipeline is not None:
            pipeline, self._pipeline = self._pipeline, None
            if self._cur.pgresult is None:  # not come back yet
                pipeline.sync()
        result = self._cur.pgresult
        # the rows from the result itself: ``cursor.description`` builds an object per
        # column on every call
        self._rows = self._cur.fetchall() if result is not None and result.nfields else []
        self._count = self._cur.rowcount

    @property
    def rowcount(self) -> int:
        if self._pipeline is not None:
            self._read()
        return self._count

    @property
    def lastrowid(self) -> Any:
        """The first column of the statement's ``RETURNING`` row."""
        if self._pipeline is not None:
            self._read()
        return self._rows[0][0] if self._rows else None

    def fetchone(self) -> Any:
        if self._pipeline is not None:
            self._read()
        if self._pos >= len(self._rows):
            return None
        self._pos += 1
        return self._rows[self._pos - 1]

    def fetchall(self) -> list[Any]:
        if self._pipeline is not None:
            self._read()
        rows, self._pos = self._rows[self._pos:], len(self._rows)
        return rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())
