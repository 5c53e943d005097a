"""The store on PostgreSQL (``v2.store.url: postgresql://user@host:port/db``): connections
that look to the store's code like its SQLite ones, the schema, and storage faults.

The aggregates run the same named queries on either engine. ``PgConnection.execute`` is
handed the SQLite text (``sql.QUERIES``) and runs the PostgreSQL text of the same name
(``sql.postgres_queries``: hand-written, or rewritten by ``sql.translate`` once at load);
a statement that is no named query (a test's) is rewritten on first use. A query that has
no PostgreSQL text yet raises ``NotImplementedError`` naming it: never a wrong answer.

Parameters are bound on the server, and a statement a connection runs often is prepared
there (``PREPARE_THRESHOLD``); the few queries whose parameters PostgreSQL cannot type by
themselves (``:since IS NULL`` alone, say: SQLite's dynamic typing lets one text serve
both engines) are bound on the client (``psycopg.ClientCursor``), each value a literal
typed by where it stands: ``CLIENT_BOUND``, learnt at start.

Rows are ``pg_rows.Row``: read by column name like ``sqlite3.Row`` and by position like a tuple.
An integral ``numeric`` (PostgreSQL's ``sum`` of integers) is read as an int, another as a
float, as SQLite gives them; a Python bool is written as 0 or 1 (the columns are integers,
as on SQLite).

Writes: every write transaction first takes one transaction-level advisory lock
(``WRITE_LOCK``), the equivalent of SQLite's ``BEGIN IMMEDIATE``: one writer at a time
across every connection and every instance, so a write that reads then writes (an id found
free, a quota, the next attempt number) sees nothing change under it, exactly as on SQLite;
the guarded compare-and-sets (``UPDATE ... WHERE state = :expected``) stay the guard.
Reads run in autocommit (each statement its own snapshot); a read of several statements
runs in one ``REPEATABLE READ READ ONLY`` transaction.
"""

from __future__ import annotations

import contextlib
import logging
import re
import select
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus

from service.store.pg_rows import BoolAsInt, NumericLoader, PgCursor, row_factory
from service.store.sql import POSTGRES_DIR, QUERIES, postgres_queries
from service.store.sql.translate import Unported, to_postgres

WRITE_LOCK = 0x4152_4755  # "ARGU": the advisory lock every write transaction takes
CONNECT_TIMEOUT_S = 5
PREPARE_THRESHOLD = 2  # a statement run this often on a connection is prepared there
# The queries whose parameters PostgreSQL cannot type by themselves (one only ever tested
# IS NULL, say): bound on the client instead (learn_client_bound)
CLIENT_BOUND: set[str] = set()
_LEARNED = threading.Event()
SCHEMA_FILE = POSTGRES_DIR / "schema.sql"
MIGRATIONS_DIR = POSTGRES_DIR / "migrations"

log = logging.getLogger(__name__)

# SQLSTATE classes and codes that are the database's condition, not the statement's fault
_FAULT_CLASSES = {"08": "database connection lost", "53": "database out of resources",
                  "57": "database unavailable", "58": "database I/O error"}
_FAULT_CODES = {"53100": "disk full", "55P03": "database is locked",
                "25006": "database is read-only"}


# A write transaction's lock, its first statement after BEGIN (SQLite's BEGIN IMMEDIATE)
_WRITE_LOCK = f"SELECT pg_advisory_xact_lock({WRITE_LOCK})"


class PgConnection:
    """The part of ``sqlite3.Connection`` the store uses, over one psycopg connection in
    autocommit mode (transactions are explicit: ``BEGIN``/``COMMIT``).

    A write transaction (``begin_write``) sends its statements in a pipeline: each is sent
    at once and its result read only when the store looks at it (a row, a count) or at the
    ``COMMIT``; so a write of five statements whose results nobody reads costs the server
    one round trip, not five. An error of a statement whose result was not read surfaces
    at the next one read, or at the ``COMMIT``, inside the same transaction, which then
    rolls back whole: a caller that turns one statement's error into its own (a unique
    violation into ``TaskExists``) reads that statement's ``rowcount`` at once.

    ``prefetch`` sends several reads in one round trip; ``execute`` then answers each of
    them from what came back, once."""

    def __init__(self, url: str, texts: Mapping[str, str | None]) -> None:
        self.url = url
        self._texts = texts
        self._conn = _connect(url)
        self._pipe: psycopg.Pipeline | None = None
        self._pipe_cm: contextlib.AbstractContextManager[psycopg.Pipeline] | None = None
        self._prefetched: dict[tuple[str, tuple[Any, ...]], PgCursor] = {}

    def _text(self, sql: str) -> str:
        text = self._texts.get(sql, sql)
        if text is None:
            raise NotImplementedError(f"query {query_name(sql)!r} has no PostgreSQL text yet "
                                      "(service/store/sql/postgres/queries.sql)")
        if text is sql:
            text = _adhoc(sql)
        return text

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None
                ) -> PgCursor:
        if self._pipe is not None:
            return self._pipelined(sql, params)
        if sql == "ROLLBACK":
            return self._rollback()
        if self._prefetched:
            try:
                cur = self._prefetched.pop((sql, _key(params)), None)
            except TypeError:  # a value that is no key (a list): read as ever
                cur = None
            if cur is not None:
                return cur
        # never None: psycopg leaves a statement without parameters as it is, and the
        # rewrite has doubled its literal %
        text, values = self._text(sql), () if params is None else params
        self.reopen_if_lost()
        idle = not self.in_transaction
        try:
            return self._run(text, values)
        except psycopg.OperationalError:
            if not (idle and self._conn.closed):
                raise
        # the server dropped the connection before this statement, which ran outside any
        # transaction (a read, or a write's BEGIN): once more on a new connection
        self.reopen_if_lost()
        return self._run(text, values)

    def begin_write(self) -> None:
        """Open the transaction's pipeline with ``BEGIN`` and the write lock as its first
        statements: a write whose results nobody reads is one round trip in all, its
        ``COMMIT``'s. A connection the server closed meanwhile (a restart, an idle
        timeout) is opened again first (``_hung_up``): learning it from a ``BEGIN`` sent
        alone would cost every write a round trip of its own."""
        if self._hung_up():
            self._conn.close()
        self.reopen_if_lost()
        self._pipe_cm = self._conn.pipeline()
        self._pipe = self._pipe_cm.__enter__()
        self._conn.cursor().execute("BEGIN")
        self._conn.cursor().execute(_WRITE_LOCK)  # type: ignore[arg-type]

    def _hung_up(self) -> bool:
        """Whether the server spoke on this idle connection: nothing was asked, so
        anything to read is its goodbye (a termination notice, the socket closed)."""
        if self._conn.closed:
            return False
        try:
            readable, _, _ = select.select([self._conn.fileno()], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            return True
        return bool(readable)

    def _pipelined(self, sql: str, params: Any) -> PgCursor:
        pipe, end = self._pipe, self._pipe_cm
        assert pipe is not None and end is not None
        if sql in ("COMMIT", "ROLLBACK"):
            self._pipe = self._pipe_cm = None
            if sql == "ROLLBACK":  # what was sent is dropped with the transaction
                self._leave_pipeline(end)
                return self.execute(sql)
            cur = self._conn.cursor()
            try:  # sending may read results already come back: an error raises here too
                cur.execute(sql)
            except BaseException:
                self._leave_pipeline(end)
                raise
            try:
                end.__exit__(None, None, None)  # every result, the first error raised
            finally:
                self._close_if_still_pipelined()
            return PgCursor(cur)
        text = self._text(sql)
        cur = (psycopg.ClientCursor(self._conn) if text in CLIENT_BOUND
               else self._conn.cursor())
        cur.execute(text, () if params is None else params)  # type: ignore[arg-type]
        return PgCursor(cur, pipe)

    def _rollback(self) -> PgCursor:
        """``ROLLBACK`` through psycopg's own, which also forgets the statements this
        connection believes prepared: a statement first sent in a pipeline that an error
        aborted was never prepared by the server (its Parse skipped), and its next use
        would fail with "prepared statement does not exist" (``DEALLOCATE ALL`` sets the
        two sides equal again). On a connection closed meanwhile there is nothing to roll
        back: the server ended its transaction with it."""
        if not self._conn.closed:
            self._conn.rollback()
        return PgCursor(None)

    def _leave_pipeline(self, end: contextlib.AbstractContextManager[psycopg.Pipeline]
                        ) -> None:
        """Out of a failed transaction's pipeline, whatever its state."""
        with contextlib.suppress(psycopg.Error):
            end.__exit__(None, None, None)
        self._close_if_still_pipelined()

    def _close_if_still_pipelined(self) -> None:
        """A connection still in pipeline mode after a failed transaction's pipeline was
        left (psycopg's exit failed partway) would run the next write inside it and fail
        there: it is closed, and the next use opens a new one (``reopen_if_lost``)."""
        if not self._conn.closed and (self._conn._pipeline is not None
                                      or self._conn.pgconn.pipeline_status):
            log.warning("closed the writing connection left in pipeline mode by a failed "
                        "transaction; the next write opens another")
            self._conn.close()

    def prefetch(self, statements: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Run ``statements`` (read-only: outside any transaction, or in a read snapshot)
        in one round trip; each is answered once by ``execute`` with the same text and
        parameters (until ``forget_prefetched``)."""
        statements = list(statements)
        self.reopen_if_lost()
        with self._conn.pipeline():
            sent = []
            for sql, params in statements:
                text = self._text(sql)
                cur = (psycopg.ClientCursor(self._conn) if text in CLIENT_BOUND
                       else self._conn.cursor())
                cur.execute(text, params)  # type: ignore[arg-type]
                sent.append(((sql, _key(params)), cur))
        # the pipeline's end has synced: every result is in
        self._prefetched = {key: PgCursor(cur) for key, cur in sent}

    def forget_prefetched(self) -> None:
        self._prefetched = {}

    def _run(self, text: str, values: Any) -> PgCursor:
        if text in CLIENT_BOUND:
            cur: psycopg.Cursor[Any] = psycopg.ClientCursor(self._conn)
            return PgCursor(cur.execute(text, values))  # type: ignore[arg-type]
        return PgCursor(self._conn.execute(text, values))  # type: ignore[arg-type]

    def executemany(self, sql: str, params: Iterable[Mapping[str, Any]]) -> PgCursor:
        text = self._text(sql)
        cur = (psycopg.ClientCursor(self._conn) if text in CLIENT_BOUND
               else self._conn.cursor())
        cur.executemany(text, list(params))  # type: ignore[arg-type]
        return PgCursor(cur, self._pipe)

    def script(self, text: str) -> None:
        """Several statements (DDL), no parameters."""
        self._conn.execute(text)  # type: ignore[arg-type]

    @property
    def in_transaction(self) -> bool:
        """Inside a transaction, or a write's pipeline (which an error can leave aborted
        with the server's status IDLE: it must still be ended, by ``ROLLBACK``)."""
        return (self._pipe is not None
                or self._conn.info.transaction_status != TransactionStatus.IDLE)

    @property
    def closed(self) -> bool:
        return self._conn.closed

    def reopen_if_lost(self) -> None:
        """A connection the server dropped is opened again (never inside a transaction:
        there is none on a lost connection)."""
        if self._conn.closed:
            self._pipe, self._pipe_cm, self._prefetched = None, None, {}
            self._conn = _connect(self.url)
            log.warning("reconnected to the database")

    def close(self) -> None:
        self._conn.close()


def _key(params: Mapping[str, Any] | Sequence[Any] | None) -> tuple[Any, ...]:
    """Parameters as a key of ``PgConnection.prefetch`` (their values are the store's:
    text, numbers, None)."""
    if params is None:
        return ()
    return tuple(params.items()) if isinstance(params, Mapping) else tuple(params)


_ADHOC: dict[str, str] = {}
_ADHOC_LOCK = threading.Lock()
_NAMES = {text: name for name, text in QUERIES.items()}


def query_name(sql: str) -> str:
    return _NAMES.get(sql, sql[:60])


def _adhoc(sql: str) -> str:
    with _ADHOC_LOCK:
        text = _ADHOC.get(sql)
        if text is None:
            try:
                text = _ADHOC[sql] = to_postgres("(ad hoc)", sql)
            except Unported as exc:
                raise NotImplementedError(str(exc)) from exc
        return text


def _connect(url: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                           row_factory=row_factory, prepare_threshold=PREPARE_THRESHOLD)
    conn.adapters.register_loader("numeric", NumericLoader)
    conn.adapters.register_dumper(bool, BoolAsInt)
    return conn


_TEXTS: dict[str, str | None] | None = None
_TEXTS_LOCK = threading.Lock()


def texts() -> Mapping[str, str | None]:
    """SQLite text -> PostgreSQL text of every named query (made once per process)."""
    global _TEXTS
    with _TEXTS_LOCK:
        if _TEXTS is None:
            pg = postgres_queries()
            _TEXTS = {QUERIES[name]: text for name, text in pg.items()}
        return _TEXTS


def learn_client_bound(conn: PgConnection) -> None:
    """Which named queries PostgreSQL cannot prepare with every parameter untyped (as a
    None or a str is sent): ``CLIENT_BOUND``, learnt once per process against the schema
    (``PREPARE`` each, then ``DEALLOCATE``). The others are bound on the server and
    prepared once run ``PREPARE_THRESHOLD`` times on a connection."""
    if _LEARNED.is_set():
        return
    from psycopg._queries import PostgresQuery
    from psycopg.adapt import Transformer

    found = set()
    for i, text in enumerate(t for t in texts().values() if t is not None):
        names = dict.fromkeys(re.findall(r"%\((\w+)\)s", text))
        query = PostgresQuery(Transformer())
        query.convert(text, dict.fromkeys(names))  # type: ignore[arg-type]
        try:
            conn._conn.execute(b"PREPARE argus_probe_%d AS " % i + query.query)
            conn._conn.execute(f"DEALLOCATE argus_probe_{i}")  # type: ignore[arg-type]
        except psycopg.OperationalError:
            raise
        except psycopg.Error:  # a parameter or an operator it cannot type without values
            found.add(text)
    CLIENT_BOUND.update(found)
    _LEARNED.set()


def storage_fault(exc: BaseException) -> str | None:
    """The database's condition behind ``exc`` (lost, down, disk full...); None for an
    error of the statement (a bug, a constraint)."""
    if not isinstance(exc, psycopg.Error):
        return None
    code = exc.sqlstate or ""
    if code in _FAULT_CODES:
        return _FAULT_CODES[code]
    if code[:2] in _FAULT_CLASSES:
        return _FAULT_CLASSES[code[:2]]
    if isinstance(exc, psycopg.OperationalError):
        return "database unavailable"
    return None


INTEGRITY_ERRORS: tuple[type[Exception], ...] = (pgerrors.IntegrityError,)
ERRORS: tuple[type[Exception], ...] = (psycopg.Error,)


def migration_files() -> list[tuple[int, Path]]:
    """``postgres/migrations/NNNN_name.sql`` by number: from the baseline up, no gaps."""
    found = sorted((int(p.name.split("_", 1)[0]), p)
                   for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    numbers = [n for n, _ in found]
    if not numbers or numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        raise ValueError(f"PostgreSQL migrations must be numbered without gaps, found {numbers}")
    return found
