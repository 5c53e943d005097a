"""The store's PostgreSQL engine (``dialect.Engine``): connections, the schema, faults.

The schema: a fresh database is built from ``sql/postgres/schema.sql``; an existing one is
brought up to date by ``sql/postgres/migrations/NNNN_*.sql`` (from the baseline, 0016: the
schema SQLite reached through 0001..0016), each in its own transaction with the new
version in ``argus_schema``. The versions are the same numbers on both engines. Two
instances starting at once build it once: the building holds ``WRITE_LOCK``.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from service.store import pg
from service.store.db import SchemaError, StoreOpenError, migration_files, redacted

log = logging.getLogger(__name__)

_VERSION = "SELECT version FROM argus_schema"
_HAS_VERSION = "SELECT to_regclass('argus_schema') IS NOT NULL AS present"
_TABLES = "SELECT count(*) AS n FROM pg_tables WHERE schemaname = current_schema()"
_COLLATION = """SELECT datlocprovider AS provider, datcollate AS collate,
                       coalesce(daticulocale, '') AS icu
                FROM pg_database WHERE datname = current_database()"""
_BYTEWISE = {"C", "POSIX", "C.UTF-8", "C.utf8"}


class PostgresEngine:
    """PostgreSQL through psycopg 3 (see ``service.store.pg``)."""

    name = "postgresql"
    errors = pg.ERRORS
    integrity_errors = pg.INTEGRITY_ERRORS

    def __init__(self, url: str) -> None:
        self.target = url
        self._texts = pg.texts()

    def _open(self) -> pg.PgConnection:
        try:
            return pg.PgConnection(self.target, self._texts)
        except psycopg.Error as exc:
            raise StoreOpenError(f"cannot connect to PostgreSQL at {redacted(self.target)}: "
                                 f"{one_line(exc)}") from exc

    def connect(self) -> pg.PgConnection:
        return self._open()

    def connect_reader(self) -> pg.PgConnection:
        return self._open()

    def initialize(self, conn: pg.PgConnection, *, from_schema: bool = True) -> int:
        """Create or upgrade the schema; the resulting version (``SchemaError``: newer than
        this code, or tables of something else). An empty database is built from
        ``schema.sql`` (``from_schema``) or by every migration from the baseline."""
        latest = len(migration_files())
        try:
            conn.execute("SELECT pg_advisory_lock(:k)", {"k": pg.WRITE_LOCK})
            try:
                version = self._initialize(conn, latest, from_schema)
                if version == latest:
                    pg.learn_client_bound(conn)
                return version
            finally:
                conn.execute("SELECT pg_advisory_unlock(:k)", {"k": pg.WRITE_LOCK})
        except psycopg.Error as exc:  # no right to create tables, the server gone...
            raise StoreOpenError(f"cannot set up the schema in PostgreSQL at "
                                 f"{redacted(self.target)}: {one_line(exc)}") from exc

    def _initialize(self, conn: pg.PgConnection, latest: int, from_schema: bool) -> int:
        warn_of_collation(conn, self.target)
        version = schema_version(conn)
        if version > latest:
            raise SchemaError(f"database schema version {version} is newer than this code "
                              f"({latest})")
        if version == 0 and conn.execute(_TABLES).fetchone()["n"] > 0:
            raise SchemaError("database has tables but no schema version: not an Argus "
                              "database")
        if version == 0 and from_schema:
            script = pg.SCHEMA_FILE.read_text(encoding="utf-8")
            conn.script(f"BEGIN;\n{script}\nINSERT INTO argus_schema (version) "
                        f"VALUES ({latest});\nCOMMIT;")
            return latest
        files = pg.migration_files()
        if version and version < files[0][0] - 1:
            raise SchemaError(f"database schema version {version} is older than PostgreSQL's "
                              f"baseline ({files[0][0]})")
        for number, path in files:
            if number > version:
                script = path.read_text(encoding="utf-8")
                conn.script(f"BEGIN;\n{script}\nDELETE FROM argus_schema;\n"
                            f"INSERT INTO argus_schema (version) VALUES ({number});\nCOMMIT;")
        return schema_version(conn)

    def begin(self, conn: pg.PgConnection) -> None:
        conn.reopen_if_lost()
        conn.begin_write()

    def begin_snapshot(self, conn: pg.PgConnection) -> None:
        conn.reopen_if_lost()
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def storage_fault(self, exc: BaseException) -> str | None:
        return pg.storage_fault(exc)

    def probe(self, conn: pg.PgConnection) -> None:
        conn.execute("UPDATE argus_schema SET version = version")

    def data_version(self, conn: pg.PgConnection) -> object:
        """Changes after any commit (the snapshot's bounds and running transactions)."""
        conn.reopen_if_lost()
        return conn.execute("SELECT pg_current_snapshot()::text AS s").fetchone()["s"]

    def checkpoint(self, conn: Any) -> None:
        """Nothing: PostgreSQL checkpoints by itself."""

    def automatic_checkpoints(self, conn: Any, on: bool) -> None:
        """Nothing: PostgreSQL checkpoints by itself."""


def warn_of_collation(conn: pg.PgConnection, url: str) -> bool:
    """Log once at start when the database sorts text otherwise than byte by byte (as
    SQLite does: names, keys and the skip scans' order); True when it does."""
    row = conn.execute(_COLLATION).fetchone()
    if row["provider"] == "c" and row["collate"] in _BYTEWISE:
        return False
    log.warning("PostgreSQL database %s sorts text by %s, not byte by byte as SQLite: lists "
                "ordered by name may differ (create it with TEMPLATE template0 LC_COLLATE "
                "'C' LOCALE_PROVIDER libc)", redacted(url), row["icu"] or row["collate"])
    return True


def one_line(exc: BaseException) -> str:
    """psycopg's message, on one line."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text or type(exc).__name__


def schema_version(conn: pg.PgConnection) -> int:
    if not conn.execute(_HAS_VERSION).fetchone()["present"]:
        return 0
    row = conn.execute(_VERSION).fetchone()
    return 0 if row is None else int(row["version"])
