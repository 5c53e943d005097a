"""The service database file: connections with the service's pragmas, and the schema.

A fresh database is built from ``sql/schema.sql``; an existing one is brought up to date
with ``sql/migrations/NNNN_*.sql``, each applied in its own transaction together with the
new ``PRAGMA user_version``. A test keeps the two paths equal.

Rows come back as ``sqlite3.Row`` on every connection made here: callers read columns by
name, so adding a column can never shift what another one means.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from service.sql import MIGRATIONS_DIR, SCHEMA_FILE

BUSY_TIMEOUT_MS = 10_000


class SchemaError(Exception):
    """The database cannot be used by this code (foreign, newer, or broken migrations)."""


def migration_files() -> list[tuple[int, Path]]:
    """``migrations/NNNN_name.sql`` sorted by number; numbers must run 1, 2, 3 ..."""
    found = sorted(
        (int(p.name.split("_", 1)[0]), p)
        for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")
    )
    numbers = [n for n, _ in found]
    if numbers != list(range(1, len(found) + 1)):
        raise SchemaError(f"migrations must be numbered 1..N without gaps, found {numbers}")
    return found


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()["user_version"])


def initialize(conn: sqlite3.Connection, *, from_schema: bool = True) -> int:
    """Create or upgrade the schema; returns the resulting version.

    An empty database is built from ``schema.sql`` (``from_schema``) or by running every
    migration; a database at version N gets migrations N+1.. applied.
    """
    migrations = migration_files()
    latest = len(migrations)
    version = schema_version(conn)
    if version > latest:
        raise SchemaError(f"database schema version {version} is newer than this code ({latest})")
    empty = conn.execute("SELECT count(*) AS n FROM sqlite_master").fetchone()["n"] == 0
    if version == 0 and empty and from_schema:
        script = SCHEMA_FILE.read_text(encoding="utf-8")
        conn.executescript(f"BEGIN;\n{script}\nPRAGMA user_version = {latest};\nCOMMIT;")
        return latest
    if version == 0 and not empty:
        raise SchemaError("database has tables but no schema version: not an Argus database")
    for number, path in migrations[version:]:
        script = path.read_text(encoding="utf-8")
        conn.executescript(f"BEGIN;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;")
    return latest


def _open(db_path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(
        db_path, isolation_level=None, check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def connect(db_path: str) -> sqlite3.Connection:
    """The writing connection: WAL, busy timeout, foreign keys; parent folders created."""
    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    conn = _open(db_path)
    conn.execute("PRAGMA journal_mode = WAL")
    # WAL + NORMAL: a committed transaction survives kill -9 of the service.
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def connect_reader(db_path: str) -> sqlite3.Connection:
    """A connection that only reads (``query_only``) a database ``connect`` set up.

    In WAL mode it reads the last committed state without waiting for the writer.
    """
    conn = _open(db_path)
    conn.execute("PRAGMA query_only = ON")
    return conn
