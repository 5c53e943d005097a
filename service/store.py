"""SQLite persistence for tasks, attempts and events: the only module with SQL.

* One connection, one lock: every call runs under ``self._lock`` and every write in a
  ``BEGIN IMMEDIATE`` transaction, so there is exactly one writer (SPEC A6). WAL lets
  other processes (the CLI, a backup) read meanwhile.
* Every state change is ``states.check_transition`` followed by a compare-and-set
  ``UPDATE tasks SET state=? ... WHERE task_id=? AND state=?``; zero rows raises
  ``StaleState``. The transition's event row is written in the same transaction.
* Queries that the scheduler runs every tick and the API's queue position only touch
  the partial indexes over runnable / active rows, so their cost does not grow with
  the number of finished tasks.
* A fresh database is built from ``schema.sql``; an existing one is brought up to date
  with ``migrations/NNNN_*.sql``, recorded in ``PRAGMA user_version``.
"""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from service.ids import submission_id
from service.states import ON_CLUSTER, RUNNABLE, TaskState, check_transition

SCHEMA_FILE = Path(__file__).with_name("schema.sql")
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
BUSY_TIMEOUT_MS = 10_000
MESSAGE_HEAD = 1_000
MESSAGE_TAIL = 3_000

_S = TaskState
ACTIVE: frozenset[TaskState] = frozenset({_S.SUBMITTING, *ON_CLUSTER})


# Literal on purpose and word for word the WHERE terms of the partial indexes in
# schema.sql: SQLite uses a partial index only when the query repeats its term. Queries
# name the index (INDEXED BY) so the planner cannot fall back to a sort of tasks_state_seq,
# and SQLite refuses the query outright if the terms ever drift apart.
RUNNABLE_SQL = "state IN ('QUEUED', 'PENDING_RESOURCES')"
ACTIVE_SQL = "state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')"
_RUNNABLE_VALUES = frozenset(s.value for s in RUNNABLE)


_IN_CHUNK = 500  # ids per "task_id IN (...)"; well under SQLite's variable limit


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


class StoreError(Exception):
    """Base class of the store's own errors."""


class TaskNotFound(StoreError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} not found")
        self.task_id = task_id


class TaskExists(StoreError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} already exists")
        self.task_id = task_id


class StaleState(StoreError):
    """A guarded write found the task in another state than expected (a lost race)."""

    def __init__(self, task_id: str, expected: TaskState, actual: str | None) -> None:
        super().__init__(f"task {task_id}: expected state {expected}, found {actual}")
        self.task_id = task_id
        self.expected = expected
        self.actual = actual


class InvalidCursor(ValueError):
    """A pagination cursor that this store did not hand out."""


def truncate_message(text: str | None) -> str | None:
    """Keep the head and the tail of a long message (the error is usually at the end)."""
    if text is None or len(text) <= MESSAGE_HEAD + MESSAGE_TAIL:
        return text
    cut = len(text) - MESSAGE_HEAD - MESSAGE_TAIL
    return f"{text[:MESSAGE_HEAD]}\n...[{cut} characters truncated]...\n{text[-MESSAGE_TAIL:]}"


def iso(ts: float | None) -> str | None:
    """Epoch seconds -> ISO-8601 UTC with milliseconds, e.g. 2025-12-23T14:32:01.000Z."""
    if ts is None:
        return None
    text = datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, value = raw.partition(":")
        seq = int(value)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidCursor(f"invalid cursor {cursor!r}") from exc
    if kind != "seq" or seq < 1:
        raise InvalidCursor(f"invalid cursor {cursor!r}")
    return seq


# -- views ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptView:
    task_id: str
    attempt_no: int
    ray_submission_id: str
    ray_status: str | None
    failure_kind: str | None
    message: str | None
    created_at: float
    submitted_at: float | None
    start_time: float | None
    end_time: float | None
    exit_code: int | None
    stop_requested: bool

    def summary_dict(self) -> dict[str, Any]:
        """The ``latest_attempt`` object of a task view."""
        return {
            "attempt_no": self.attempt_no,
            "ray_submission_id": self.ray_submission_id,
            "ray_status": self.ray_status,
            "start_time": iso(self.start_time),
            "end_time": iso(self.end_time),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.summary_dict(),
            "failure_kind": self.failure_kind,
            "message": self.message,
            "submitted_at": iso(self.submitted_at),
            "exit_code": self.exit_code,
            "stop_requested": self.stop_requested,
        }


@dataclass(frozen=True, slots=True)
class TaskView:
    task_id: str
    state: TaskState
    workload: str
    user: str | None
    nnodes: int
    n_gpus_per_node: int
    created_at: float
    updated_at: float
    next_run_at: float
    error_summary: str | None
    pending_reason: str | None
    cancel_requested_at: float | None
    latest_attempt: AttemptView | None
    queue_position: int | None  # 1-based among runnable tasks (FIFO); None otherwise

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_requested_at is not None

    def to_dict(self) -> dict[str, Any]:
        runnable = self.state in RUNNABLE
        return {
            "task_id": self.task_id,
            "state": self.state.value,
            "workload": self.workload,
            "user": self.user,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "desired_resources": {
                "nnodes": self.nnodes,
                "n_gpus_per_node": self.n_gpus_per_node,
                "total_gpus": self.total_gpus,
            },
            "latest_attempt": self.latest_attempt.summary_dict() if self.latest_attempt else None,
            "error_summary": self.error_summary,
            "pending_reason": self.pending_reason,
            "queue_position": self.queue_position,
            "next_run_at": iso(self.next_run_at) if runnable else None,
            "cancel_requested": self.cancel_requested,
        }


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    kind: str  # "canceled" | "stopping" | "terminal" | "not_found"
    task: TaskView | None
    ray_submission_id: str | None = None


@dataclass(frozen=True, slots=True)
class EventView:
    id: int
    task_id: str
    ts: float
    event_type: str
    payload: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "ts": iso(self.ts), "type": self.event_type,
                "payload": self.payload}


# -- rows the scheduler works with -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunnableRow:
    seq: int
    task_id: str
    state: TaskState
    nnodes: int
    n_gpus_per_node: int
    runnable_since: float
    pending_reason: str | None


@dataclass(frozen=True, slots=True)
class ActiveRow:
    """A SUBMITTING / SUBMITTED / RUNNING task with its latest attempt."""

    task_id: str
    state: TaskState
    nnodes: int
    n_gpus_per_node: int
    attempt_no: int
    ray_submission_id: str
    ray_status: str | None
    message: str | None
    start_time: float | None
    submitted_at: float | None
    cancel_requested: bool
    stop_requested: bool


@dataclass(frozen=True, slots=True)
class Claim:
    """An attempt claimed for submission (task now SUBMITTING, attempt row committed)."""

    task_id: str
    attempt_no: int
    ray_submission_id: str
    jobspec_yaml: str
    spec: dict[str, Any]
    user: str | None


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """What is known about an attempt when it ends."""

    ray_status: str | None
    failure_kind: str | None = None
    message: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class BulkTask:
    """A task row for ``Store.bulk_load`` (benchmarks and large fixtures only)."""

    task_id: str
    workload: str
    state: TaskState
    created_at: float
    nnodes: int = 1
    n_gpus_per_node: int = 1
    jobspec_yaml: str = ""
    spec: Mapping[str, Any] | None = None
    user: str | None = None


# -- schema ----------------------------------------------------------------------------


def migration_files() -> list[tuple[int, Path]]:
    """``migrations/NNNN_name.sql`` sorted by number; numbers must run 1, 2, 3 ..."""
    found = sorted(
        (int(p.name.split("_", 1)[0]), p) for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")
    )
    numbers = [n for n, _ in found]
    if numbers != list(range(1, len(found) + 1)):
        raise StoreError(f"migrations must be numbered 1..N without gaps, found {numbers}")
    return found


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def initialize(conn: sqlite3.Connection, *, from_schema: bool = True) -> int:
    """Create or upgrade the schema; returns the resulting version.

    An empty database is built from ``schema.sql`` (``from_schema``) or by running every
    migration; a database at version N gets migrations N+1.. applied, each in its own
    transaction together with its ``PRAGMA user_version``.
    """
    migrations = migration_files()
    latest = len(migrations)
    version = schema_version(conn)
    if version > latest:
        raise StoreError(f"database schema version {version} is newer than this code ({latest})")
    empty = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    if version == 0 and empty and from_schema:
        script = SCHEMA_FILE.read_text(encoding="utf-8")
        conn.executescript(f"BEGIN;\n{script}\nPRAGMA user_version = {latest};\nCOMMIT;")
        return latest
    if version == 0 and not empty:
        raise StoreError("database has tables but no schema version: not an Argus database")
    for number, path in migrations[version:]:
        script = path.read_text(encoding="utf-8")
        conn.executescript(f"BEGIN;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;")
    return latest


def connect(db_path: str) -> sqlite3.Connection:
    """A connection with the service's pragmas (WAL, busy timeout, foreign keys)."""
    if db_path != ":memory:":
        Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        db_path, isolation_level=None, check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    # WAL + NORMAL: a committed transaction survives kill -9 of the service.
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


# -- the store ---------------------------------------------------------------------------

_TASK_COLS = (
    "t.seq, t.task_id, t.state, t.workload, t.user, t.nnodes, t.n_gpus_per_node, "
    "t.created_at, t.updated_at, t.next_run_at, t.error_summary, t.pending_reason, "
    "t.cancel_requested_at, t.latest_attempt_no"
)
_ATTEMPT_COLS = (
    "a.task_id, a.attempt_no, a.ray_submission_id, a.ray_status, a.failure_kind, a.message, "
    "a.created_at, a.submitted_at, a.start_time, a.end_time, a.exit_code, a.stop_requested"
)
_ATTEMPT_JOIN = (
    "LEFT JOIN attempts a ON a.task_id = t.task_id AND a.attempt_no = t.latest_attempt_no"
)
_TASK_SELECT = f"SELECT {_TASK_COLS}, {_ATTEMPT_COLS} FROM tasks t {_ATTEMPT_JOIN}"
_N_TASK = 14


def _attempt(row: Sequence[Any]) -> AttemptView:
    return AttemptView(*row[:11], bool(row[11]))


class Store:
    """Thread-safe access to the service database (see the module docstring)."""

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self._lock = threading.RLock()
        self._conn = connect(db_path)
        try:
            initialize(self._conn)
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    # -- write helpers (inside a transaction) ------------------------------------------
    @staticmethod
    def _event(conn: sqlite3.Connection, task_id: str, now: float, kind: str,
               payload: Mapping[str, Any]) -> None:
        conn.execute(
            "INSERT INTO events (task_id, ts, event_type, payload_json) VALUES (?, ?, ?, ?)",
            (task_id, now, kind, json.dumps(payload, sort_keys=True, default=str)),
        )

    def _transition(self, conn: sqlite3.Connection, task_id: str, src: TaskState,
                    dst: TaskState, now: float, payload: Mapping[str, Any] | None = None,
                    **columns: Any) -> None:
        """Guarded ``src -> dst`` with extra column values, plus its event row."""
        check_transition(src, dst)
        sets = "".join(f", {name} = ?" for name in columns)
        cur = conn.execute(
            f"UPDATE tasks SET state = ?, updated_at = ?{sets} WHERE task_id = ? AND state = ?",
            (dst.value, now, *columns.values(), task_id, src.value),
        )
        if cur.rowcount != 1:
            row = conn.execute("SELECT state FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            raise StaleState(task_id, src, row[0])
        self._event(conn, task_id, now, "STATE_TRANSITION",
                    {"from": src.value, "to": dst.value, **(payload or {})})

    @staticmethod
    def _update_attempt(conn: sqlite3.Connection, task_id: str, attempt_no: int,
                        **columns: Any) -> None:
        sets = ", ".join(f"{name} = ?" for name in columns)
        cur = conn.execute(
            f"UPDATE attempts SET {sets} WHERE task_id = ? AND attempt_no = ?",
            (*columns.values(), task_id, attempt_no),
        )
        if cur.rowcount != 1:
            raise StoreError(f"task {task_id} has no attempt {attempt_no}")

    # -- tasks: create and read ----------------------------------------------------------
    def create_task(self, *, task_id: str, workload: str, jobspec_yaml: str,
                    spec: Mapping[str, Any], nnodes: int, n_gpus_per_node: int,
                    user: str | None, now: float) -> None:
        """Insert a QUEUED task (runnable at once) and its CREATED event.

        Returns nothing on purpose: the API answers a submit with the id and QUEUED, and
        building the full view (queue position included) would cost every POST a count
        over the queue."""
        with self._tx() as conn:
            try:
                conn.execute(
                    "INSERT INTO tasks (task_id, workload, state, jobspec_yaml, spec_json, "
                    "nnodes, n_gpus_per_node, user, created_at, updated_at, next_run_at, "
                    "runnable_since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (task_id, workload, _S.QUEUED.value, jobspec_yaml,
                     json.dumps(dict(spec), sort_keys=True), nnodes, n_gpus_per_node, user,
                     now, now, now, now),
                )
            except sqlite3.IntegrityError as exc:
                if "UNIQUE" in str(exc):
                    raise TaskExists(task_id) from exc
                raise
            self._event(conn, task_id, now, "CREATED", {"state": _S.QUEUED.value})

    def task_exists(self, task_id: str) -> bool:
        return bool(self._read("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)))

    def _view(self, row: Sequence[Any], position: int | None) -> TaskView:
        attempt = _attempt(row[_N_TASK:]) if row[_N_TASK] is not None else None
        return TaskView(
            task_id=row[1], state=TaskState(row[2]), workload=row[3], user=row[4],
            nnodes=row[5], n_gpus_per_node=row[6], created_at=row[7], updated_at=row[8],
            next_run_at=row[9], error_summary=row[10], pending_reason=row[11],
            cancel_requested_at=row[12], latest_attempt=attempt, queue_position=position,
        )

    def _position(self, seq: int) -> int:
        """1-based FIFO position among runnable tasks (an indexed COUNT over them only)."""
        row = self._conn.execute(
            f"SELECT count(*) FROM tasks INDEXED BY tasks_runnable WHERE {RUNNABLE_SQL} "
            "AND seq < ?", (seq,)
        ).fetchone()
        return int(row[0]) + 1

    def _views(self, rows: Iterable[Sequence[Any]]) -> list[TaskView]:
        return [
            self._view(r, self._position(r[0]) if r[2] in _RUNNABLE_VALUES else None)
            for r in rows
        ]

    def get_task(self, task_id: str) -> TaskView | None:
        """One task with its latest attempt and queue position (two indexed queries)."""
        with self._lock:
            row = self._conn.execute(f"{_TASK_SELECT} WHERE t.task_id = ?", (task_id,)).fetchone()
            return None if row is None else self._views([row])[0]

    def list_tasks(self, *, state: TaskState | None = None, limit: int = 50,
                   cursor: str | None = None) -> tuple[list[TaskView], str | None]:
        """Newest first; returns the page and the cursor of the next page (or None)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
        where, params = [], []
        if state is not None:
            where.append("t.state = ?")
            params.append(TaskState(state).value)
        if cursor is not None:
            where.append("t.seq < ?")
            params.append(decode_cursor(cursor))
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._lock:
            rows = self._conn.execute(
                f"{_TASK_SELECT}{clause} ORDER BY t.seq DESC LIMIT ?", (*params, limit + 1)
            ).fetchall()
            more = len(rows) > limit
            rows = rows[:limit]
            return self._views(rows), encode_cursor(rows[-1][0]) if more else None

    def list_attempts(self, task_id: str) -> list[AttemptView]:
        rows = self._read(
            f"SELECT {_ATTEMPT_COLS} FROM attempts a WHERE a.task_id = ? ORDER BY a.attempt_no",
            (task_id,),
        )
        return [_attempt(r) for r in rows]

    def get_attempt(self, task_id: str, attempt_no: int | None = None) -> AttemptView | None:
        """Attempt ``attempt_no`` of a task, or its latest one when None."""
        if attempt_no is None:
            sql = (f"SELECT {_ATTEMPT_COLS} FROM tasks t JOIN attempts a ON a.task_id = "
                   "t.task_id AND a.attempt_no = t.latest_attempt_no WHERE t.task_id = ?")
            rows = self._read(sql, (task_id,))
        else:
            rows = self._read(
                f"SELECT {_ATTEMPT_COLS} FROM attempts a WHERE a.task_id = ? AND a.attempt_no = ?",
                (task_id, attempt_no),
            )
        return _attempt(rows[0]) if rows else None

    def queue(self) -> tuple[list[TaskView], list[TaskView]]:
        """(pending: runnable tasks in FIFO order with positions, running: active tasks)."""
        with self._lock:
            pending = self._conn.execute(
                f"SELECT {_TASK_COLS}, {_ATTEMPT_COLS} FROM tasks t INDEXED BY tasks_runnable "
                f"{_ATTEMPT_JOIN} WHERE t.{RUNNABLE_SQL} ORDER BY t.seq"
            ).fetchall()
            running = self._conn.execute(
                f"SELECT {_TASK_COLS}, {_ATTEMPT_COLS} FROM tasks t INDEXED BY tasks_active "
                f"{_ATTEMPT_JOIN} WHERE t.{ACTIVE_SQL} ORDER BY t.seq"
            ).fetchall()
        return (
            [self._view(r, i) for i, r in enumerate(pending, start=1)],
            [self._view(r, None) for r in running],
        )

    def counts_by_state(self) -> dict[str, int]:
        """Number of tasks per state (every state present, zeros included)."""
        counts = {s.value: 0 for s in TaskState}
        for state, n in self._read("SELECT state, count(*) FROM tasks GROUP BY state"):
            counts[state] = n
        return counts

    def events(self, task_id: str) -> list[EventView]:
        rows = self._read(
            "SELECT id, task_id, ts, event_type, payload_json FROM events WHERE task_id = ? "
            "ORDER BY id", (task_id,),
        )
        return [EventView(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    # -- cancel --------------------------------------------------------------------------
    def cancel(self, task_id: str, now: float) -> CancelOutcome:
        """Cancel a runnable task at once; flag an active one for the scheduler to stop."""
        with self._tx() as conn:
            row = conn.execute(
                "SELECT t.state, t.cancel_requested_at, a.ray_submission_id FROM tasks t "
                "LEFT JOIN attempts a ON a.task_id = t.task_id "
                "AND a.attempt_no = t.latest_attempt_no WHERE t.task_id = ?", (task_id,),
            ).fetchone()
            if row is None:
                return CancelOutcome("not_found", None)
            state, requested, sid = TaskState(row[0]), row[1], row[2]
            if state.is_terminal():
                kind = "terminal"
            elif state in RUNNABLE:
                self._transition(conn, task_id, state, _S.CANCELED, now,
                                 {"reason": "cancel requested"}, cancel_requested_at=now,
                                 pending_reason=None, error_summary="canceled by request")
                kind = "canceled"
            else:
                if requested is None:
                    conn.execute(
                        "UPDATE tasks SET cancel_requested_at = ?, updated_at = ? "
                        "WHERE task_id = ? AND state = ?", (now, now, task_id, state.value),
                    )
                    self._event(conn, task_id, now, "CANCEL_REQUESTED",
                                {"state": state.value, "ray_submission_id": sid})
                kind = "stopping"
        return CancelOutcome(kind, self.get_task(task_id), sid)

    # -- scheduler: reads ----------------------------------------------------------------
    def runnable(self, now: float, limit: int) -> list[RunnableRow]:
        """Up to ``limit`` tasks with ``next_run_at <= now``, FIFO (partial index scan)."""
        rows = self._read(
            "SELECT seq, task_id, state, nnodes, n_gpus_per_node, runnable_since, "
            "pending_reason FROM tasks INDEXED BY tasks_runnable "
            f"WHERE {RUNNABLE_SQL} AND next_run_at <= ? "
            "ORDER BY seq LIMIT ?", (now, limit),
        )
        return [RunnableRow(r[0], r[1], TaskState(r[2]), *r[3:]) for r in rows]

    def active(self, states: Iterable[TaskState] = ACTIVE) -> list[ActiveRow]:
        """Active tasks (SUBMITTING/SUBMITTED/RUNNING by default) with their latest attempt."""
        wanted = {TaskState(s).value for s in states}
        rows = self._read(
            "SELECT t.task_id, t.state, t.nnodes, t.n_gpus_per_node, a.attempt_no, "
            "a.ray_submission_id, a.ray_status, a.message, a.start_time, a.submitted_at, "
            "t.cancel_requested_at, a.stop_requested FROM tasks t INDEXED BY tasks_active "
            "JOIN attempts a "
            "ON a.task_id = t.task_id AND a.attempt_no = t.latest_attempt_no "
            f"WHERE t.{ACTIVE_SQL} ORDER BY t.seq"
        )
        return [
            ActiveRow(r[0], TaskState(r[1]), *r[2:10], r[10] is not None, bool(r[11]))
            for r in rows
            if r[1] in wanted
        ]

    # -- scheduler: writes ---------------------------------------------------------------
    def mark_pending(self, items: Iterable[tuple[str, TaskState, str]], now: float,
                     next_run_at: float | None = None) -> int:
        """Record why runnable tasks wait: ``(task_id, expected_state, reason)`` each.

        QUEUED tasks move to PENDING_RESOURCES (with an event); PENDING_RESOURCES tasks get
        the new reason. A task no longer in its expected state (canceled meanwhile) is
        skipped, never overwritten. ``next_run_at`` defers the next look at them.
        Returns how many tasks were updated.

        One guarded ``UPDATE ... WHERE state = ? AND task_id IN (...) RETURNING`` per
        (state, reason) group: a tick that sends hundreds of tasks to wait stays one short
        transaction, and only the rows the guard let through get their event. The unary
        ``+state`` keeps SQLite on the task_id index: left to itself it walks the state
        index, i.e. every runnable row, once per group.
        """
        groups: dict[tuple[TaskState, str], list[str]] = {}
        for task_id, state, reason in items:
            if state not in RUNNABLE:
                raise ValueError(f"task {task_id}: {state} is not a runnable state")
            groups.setdefault((TaskState(state), reason), []).append(task_id)
        columns: dict[str, Any] = {"updated_at": now}
        if next_run_at is not None:
            columns["next_run_at"] = next_run_at
        changed = 0
        with self._tx() as conn:
            for (state, reason), task_ids in groups.items():
                sets = {**columns, "pending_reason": reason}
                if state == _S.QUEUED:
                    check_transition(state, _S.PENDING_RESOURCES)
                    sets["state"] = _S.PENDING_RESOURCES.value
                for chunk in _chunks(task_ids, _IN_CHUNK):
                    marks = ", ".join("?" * len(chunk))
                    assign = ", ".join(f"{name} = ?" for name in sets)
                    moved = conn.execute(
                        f"UPDATE tasks SET {assign} WHERE +state = ? AND task_id IN ({marks}) "
                        "RETURNING task_id",
                        (*sets.values(), state.value, *chunk),
                    ).fetchall()
                    changed += len(moved)
                    if state == _S.QUEUED and moved:
                        payload = json.dumps({"from": state.value,
                                              "to": _S.PENDING_RESOURCES.value,
                                              "reason": reason}, sort_keys=True)
                        conn.executemany(
                            "INSERT INTO events (task_id, ts, event_type, payload_json) "
                            "VALUES (?, ?, 'STATE_TRANSITION', ?)",
                            [(r[0], now, payload) for r in moved],
                        )
        return changed

    def claim_for_submit(self, task_id: str, expected: TaskState, now: float) -> Claim:
        """Runnable -> SUBMITTING and the attempt row, committed before Ray is called.

        The attempt number is the latest one again when Ray never accepted it
        (``submitted_at`` is NULL), else the next one: a submission id that Ray accepted
        is never reused for a new attempt.
        """
        with self._tx() as conn:
            row = conn.execute(
                "SELECT t.latest_attempt_no, a.submitted_at, t.jobspec_yaml, t.spec_json, "
                "t.user FROM tasks t LEFT JOIN attempts a ON a.task_id = t.task_id "
                "AND a.attempt_no = t.latest_attempt_no WHERE t.task_id = ?", (task_id,),
            ).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            latest, submitted_at, jobspec_yaml, spec_json, user = row
            reuse = latest >= 1 and submitted_at is None
            attempt_no = latest if reuse else latest + 1
            sid = submission_id(task_id, attempt_no)
            self._transition(conn, task_id, expected, _S.SUBMITTING, now,
                             {"attempt_no": attempt_no, "ray_submission_id": sid},
                             latest_attempt_no=attempt_no, pending_reason=None)
            if not reuse:
                conn.execute(
                    "INSERT INTO attempts (task_id, attempt_no, ray_submission_id, created_at) "
                    "VALUES (?, ?, ?, ?)", (task_id, attempt_no, sid, now),
                )
        return Claim(task_id, attempt_no, sid, jobspec_yaml, json.loads(spec_json), user)

    def mark_submitted(self, task_id: str, attempt_no: int, now: float, *,
                       already_existed: bool = False) -> None:
        """SUBMITTING -> SUBMITTED: Ray has the attempt (``already_existed``: Ray said so)."""
        with self._tx() as conn:
            self._update_attempt(conn, task_id, attempt_no, submitted_at=now,
                                 ray_status="PENDING")
            self._transition(conn, task_id, _S.SUBMITTING, _S.SUBMITTED, now,
                             {"attempt_no": attempt_no})
            self._event(conn, task_id, now, "SUBMIT",
                        {"attempt_no": attempt_no, "already_existed": already_existed})

    def release_claim(self, task_id: str, attempt_no: int, reason: str, now: float
                      ) -> TaskState:
        """SUBMITTING -> PENDING_RESOURCES: Ray never accepted the attempt; the same
        attempt number is used on the next try. A cancel requested meanwhile completes
        here (-> CANCELED). Returns the new state."""
        with self._tx() as conn:
            row = conn.execute(
                "SELECT cancel_requested_at FROM tasks WHERE task_id = ?", (task_id,)
            ).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            self._transition(conn, task_id, _S.SUBMITTING, _S.PENDING_RESOURCES, now,
                             {"attempt_no": attempt_no, "reason": reason},
                             pending_reason=reason, next_run_at=now)
            if row[0] is None:
                return _S.PENDING_RESOURCES
            self._transition(conn, task_id, _S.PENDING_RESOURCES, _S.CANCELED, now,
                             {"reason": "cancel requested"}, pending_reason=None,
                             error_summary="canceled by request")
            return _S.CANCELED

    def fail_submit(self, task_id: str, attempt_no: int, failure_kind: str, message: str,
                    now: float) -> None:
        """SUBMITTING -> FAILED: Ray refused the submission for good."""
        with self._tx() as conn:
            self._update_attempt(conn, task_id, attempt_no, failure_kind=failure_kind,
                                 message=truncate_message(message), end_time=now)
            self._transition(conn, task_id, _S.SUBMITTING, _S.FAILED, now,
                             {"attempt_no": attempt_no, "failure_kind": failure_kind},
                             error_summary=f"{failure_kind}: {message}"[:300])

    def sync_attempt(self, task_id: str, attempt_no: int, *, ray_status: str,
                     message: str | None, start_time: float | None, now: float,
                     to_running_from: TaskState | None = None) -> None:
        """Record Ray's view of a live attempt; ``to_running_from`` also moves the task
        to RUNNING (from SUBMITTED)."""
        with self._tx() as conn:
            self._update_attempt(conn, task_id, attempt_no, ray_status=ray_status,
                                 message=truncate_message(message), start_time=start_time)
            self._event(conn, task_id, now, "RAY_STATUS_SYNC",
                        {"attempt_no": attempt_no, "ray_status": ray_status})
            if to_running_from is not None:
                self._transition(conn, task_id, to_running_from, _S.RUNNING, now,
                                 {"attempt_no": attempt_no})

    def mark_stop_requested(self, task_id: str, attempt_no: int, now: float) -> None:
        """Record that ``stop`` was sent to Ray for this attempt (first time: an event)."""
        with self._tx() as conn:
            cur = conn.execute(
                "UPDATE attempts SET stop_requested = 1 WHERE task_id = ? AND attempt_no = ? "
                "AND stop_requested = 0", (task_id, attempt_no),
            )
            if cur.rowcount:
                self._event(conn, task_id, now, "STOP_REQUESTED", {"attempt_no": attempt_no})

    def _end(self, conn: sqlite3.Connection, task_id: str, attempt_no: int,
             end: AttemptEnd) -> None:
        self._update_attempt(
            conn, task_id, attempt_no, ray_status=end.ray_status,
            failure_kind=end.failure_kind, message=truncate_message(end.message),
            start_time=end.start_time, end_time=end.end_time, exit_code=end.exit_code,
        )

    def finish_attempt(self, task_id: str, expected: TaskState, attempt_no: int,
                       end: AttemptEnd, outcome: TaskState, error_summary: str | None,
                       now: float) -> None:
        """The attempt ended and so does the task (SUCCEEDED / FAILED / CANCELED)."""
        if not outcome.is_terminal():
            raise ValueError(f"finish_attempt needs a terminal outcome, got {outcome}")
        with self._tx() as conn:
            self._end(conn, task_id, attempt_no, end)
            self._transition(conn, task_id, expected, outcome, now,
                             {"attempt_no": attempt_no, "ray_status": end.ray_status,
                              "failure_kind": end.failure_kind},
                             error_summary=error_summary, pending_reason=None)

    def schedule_retry(self, task_id: str, expected: TaskState, attempt_no: int,
                       end: AttemptEnd, next_run_at: float, reason: str, now: float) -> None:
        """The attempt failed retryably: back to PENDING_RESOURCES until ``next_run_at``;
        the next claim makes attempt ``attempt_no + 1``."""
        with self._tx() as conn:
            self._end(conn, task_id, attempt_no, end)
            self._transition(conn, task_id, expected, _S.PENDING_RESOURCES, now,
                             {"attempt_no": attempt_no, "failure_kind": end.failure_kind},
                             next_run_at=next_run_at, runnable_since=next_run_at,
                             pending_reason=reason)
            self._event(conn, task_id, now, "RETRY_SCHEDULED",
                        {"failed_attempt": attempt_no, "next_attempt": attempt_no + 1,
                         "failure_kind": end.failure_kind, "next_run_at": next_run_at})

    # -- benchmarks ------------------------------------------------------------------------
    def bulk_load(self, tasks: Iterable[BulkTask]) -> int:
        """Insert many task rows in one transaction, without events or attempts.

        For benchmarks and large fixtures only: the service itself uses ``create_task``.
        """
        rows = [
            (t.task_id, t.workload, TaskState(t.state).value, t.jobspec_yaml,
             json.dumps(dict(t.spec or {}), sort_keys=True), t.nnodes, t.n_gpus_per_node,
             t.user, t.created_at, t.created_at, t.created_at, t.created_at)
            for t in tasks
        ]
        with self._tx() as conn:
            conn.executemany(
                "INSERT INTO tasks (task_id, workload, state, jobspec_yaml, spec_json, nnodes, "
                "n_gpus_per_node, user, created_at, updated_at, next_run_at, runnable_since) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows,
            )
        return len(rows)
