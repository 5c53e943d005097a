"""The service database file: connections with the service's pragmas, and the schema.

A fresh database is built from ``sql/schema.sql``; an existing one is brought up to date
with ``sql/migrations/NNNN_*.sql``, each applied in its own transaction together with the
new ``PRAGMA user_version``. A test keeps the two paths equal.

Rows come back as ``sqlite3.Row`` on every connection made here: callers read columns by
name, so adding a column can never shift what another one means.

Storage faults (disk full, a read-only file or file system, the lock held past the busy
timeout, an I/O error; on PostgreSQL, the server gone or out of room: ``pg.storage_fault``)
are told apart from every other database error by ``storage_fault``: they are nobody's
request's fault and pass once the storage is back, so the API answers them 503 and the
scheduler reports itself degraded.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from service.config import DEFAULT_SYNCHRONOUS, SYNCHRONOUS_MODES
from service.store.sql import MIGRATIONS_DIR, SCHEMA_FILE

BUSY_TIMEOUT_MS = 10_000
AUTOCHECKPOINT_PAGES = 1000  # SQLite's default: a commit past it checkpoints the WAL

# primary result codes (the low byte of an extended code) -> what the storage did
_SQLITE_FAULTS = {
    sqlite3.SQLITE_FULL: "disk full",
    sqlite3.SQLITE_READONLY: "database is read-only",
    sqlite3.SQLITE_BUSY: "database is locked",
    sqlite3.SQLITE_LOCKED: "database is locked",
    sqlite3.SQLITE_IOERR: "disk I/O error",
    sqlite3.SQLITE_CANTOPEN: "cannot open the database file",
}
_OS_FAULTS = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EIO: "disk I/O error",
}


class SchemaError(Exception):
    """The database cannot be used by this code (foreign, newer, or broken migrations)."""


class StoreOpenError(Exception):
    """The store's database cannot be reached or used at start (one line, no secret)."""


def redacted(url: str) -> str:
    """The URL without its password (for logs and errors)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))



class StorageUnavailable(Exception):
    """A write failed because of the database's storage (``storage_fault``), not because
    of what was written: the same write may succeed once the storage is back."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason} ({detail})" if detail and detail != reason else reason)
        self.reason = reason


def storage_fault(exc: BaseException) -> str | None:
    """What the storage did when ``exc`` is a storage fault (``"disk full"``, ``"database
    is locked"`` ...); None for any other error (a bug, a constraint, bad SQL)."""
    if isinstance(exc, StorageUnavailable):
        return exc.reason
    if isinstance(exc, StoreOpenError) and exc.__cause__ is not None:
        # a connection opened while the service runs (a thread's first reader) and the
        # server is down: the fault of the connection it could not open, not a bug
        return storage_fault(exc.__cause__)
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return None if code is None else _SQLITE_FAULTS.get(code & 0xFF)
    if isinstance(exc, OSError):
        return _OS_FAULTS.get(exc.errno)
    if type(exc).__module__.startswith("psycopg"):  # the PostgreSQL engine's (pg.py)
        from service.store.pg import storage_fault as postgres_fault

        return postgres_fault(exc)
    return None


def log_failure(logger: logging.Logger, what: str, exc: BaseException) -> None:
    """``what`` failed with ``exc``, on a loop that tries again: a storage fault is one
    warning line (the database's condition, not a bug), anything else an error with its
    traceback."""
    fault = storage_fault(exc)
    if fault is None:
        logger.error("%s failed", what, exc_info=exc)
    else:
        logger.warning("%s failed: %s", what, fault)


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
    # A migration may rebuild a table others reference (SQLite cannot alter a CHECK): with
    # foreign keys on, dropping the old table would fail. They are off while migrations
    # run (the pragma is a no-op inside a transaction) and checked before they come back.
    enforced = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        for number, path in migrations[version:]:
            script = path.read_text(encoding="utf-8")
            conn.executescript(f"BEGIN;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;")
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise SchemaError(f"migrations left {len(broken)} broken foreign keys")
    finally:
        conn.execute(f"PRAGMA foreign_keys = {'ON' if enforced else 'OFF'}")
    return latest


def _open(db_path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(
        db_path, isolation_level=None, check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def connect(db_path: str, *, synchronous: str = DEFAULT_SYNCHRONOUS) -> sqlite3.Connection:
    """The writing connection: WAL, ``synchronous`` (see ``SYNCHRONOUS_MODES``), busy
    timeout, foreign keys; parent folders created."""
    if synchronous not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}")
    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    conn = _open(db_path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def connect_reader(db_path: str) -> sqlite3.Connection:
    """A connection that only reads (``query_only``) a database ``connect`` set up.

    In WAL mode it reads the last committed state without waiting for the writer.
    """
    conn = _open(db_path)
    conn.execute("PRAGMA query_only = ON")
    return conn
