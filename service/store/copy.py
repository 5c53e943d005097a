"""Move a whole installation from one store to another (``argus-api db copy``), checked.

``copy_store(source, target)``: every table of the schema, enumerated from the code's own
schema (``sql/schema.sql`` built in memory: no list here to go stale), is copied from
``source`` (a SQLite file or a PostgreSQL database; either direction, the same code) to
``target`` in one write transaction, then checked in that transaction before it commits:
per table the row count and a checksum of the rows, computed the same way on both sides.
All or nothing: any error or mismatch rolls the copy back.

* The source is read in one read transaction (SQLite: a snapshot as of one commit, while
  a service may go on writing in WAL mode; PostgreSQL: ``REPEATABLE READ``), opened
  read-only: the copy never writes to it. Its schema version must be this code's (the
  copy does not migrate: start this version's service on it once, which does).
* The target must hold nothing: no table with a row beyond what a fresh schema holds
  (the seed row of ``task_changes``), the service's lease included, so a copy never merges
  into a live installation. It is checked before anything is written (opening a ``Store``
  on it then builds or upgrades its schema) and again inside the copy's transaction.
* The rows are copied as they are, triggers off: the tables the triggers keep
  (``task_counts``, ``task_changes``, ``dep_wakeups``) arrive as the source had them. The
  tables go in an order where a referenced table comes first (foreign keys are checked).
* ``service_lease`` is not copied: it names the source's instance; the target's first
  instance takes its own.
* Ids: the target's generated id columns (PostgreSQL's identity sequences, SQLite's
  ``sqlite_sequence``) are set past the largest id the source's ever gave, so a new row
  never reuses an id.

The checksum of a table is a multiset hash: the sum, modulo 2^256, of each row's SHA-256
over its values normalized (None, integers, floats (an integral one as the integer),
text as it is, bytes as hex, a JSON value PostgreSQL returns parsed as its canonical
text). It does not depend on the order the rows come in, so neither side sorts (the
engines sort text differently); the row count goes with it. The JSON documents of the
schema are ``text`` columns on both engines and compared byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from graphlib import TopologicalSorter
from typing import Any

from service.store.copy_sides import CopyError, Side, one_line, side_for
from service.store.db import SchemaError, StoreOpenError, initialize
from service.store.dialect import StoreUrlError

__all__ = ["NOT_COPIED", "CopyError", "CopyReport", "TableCheck", "check_copy", "copy_store"]

# tables a copy leaves out, and why
NOT_COPIED = {"service_lease": "the source's instance's lease; the target's first instance "
                               "takes its own"}
_MOD = 2 ** 256
_AS_IS = frozenset({str, int, type(None)})  # the common values: no call to _norm


@dataclass(frozen=True)
class Schema:
    """The code's schema: its tables in copy order (a referenced table first), each
    one's columns, and what a fresh database holds (the seed rows' checksums)."""

    version: int
    tables: dict[str, list[str]]
    fresh: dict[str, tuple[int, str]]


@cache
def schema() -> Schema:
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    try:
        version = initialize(conn)
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")]
        deps = {n: {r["table"] for r in conn.execute(f"PRAGMA foreign_key_list({n})")} - {n}
                for n in names}
        order = list(TopologicalSorter(deps).static_order())
        tables = {n: [r["name"] for r in conn.execute(f"PRAGMA table_info({n})")]
                  for n in order}
        fresh = {}
        for name, columns in tables.items():
            d = Digest()
            for row in conn.execute(f"SELECT {', '.join(columns)} FROM {name}"):
                d.add(tuple(row))
            fresh[name] = (d.rows, d.hexdigest)
    finally:
        conn.close()
    return Schema(version, tables, fresh)


def _norm(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal):  # a numeric column: as SQLite would give it
        value = int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"hex": bytes(value).hex()}
    if isinstance(value, dict | list):  # a json/jsonb column, read parsed
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    raise CopyError(f"a value of type {type(value).__name__} the checksum does not know")


class Digest:
    """A table's row count and checksum (the module docstring)."""

    def __init__(self) -> None:
        self.rows = 0
        self._sum = 0

    def add(self, row: tuple[Any, ...]) -> None:
        text = repr([v if type(v) in _AS_IS else _norm(v) for v in row])
        h = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest(),
                           "big")
        self._sum = (self._sum + h) % _MOD
        self.rows += 1

    @property
    def hexdigest(self) -> str:
        return f"{self._sum:064x}"


def digest(side: Side, table: str, columns: list[str]) -> Digest:
    d = Digest()
    for row in side.rows(table, columns):
        d.add(row)
    return d


@dataclass(frozen=True)
class TableCheck:
    table: str
    rows: int
    checksum: str
    target_rows: int
    target_checksum: str

    @property
    def ok(self) -> bool:
        return (self.rows, self.checksum) == (self.target_rows, self.target_checksum)

    def line(self, width: int) -> str:
        head = f"{self.table:<{width}}  {self.rows:>9}  {self.checksum[:16]}"
        if self.ok:
            return f"{head}  ok"
        return (f"{head}  MISMATCH: the target has {self.target_rows} rows, checksum "
                f"{self.target_checksum[:16]}")


@dataclass(frozen=True)
class CopyReport:
    """What a copy or a check (``action``) found, and the lines the CLI prints; a copy
    is ``committed`` only when every table checked ok."""

    action: str
    source: str
    target: str
    schema_version: int
    checks: tuple[TableCheck, ...]
    seconds: float
    committed: bool

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def mismatched(self) -> list[str]:
        return [c.table for c in self.checks if not c.ok]

    def lines(self) -> list[str]:
        width = max(len(t) for t in (*(c.table for c in self.checks), *NOT_COPIED))
        out = [f"{self.action} {self.source} -> {self.target} (schema version "
               f"{self.schema_version}, {self.seconds:.2f}s)"]
        out += [c.line(width) for c in self.checks]
        out += [f"{t:<{width}}  not copied: {why}" for t, why in NOT_COPIED.items()]
        rows, tables = sum(c.rows for c in self.checks), len(self.checks)
        if self.ok:
            done = "copied" if self.action == "copy" else "checked"
            out.append(f"{done} {rows} rows in {tables} tables, checksums match")
        else:
            out.append(f"checksums differ in {len(self.mismatched)} tables: "
                       f"{', '.join(self.mismatched)}"
                       + ("; nothing was written (the copy was rolled back)"
                          if self.action == "copy" else ""))
        return out


def _errors() -> tuple[type[Exception], ...]:
    import psycopg

    return (sqlite3.Error, psycopg.Error)


def _open(target: str, *, write: bool, what: str) -> Side:
    try:
        side = side_for(target)
    except StoreUrlError as exc:
        raise CopyError(f"--{what}: {exc}") from exc
    side.open(write)
    return side


def _check_source(side: Side, code: Schema) -> None:
    try:
        version = side.version()
    except _errors() as exc:
        raise CopyError(f"cannot read {side.label}: {one_line(exc)}") from exc
    if version != code.version:
        if version == 0:
            raise CopyError(f"{side.label} is not an Argus database (no schema version)")
        fix = ("start this version's service on it once (it migrates the schema), then "
               "copy" if version < code.version else "copy it with the code of its version")
        raise CopyError(f"{side.label} has schema version {version}, this code "
                        f"{code.version}: {fix}")
    _check_tables(side, code)


def _check_tables(side: Side, code: Schema) -> None:
    found = side.columns()
    if {t: sorted(c) for t, c in found.items()} != {t: sorted(c) for t, c in
                                                     code.tables.items()}:
        odd = sorted(set(found) ^ set(code.tables)) or sorted(
            t for t in found if sorted(found[t]) != sorted(code.tables[t]))
        raise CopyError(f"{side.label}: its tables are not this code's schema (differ: "
                        f"{', '.join(odd)})")


def _holding(side: Side, code: Schema) -> list[str]:
    """The tables of ``side`` that hold more than a fresh schema's rows."""
    held = []
    for table, columns in side.columns().items():
        n = side.count(table)
        fresh = code.fresh.get(table, (0, ""))
        if n and (n, digest(side, table, columns).hexdigest) != fresh:
            held.append(f"{table} ({n})")
    return held


def _refuse_unless_empty(side: Side, code: Schema) -> None:
    held = _holding(side, code)
    if held:
        raise CopyError(f"{side.label} already holds rows ({', '.join(held[:6])}"
                        f"{', ...' if len(held) > 6 else ''}): a copy never merges into "
                        "an installation; give it an empty database")


def _prepare_target(target: str, code: Schema) -> None:
    """Refuse a target that holds rows before anything is written, then build (or
    upgrade) its schema by opening a ``Store`` on it."""
    side = side_for(target)
    if side.exists():
        side.open(write=False)
        try:
            side.begin_read()
            if side.version() > code.version:
                raise CopyError(f"{side.label} has schema version {side.version()}, newer "
                                f"than this code's {code.version}")
            _refuse_unless_empty(side, code)
        except _errors() as exc:
            raise CopyError(f"cannot read {side.label}: {one_line(exc)}") from exc
        finally:
            side.close()
    from service.store.writer import Store

    try:
        Store(target).close()
    except (StoreOpenError, SchemaError, OSError, *_errors()) as exc:
        raise CopyError(f"cannot set up the schema of {side.label}: {one_line(exc)}") from exc


def _tee(rows: Iterable[tuple[Any, ...]], d: Digest) -> Iterator[tuple[Any, ...]]:
    for row in rows:
        d.add(row)
        yield row


def _copy_rows(src: Side, dst: Side, code: Schema) -> tuple[TableCheck, ...]:
    """Inside the target's write transaction: every table copied, the ids set, every
    table checked against what was read from the source."""
    _check_tables(dst, code)
    _refuse_unless_empty(dst, code)
    copied = {t: c for t, c in code.tables.items() if t not in NOT_COPIED}
    sent: dict[str, Digest] = {}
    dst.triggers_off()
    for table, columns in copied.items():
        sent[table] = Digest()
        dst.clear(table)  # a fresh schema's seed row
        try:
            dst.insert(table, columns, _tee(src.rows(table, columns), sent[table]))
        except _errors() as exc:
            raise CopyError(f"copying {table} failed: {one_line(exc)}; nothing was "
                            "written (the copy was rolled back)") from exc
    for table, column in dst.id_columns().items():
        dst.set_sequence(table, column, src.high_water(table, column))
    dst.triggers_on()
    checks = []
    for table, columns in copied.items():
        got = digest(dst, table, columns)
        checks.append(TableCheck(table, sent[table].rows, sent[table].hexdigest,
                                 got.rows, got.hexdigest))
    return tuple(sorted(checks, key=lambda c: c.table))


def copy_store(source: str, target: str) -> CopyReport:
    """Copy the installation at ``source`` to the empty store ``target`` and check it
    (the module docstring). ``CopyError`` when it was refused or failed; a report whose
    ``ok`` is False when the check found a difference (then nothing was committed)."""
    started = time.monotonic()
    code = schema()
    src = _open(source, write=False, what="from")
    try:
        if side_for(target).same_as(src):
            raise CopyError("--from and --to name the same database")
        src.begin_read()
        _check_source(src, code)
        _prepare_target(target, code)
        dst = _open(target, write=True, what="to")
        try:
            dst.begin_write()
            checks = _copy_rows(src, dst, code)
            ok = all(c.ok for c in checks)
            if ok:
                dst.commit()
        finally:
            dst.close()  # rolls back what was not committed
    except StoreUrlError as exc:
        raise CopyError(f"--to: {exc}") from exc
    except _errors() as exc:
        raise CopyError(f"the copy failed: {one_line(exc)}; nothing was written") from exc
    finally:
        src.close()
    return CopyReport("copy", src.label, dst.label, code.version, checks,
                      time.monotonic() - started, committed=ok)


def check_copy(source: str, target: str) -> CopyReport:
    """Compare every copied table of ``source`` and ``target`` (row counts and
    checksums), each read in one snapshot; nothing is written."""
    started = time.monotonic()
    code = schema()
    sides = [_open(source, write=False, what="from")]
    try:
        sides.append(_open(target, write=False, what="to"))
        for side in sides:
            side.begin_read()
            _check_source(side, code)
        checks = []
        for table, columns in code.tables.items():
            if table not in NOT_COPIED:
                a, b = (digest(s, table, columns) for s in sides)
                checks.append(TableCheck(table, a.rows, a.hexdigest, b.rows, b.hexdigest))
    except _errors() as exc:
        raise CopyError(f"the check failed: {one_line(exc)}") from exc
    finally:
        for side in sides:
            side.close()
    return CopyReport("check", sides[0].label, sides[1].label, code.version,
                      tuple(sorted(checks, key=lambda c: c.table)),
                      time.monotonic() - started, committed=False)
