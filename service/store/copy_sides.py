"""The two ends of ``argus-api db copy`` (``service.store.copy``): one raw connection to a
SQLite file or a PostgreSQL database, what its catalog says (tables, columns, the schema
version, the generated id columns) and the few acts a copy needs that each engine spells
its own way (a read snapshot, one write transaction, triggers off and on, a sequence set).

Raw connections, not the store's: the copy names every table and column itself, quoted,
and reads the rows as the engine returns them. Every failure is a ``CopyError`` in one
line that names the database (never its password).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from service.store.db import redacted
from service.store.dialect import is_postgres, sqlite_path

BATCH = 2000  # rows fetched or written at a time: a table never sits in memory whole


class CopyError(Exception):
    """The copy or the check was not done; the message (one line) says why, and nothing
    was written to the target."""


def q(name: str) -> str:
    """An identifier, quoted (``user`` is a reserved word on PostgreSQL)."""
    return '"' + name.replace('"', '""') + '"'


def one_line(exc: BaseException) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text or type(exc).__name__


class SqliteSide:
    """A SQLite file. Read: ``mode=ro`` (never creates or writes it) in one read
    transaction, a snapshot as of one commit while the service may go on writing (WAL).
    Write: ``BEGIN IMMEDIATE``; triggers are dropped for the copy and made again from
    their own text in the same transaction."""

    engine = "sqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        self.label = path
        self._conn: sqlite3.Connection | None = None
        self._triggers: list[tuple[str, str]] = []

    @property
    def conn(self) -> sqlite3.Connection:
        assert self._conn is not None, "not open"
        return self._conn

    def exists(self) -> bool:
        return Path(self.path).is_file()

    def same_as(self, other: object) -> bool:
        return isinstance(other, SqliteSide) and (
            Path(self.path).resolve() == Path(other.path).resolve())

    def open(self, write: bool) -> None:
        if not self.exists():
            raise CopyError(f"no database at {self.path}")
        uri = f"{Path(self.path).absolute().as_uri()}?mode={'rw' if write else 'ro'}"
        self._conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=10.0)
        self._conn.execute("PRAGMA foreign_keys = ON")

    def begin_read(self) -> None:
        self.conn.execute("BEGIN")
        self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot

    def begin_write(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def close(self) -> None:
        if self._conn is not None:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            self._conn.close()
            self._conn = None

    def version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def columns(self) -> dict[str, list[str]]:
        names = [r[0] for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")]
        return {n: [r[1] for r in self.conn.execute(f"PRAGMA table_info({q(n)})")]
                for n in names}

    def count(self, table: str) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM {q(table)}").fetchone()[0])

    def rows(self, table: str, columns: list[str]) -> Iterator[tuple[Any, ...]]:
        cur = self.conn.execute(f"SELECT {', '.join(map(q, columns))} FROM {q(table)}")
        while batch := cur.fetchmany(BATCH):
            yield from batch

    def id_columns(self) -> dict[str, str]:
        """The AUTOINCREMENT tables' id column (their next id is kept in sqlite_sequence;
        another integer key's next id is its largest plus one, nothing to set)."""
        found = {}
        for name, sql in self.conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
            if sql and re.search(r"\bAUTOINCREMENT\b", sql, re.IGNORECASE):
                [key] = [r[1] for r in self.conn.execute(f"PRAGMA table_info({q(name)})")
                         if r[5] == 1]
                found[name] = key
        return found

    def high_water(self, table: str, column: str) -> int:
        """The largest id this table ever gave (sqlite_sequence keeps the ones of rows
        since deleted), at least its largest id now."""
        top = self.conn.execute(f"SELECT max({q(column)}) FROM {q(table)}").fetchone()[0]
        seq = None
        if self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'"
                             ).fetchone():
            row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?",
                                    (table,)).fetchone()
            seq = row and row[0]
        return int(max(top or 0, seq or 0))

    def clear(self, table: str) -> None:
        self.conn.execute(f"DELETE FROM {q(table)}")

    def insert(self, table: str, columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
        sql = (f"INSERT INTO {q(table)} ({', '.join(map(q, columns))}) "
               f"VALUES ({', '.join('?' * len(columns))})")
        batch: list[tuple[Any, ...]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= BATCH:
                self.conn.executemany(sql, batch)
                batch.clear()
        if batch:
            self.conn.executemany(sql, batch)

    def triggers_off(self) -> None:
        self._triggers = list(self.conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"))
        for name, _ in self._triggers:
            self.conn.execute(f"DROP TRIGGER {q(name)}")

    def triggers_on(self) -> None:
        for _, sql in self._triggers:
            self.conn.execute(sql)

    def set_sequence(self, table: str, column: str, value: int) -> None:
        self.conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", (table,))
        if value > 0:
            self.conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)",
                              (table, value))


_INTEGERS = {"bigint", "integer", "smallint"}


class PostgresSide:
    """A PostgreSQL database. Read: one ``REPEATABLE READ READ ONLY`` transaction (one
    snapshot), rows through a server-side cursor. Write: one transaction holding the
    store's write lock (``pg.WRITE_LOCK``: no Argus instance writes meanwhile), rows by
    ``COPY``, the tables' triggers disabled for the copy (``ALTER TABLE ... DISABLE
    TRIGGER USER``: the tables' owner may, the one the store built them as)."""

    engine = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        self.label = redacted(url)
        self._conn: Any = None
        self._types: dict[tuple[str, str], str] = {}
        self._triggered: list[str] = []

    def exists(self) -> bool:
        return True

    def same_as(self, other: object) -> bool:
        return isinstance(other, PostgresSide) and self.label == other.label

    def open(self, write: bool) -> None:
        import psycopg

        try:
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        except psycopg.Error as exc:
            raise CopyError(f"cannot connect to PostgreSQL at {self.label}: "
                            f"{one_line(exc)}") from exc

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()  # type: ignore[no-any-return]

    def begin_read(self) -> None:
        self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def begin_write(self) -> None:
        from service.store.pg import WRITE_LOCK

        self._conn.execute("BEGIN")
        self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))

    def commit(self) -> None:
        self._conn.execute("COMMIT")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()  # an open transaction is rolled back
            self._conn = None

    def version(self) -> int:
        if not self._all("SELECT to_regclass('argus_schema') IS NOT NULL")[0][0]:
            return 0
        row = self._all("SELECT version FROM argus_schema")
        return int(row[0][0]) if row else 0

    def columns(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for table, column, kind in self._all(
                "SELECT c.table_name, c.column_name, c.data_type "
                "FROM information_schema.columns c JOIN pg_tables t "
                "ON t.schemaname = c.table_schema AND t.tablename = c.table_name "
                "WHERE c.table_schema = current_schema() AND c.table_name <> 'argus_schema' "
                "ORDER BY c.table_name, c.ordinal_position"):
            found.setdefault(table, []).append(column)
            self._types[(table, column)] = kind
        return found

    def count(self, table: str) -> int:
        return int(self._all(f"SELECT count(*) FROM {q(table)}")[0][0])

    def rows(self, table: str, columns: list[str]) -> Iterator[tuple[Any, ...]]:
        with self._conn.cursor(name="argus_copy") as cur:
            cur.itersize = BATCH
            cur.execute(f"SELECT {', '.join(map(q, columns))} FROM {q(table)}")
            yield from cur

    def id_columns(self) -> dict[str, str]:
        return dict(self._all(  # type: ignore[arg-type]
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND is_identity = 'YES'"))

    def high_water(self, table: str, column: str) -> int:
        """The largest id this table's sequence gave, at least its largest id now."""
        top = self._all(f"SELECT max({q(column)}) FROM {q(table)}")[0][0] or 0
        [(seq,)] = self._all("SELECT pg_get_serial_sequence(%s, %s)", (q(table), column))
        if seq is not None:
            [(last, called)] = self._all(f"SELECT last_value, is_called FROM {seq}")
            top = max(top, last if called else 0)
        return int(top)

    def clear(self, table: str) -> None:
        self._conn.execute(f"DELETE FROM {q(table)}")

    def insert(self, table: str, columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
        # an integer column SQLite gave as an integral float (its REAL-like affinity
        # rules): as an int, which COPY takes for a bigint
        ints = [self._types.get((table, c)) in _INTEGERS for c in columns]
        with self._conn.cursor() as cur, cur.copy(
                f"COPY {q(table)} ({', '.join(map(q, columns))}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([int(v) if i and isinstance(v, float) and v.is_integer()
                                else v for v, i in zip(row, ints, strict=True)])

    def triggers_off(self) -> None:
        self._triggered = [r[0] for r in self._all(
            "SELECT DISTINCT event_object_table FROM information_schema.triggers "
            "WHERE trigger_schema = current_schema() ORDER BY 1")]
        for table in self._triggered:
            self._conn.execute(f"ALTER TABLE {q(table)} DISABLE TRIGGER USER")

    def triggers_on(self) -> None:
        for table in self._triggered:
            self._conn.execute(f"ALTER TABLE {q(table)} ENABLE TRIGGER USER")

    def set_sequence(self, table: str, column: str, value: int) -> None:
        """The next id past ``value`` (the first id, 1, when it is 0)."""
        self._conn.execute("SELECT setval(pg_get_serial_sequence(%s, %s), %s, %s)",
                           (q(table), column, max(value, 1), value >= 1))


Side = SqliteSide | PostgresSide


def side_for(target: str) -> Side:
    """The end a store setting names (``StoreUrlError`` for one of no known engine)."""
    if is_postgres(target):
        return PostgresSide(target)
    return SqliteSide(sqlite_path(target))
