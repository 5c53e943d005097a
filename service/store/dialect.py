"""Which database engine the store runs on, and the few things that differ between them.

``engine_for(target)``: ``target`` is the store's setting, ``v2.store.url``: a SQLite file
(``sqlite:///path``, or a bare path: ``v2.sqlite.db_path``, the embedded default) or a
PostgreSQL server (``postgresql://user[:password]@host[:port]/db``). The engine opens the
writing and reading connections, builds or upgrades the schema, starts a write
transaction (SQLite ``BEGIN IMMEDIATE``; PostgreSQL ``BEGIN`` plus one advisory lock: one
writer at a time either way) and a read snapshot, tells a storage fault from a statement's
error, and names its integrity errors. Everything else (the named queries, the guarded
compare-and-sets, the events in the same transaction) is the same code on both.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol

from service.store import db
from service.store.db import StoreOpenError, redacted

__all__ = ["Engine", "SqliteEngine", "StoreOpenError", "StoreUrlError", "engine_for",
           "is_postgres", "redacted", "sqlite_path", "unique_violation"]

POSTGRES_SCHEMES = ("postgresql", "postgres")


class StoreUrlError(ValueError):
    """A store setting that names no engine this code has (said in one line)."""


class Engine(Protocol):
    name: str
    target: str
    errors: tuple[type[Exception], ...]
    integrity_errors: tuple[type[Exception], ...]

    def connect(self) -> Any: ...
    def connect_reader(self) -> Any: ...
    def initialize(self, conn: Any) -> int: ...
    def begin(self, conn: Any) -> None: ...
    def begin_snapshot(self, conn: Any) -> None: ...
    def storage_fault(self, exc: BaseException) -> str | None: ...
    def probe(self, conn: Any) -> None: ...
    def data_version(self, conn: Any) -> object: ...
    def checkpoint(self, conn: Any) -> None: ...
    def automatic_checkpoints(self, conn: Any, on: bool) -> None: ...


def is_postgres(target: str) -> bool:
    return target.split("://", 1)[0].lower() in POSTGRES_SCHEMES and "://" in target


def sqlite_path(target: str) -> str:
    """The file of a SQLite target: ``sqlite:///abs/path`` or a bare path."""
    if target.startswith("sqlite://"):
        path = target.removeprefix("sqlite://")
        if not path.startswith("/"):
            raise StoreUrlError(f"store URL {target!r}: a SQLite URL is sqlite:///absolute/path")
        return path
    if "://" in target:
        scheme = target.split("://", 1)[0]
        raise StoreUrlError(f"store URL {redacted(target)!r}: unknown engine {scheme!r} "
                            "(sqlite:///path or postgresql://user@host:port/db)")
    return target


class SqliteEngine:
    """The embedded default: one file, WAL (``service.store.db``)."""

    name = "sqlite"
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    integrity_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)

    def __init__(self, path: str, synchronous: str = db.DEFAULT_SYNCHRONOUS) -> None:
        if path == ":memory:" or path.startswith("file::memory:"):
            raise ValueError("the store needs a database file: each thread reads through "
                             "a connection of its own")
        self.target = path
        self._synchronous = synchronous

    def connect(self) -> sqlite3.Connection:
        return db.connect(self.target, synchronous=self._synchronous)

    def connect_reader(self) -> sqlite3.Connection:
        return db.connect_reader(self.target)

    def initialize(self, conn: sqlite3.Connection) -> int:
        return db.initialize(conn)

    def begin(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def begin_snapshot(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN")

    def storage_fault(self, exc: BaseException) -> str | None:
        return db.storage_fault(exc)

    def probe(self, conn: sqlite3.Connection) -> None:
        """A write that changes nothing: the schema version rewritten as it is."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute(f"PRAGMA user_version = {int(version)}")

    def data_version(self, conn: sqlite3.Connection) -> object:
        """Changes after any commit by any connection (``PRAGMA data_version``)."""
        return conn.execute("PRAGMA data_version").fetchone()[0]

    def checkpoint(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def automatic_checkpoints(self, conn: sqlite3.Connection, on: bool) -> None:
        pages = db.AUTOCHECKPOINT_PAGES if on else 0
        conn.execute(f"PRAGMA wal_autocheckpoint = {pages}")


def unique_violation(exc: BaseException) -> bool:
    """Whether ``exc`` is a UNIQUE or PRIMARY KEY conflict, on either engine."""
    if isinstance(exc, sqlite3.IntegrityError):
        return "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc)
    return getattr(exc, "sqlstate", None) == "23505"  # PostgreSQL's unique_violation


def engine_for(target: str, *, synchronous: str = db.DEFAULT_SYNCHRONOUS) -> Engine:
    """The engine the store setting names (``StoreUrlError`` for one it does not)."""
    if is_postgres(target):
        from service.store.pg_engine import PostgresEngine  # psycopg only when asked for

        return PostgresEngine(target)
    return SqliteEngine(sqlite_path(target), synchronous)
