"""The store's read side: per-thread reading connections and the row decoders.

``Readers`` gives each thread a reading connection of its own (opened on first use,
closed with the store): a read is one statement, or one read transaction (``snapshot``)
when it takes several, so a call sees one snapshot. In WAL mode that snapshot is the last
committed state, read without waiting for the writer: the API's reads never queue behind
the scheduler's transactions, nor behind each other. Every aggregate store of
``service.store.writer.Store`` reads through the one ``Readers`` it is given.

Rows are read by column name (``sqlite3.Row``) and returned as ``service.domain.rows``
dataclasses (``task_row``, ``attempt_row``; the scheduler's hot rows by position).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import fields
from typing import Any

from service.domain.rows import ActiveRow, AttemptNode, AttemptRow, RunnableRow, TaskRow
from service.domain.states import ON_CLUSTER, TaskState
from service.jobspec.shown import SHOWN
from service.store.dialect import Engine, engine_for
from service.store.sql import shown_column

ACTIVE: frozenset[TaskState] = frozenset({TaskState.SUBMITTING, *ON_CLUSTER})




def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- decoding rows by column name --------------------------------------------------------


def attempt_row(r: sqlite3.Row, nodes: tuple[AttemptNode, ...] | None = None) -> AttemptRow:
    return AttemptRow(
        task_id=r["task_id"], attempt_no=r["attempt_no"],
        ray_submission_id=r["ray_submission_id"], ray_status=r["ray_status"],
        failure_kind=r["failure_kind"], message=r["message"],
        created_at=r["attempt_created_at"], submitted_at=r["submitted_at"],
        start_time=r["start_time"], end_time=r["end_time"], exit_code=r["exit_code"],
        stop_requested=bool(r["stop_requested"]), preempted_for=r["preempted_for"],
        nodes=nodes,
    )


# TaskRow's fields read from the column of the same name (sql's task_columns fragment);
# the others are built below. A new task column is a field here and a column there.
_TASK_COLUMNS = tuple(f.name for f in fields(TaskRow) if f.name not in (
    "state", "latest_attempt", "queue_position", "spec"))
# the JobSpec's shown fields: (name, its column in {shown_spec}, whether SQLite gives it as
# JSON text: a map or a list, decoded here)
_SHOWN = tuple((shown.name, shown_column(shown), shown.structured) for shown in SHOWN)


def task_row(r: sqlite3.Row, position: int | None,
             nodes: tuple[AttemptNode, ...] | None = None) -> TaskRow:
    """The one decoder of a task read (``task_columns``), ``position`` its queue place,
    ``nodes`` its latest attempt's (None: not read)."""
    spec = {}
    for name, column, structured in _SHOWN:
        value = r[column]
        spec[name] = json.loads(value) if structured and value is not None else value
    return TaskRow(**{name: r[name] for name in _TASK_COLUMNS}, state=TaskState(r["state"]),
                   latest_attempt=None if r["attempt_no"] is None else attempt_row(r, nodes),
                   queue_position=position, spec=spec)


# JobSpec fields whose value, defaults applied, is a task column (changed there: PATCH


_STATES = {state.value: state for state in TaskState}


def runnable_row(r: tuple) -> RunnableRow:
    # by position, in the runnable queries' column order: a tick decodes up to
    # backfill_window rows, and by name each took twice as long
    (seq, task_id, state, user, nnodes, n_gpus_per_node, runnable_since, pending_reason,
     reason_kind, priority, retry_not_before, attempt_no, max_runtime_s) = r
    return RunnableRow(seq, task_id, _STATES[state], user, nnodes, n_gpus_per_node,
                       runnable_since, pending_reason, priority, retry_not_before, attempt_no,
                       max_runtime_s, reason_kind)


def active_row(r: tuple) -> ActiveRow:
    # by position, in the active query's column order
    (task_id, state, user, nnodes, n_gpus_per_node, cancel_requested_at, priority,
     preemptions, resource_failures, max_runtime_s, save_freq, spec_json, attempt_no,
     ray_submission_id, ray_status, message, start_time, submitted_at, stop_requested,
     preempted_for, waited_s) = r
    return ActiveRow(task_id, _STATES[state], user, nnodes, n_gpus_per_node, attempt_no,
                     ray_submission_id, ray_status, message, start_time, submitted_at,
                     cancel_requested_at is not None, bool(stop_requested), priority,
                     preemptions, resource_failures, is_int(save_freq) and save_freq >= 1,
                     preempted_for, max_runtime_s,
                     max(waited_s, 0.0),  # 0 on clock skew: retry.plan refuses < 0
                     spec_json)


class Readers:
    """The reading connections, one per thread (see the module docstring)."""

    def __init__(self, db_path: str | Engine) -> None:
        # a SQLite engine refuses an in-memory database: each thread reads through a
        # connection of its own
        self.engine = engine_for(db_path) if isinstance(db_path, str) else db_path
        self.db_path = self.engine.target
        # per-thread state: the connection, and what a reader caches on it (tasks.active)
        self.local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._readers_lock:
            self._closed = True
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    def reader(self) -> sqlite3.Connection:
        """This thread's reading connection (opened on first use). A single statement
        reads one snapshot by itself; ``snapshot`` spans several."""
        conn = getattr(self.local, "conn", None)
        if conn is None:
            with self._readers_lock:
                if self._closed:
                    raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
                conn = self.engine.connect_reader()
                self._readers.append(conn)
            self.local.conn = conn
        return conn

    @contextmanager
    def prefetched(self, statements: Sequence[tuple[str, Mapping[str, Any]]]
                   ) -> Iterator[None]:
        """Inside the block, this thread's reads of ``statements`` (named query text,
        parameters) are answered from one round trip made at its start, each once
        (``PgConnection.prefetch``); a read of anything else runs as ever. A connection
        that cannot (SQLite: a read is a library call, no round trip) reads as ever; so
        does one whose prefetch failed (its reads then meet the fault themselves)."""
        conn = self.reader()
        prefetch = getattr(conn, "prefetch", None)
        if prefetch is None:
            yield
            return
        with suppress(*self.engine.errors):
            prefetch(statements)
        try:
            yield
        finally:
            conn.forget_prefetched()

    @contextmanager
    def tick_scope(self) -> Iterator[None]:
        """Around one scheduler tick, on its thread: see ``version``."""
        self.local.scope = object()
        try:
            yield
        finally:
            self.local.scope = None

    def version(self, conn: sqlite3.Connection, commits: int) -> object:
        """A value that changes after any commit that may change what this thread read
        (``commits``: this process's commits so far), for the reads a tick repeats (the
        active tasks five times, the node states three): a read is answered from this
        thread's last one while the value is unchanged.

        SQLite: the engine's ``data_version``, a library call that changes after any
        connection's commit. PostgreSQL: asking the server is a round trip (as dear as
        the read itself), so inside a tick (``tick_scope``) the value is the tick and this
        process's commits: the tick sees its own writes and this instance's at once, and
        another instance's from its next tick on (as had they come just after its first
        read). Outside a tick it asks the server."""
        scope = getattr(self.local, "scope", None)
        if scope is not None and self.engine.name != "sqlite":
            return (scope, commits)
        return self.engine.data_version(conn)

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement inside sees the same committed state."""
        conn = self.reader()
        self.engine.begin_snapshot(conn)
        try:
            yield conn
        finally:
            conn.execute("COMMIT")
