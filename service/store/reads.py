"""The store's reads: each thread reads through a connection of its own.

A read runs on the calling thread's reading connection (opened on first use, closed with
the store): one statement, or one read transaction when it takes several, so a call sees
one snapshot. In WAL mode that snapshot is the last committed state, read without waiting
for the writer: the API's reads never queue behind the scheduler's transactions, nor
behind each other. ``Store`` (``service.store.writer``) adds the one writing connection and the
transactions on top of this class.

Rows are read by column name (``sqlite3.Row``) and returned as ``service.domain.rows``
dataclasses.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

from service.domain.reasons import WaitKind
from service.domain.rows import (
    MAX_SEQ,
    ActiveRow,
    AttemptRow,
    EventRow,
    RunnableRow,
    TaskRow,
)
from service.domain.states import ON_CLUSTER, RUNNABLE, TaskState
from service.policy.usage import (
    AttemptSpan,
    Summary,
    TaskPart,
    WholeTotals,
    window_totals,
)
from service.scheduling.runtimes import EndedRun
from service.store.db import connect_reader
from service.store.sql import QUERIES as Q

ACTIVE: frozenset[TaskState] = frozenset({TaskState.SUBMITTING, *ON_CLUSTER})


# The least of each owner's runnable tasks a fair-share tick looks at.
MIN_PER_USER = 16


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- decoding rows by column name --------------------------------------------------------


def _attempt(r: sqlite3.Row) -> AttemptRow:
    return AttemptRow(
        task_id=r["task_id"], attempt_no=r["attempt_no"],
        ray_submission_id=r["ray_submission_id"], ray_status=r["ray_status"],
        failure_kind=r["failure_kind"], message=r["message"],
        created_at=r["attempt_created_at"], submitted_at=r["submitted_at"],
        start_time=r["start_time"], end_time=r["end_time"], exit_code=r["exit_code"],
        stop_requested=bool(r["stop_requested"]), preempted_for=r["preempted_for"],
    )


# TaskRow's fields read from the column of the same name (sql's task_columns fragment);
# the others are built below. A new task column is a field here and a column there.
_TASK_COLUMNS = tuple(f.name for f in fields(TaskRow)
                      if f.name not in ("state", "latest_attempt", "queue_position"))


def task_row(r: sqlite3.Row, position: int | None) -> TaskRow:
    """The one decoder of a task read (``task_columns``), ``position`` its queue place."""
    return TaskRow(**{name: r[name] for name in _TASK_COLUMNS}, state=TaskState(r["state"]),
                   latest_attempt=None if r["attempt_no"] is None else _attempt(r),
                   queue_position=position)


# JobSpec fields whose value, defaults applied, is a task column (changed there: PATCH
# sets the priority): the stored JobSpec JSON leaves them out, and reading it back takes
# them from the columns, so each is stored once and never disagrees.
SPEC_COLUMNS = ("priority", "max_runtime_s")


def spec_json(spec: Any) -> str:
    """The JobSpec JSON as stored: without the fields its task's columns hold."""
    return json.dumps({k: v for k, v in dict(spec).items() if k not in SPEC_COLUMNS},
                      sort_keys=True)


def spec_of(r: sqlite3.Row) -> dict[str, Any]:
    """The stored JobSpec of a row with ``spec_json`` and the ``SPEC_COLUMNS``, the
    columns' values in place of any the JSON holds (rows stored before they were left
    out)."""
    return {**json.loads(r["spec_json"]), **{k: r[k] for k in SPEC_COLUMNS}}


TOP_PROBE = 64  # entries of the ordered index walked per top task wanted, before a sort


def _top_whole(conn: sqlite3.Connection, params: dict[str, Any], limit: int
               ) -> list[tuple[str, float]]:
    """The ``limit`` whole tasks that used the most in the window. Over most of history
    they are among the tasks that used the most of all (a walk of the ordered index, no
    sort); a window that holds fewer is read as a range and sorted."""
    mine = "" if params["user"] is None else "_of_user"
    for kind in ("first", "range"):
        rows = [(r["task_id"], r["gpu_seconds"]) for r in conn.execute(
            Q[f"usage_top_whole_{kind}{mine}"],
            {**params, "limit": limit, "probe": TOP_PROBE * limit})]
        if len(rows) == limit:
            break
    return rows


def _span(r: sqlite3.Row) -> AttemptSpan:
    return AttemptSpan(task_id=r["task_id"], attempt_no=r["attempt_no"], user=r["user"],
                       gpus=r["gpus"], start_time=r["start_time"], end_time=r["end_time"],
                       ray_status=r["ray_status"], failure_kind=r["failure_kind"])


_STATES = {state.value: state for state in TaskState}


def _runnable(r: tuple) -> RunnableRow:
    # by position, in the runnable queries' column order: a tick decodes up to
    # backfill_window rows, and by name each took twice as long
    (seq, task_id, state, user, nnodes, n_gpus_per_node, runnable_since, pending_reason,
     reason_kind, priority, retry_not_before, attempt_no, max_runtime_s) = r
    return RunnableRow(seq, task_id, _STATES[state], user, nnodes, n_gpus_per_node,
                       runnable_since, pending_reason, priority, retry_not_before, attempt_no,
                       max_runtime_s, reason_kind)


def _active(r: tuple) -> ActiveRow:
    # by position, in the active query's column order
    (task_id, state, user, nnodes, n_gpus_per_node, cancel_requested_at, priority,
     preemptions, resource_failures, max_runtime_s, save_freq, attempt_no,
     ray_submission_id, ray_status, message, start_time, submitted_at, stop_requested,
     preempted_for, waited_s) = r
    return ActiveRow(task_id, _STATES[state], user, nnodes, n_gpus_per_node, attempt_no,
                     ray_submission_id, ray_status, message, start_time, submitted_at,
                     cancel_requested_at is not None, bool(stop_requested), priority,
                     preemptions, resource_failures, _is_int(save_freq) and save_freq >= 1,
                     preempted_for, max_runtime_s,
                     max(waited_s, 0.0))  # 0 on clock skew: retry.plan refuses < 0


class StoreReads:
    """Reads of the service database (see the module docstring)."""

    def __init__(self, db_path: str) -> None:
        if db_path == ":memory:" or db_path.startswith("file::memory:"):
            raise ValueError("the store needs a database file: each thread reads through "
                             "a connection of its own")
        self.db_path = db_path
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        # the rows ``runnable`` returned last, by their columns: a row unchanged since the
        # last tick is not made again (a tick reads up to backfill_window rows, and making
        # each took more than SQLite took to read it)
        self._runnable_rows: dict[tuple, RunnableRow] = {}

    def _close_readers(self) -> None:
        with self._readers_lock:
            self._closed = True
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    def _reader(self) -> sqlite3.Connection:
        """This thread's reading connection (opened on first use). A single statement
        reads one snapshot by itself; ``_snapshot`` spans several."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            with self._readers_lock:
                if self._closed:
                    raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
                conn = connect_reader(self.db_path)
                self._readers.append(conn)
            self._local.conn = conn
        return conn

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement inside sees the same committed state."""
        conn = self._reader()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    # -- tasks, attempts, events ----------------------------------------------------------
    def task_exists(self, task_id: str) -> bool:
        row = self._reader().execute(Q["task_exists"], {"task_id": task_id}).fetchone()
        return row is not None

    def cancel_requested(self, task_id: str) -> bool:
        row = self._reader().execute(Q["cancel_requested_at"], {"task_id": task_id}).fetchone()
        return row is not None and row["cancel_requested_at"] is not None

    def get_task(self, task_id: str) -> TaskRow | None:
        """One task with its latest attempt and queue position (indexed lookups)."""
        row = self._reader().execute(Q["get_task"], {"task_id": task_id}).fetchone()
        return None if row is None else task_row(row, row["queue_position"])

    def list_tasks(self, *, state: TaskState | None = None, limit: int = 50,
                   before_seq: int | None = None, user: str | None = None,
                   reason: WaitKind | None = None) -> tuple[list[TaskRow], int | None]:
        """Newest first: up to ``limit`` tasks with ``seq < before_seq`` (from the newest
        when None), of ``user`` only when given, waiting for a reason of kind ``reason``
        only when given. Returns the page and the ``before_seq`` of the next one (None:
        last)."""
        if not _is_int(limit) or limit < 1:
            raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
        if before_seq is not None and (not _is_int(before_seq) or not 1 <= before_seq <= MAX_SEQ):
            raise ValueError(f"before_seq must be an integer in 1..{MAX_SEQ}, got {before_seq!r}")
        params: dict[str, Any] = {"before_seq": MAX_SEQ if before_seq is None else before_seq,
                                  "limit": limit + 1}
        query = "list_tasks" if user is None else "list_tasks_of_user"
        if user is not None:
            params["user"] = user
        if state is not None:
            query += "_in_state"
            params["state"] = TaskState(state).value
        if reason is not None:
            query = "list_tasks_by_reason"
            params.update(reason=WaitKind(reason).value, user=user,
                          state=None if state is None else TaskState(state).value)
        with self._snapshot() as conn:  # the positions of the rows as read
            rows = conn.execute(Q[query], params).fetchall()
            waiting = [r["seq"] for r in rows[:limit] if TaskState(r["state"]) in RUNNABLE]
            positions = {} if not waiting else {
                p["seq"]: p["pos"] for p in conn.execute(
                    Q["queue_positions"], {"seqs": json.dumps(waiting)})}
        page = [task_row(r, positions.get(r["seq"])) for r in rows[:limit]]
        return page, page[-1].seq if len(rows) > limit else None

    def list_attempts(self, task_id: str) -> list[AttemptRow]:
        rows = self._reader().execute(Q["list_attempts"], {"task_id": task_id}).fetchall()
        return [_attempt(r) for r in rows]

    def get_attempt(self, task_id: str, attempt_no: int | None = None) -> AttemptRow | None:
        """Attempt ``attempt_no`` of a task, or its latest one when None."""
        if attempt_no is None:
            query, params = "get_latest_attempt", {"task_id": task_id}
        else:
            query, params = "get_attempt", {"task_id": task_id, "attempt_no": attempt_no}
        row = self._reader().execute(Q[query], params).fetchone()
        return None if row is None else _attempt(row)

    def queue(self, user: str | None = None, *, limit: int = MAX_SEQ, offset: int = 0,
              reason: WaitKind | None = None) -> tuple[list[TaskRow], list[TaskRow]]:
        """(pending: ``limit`` runnable tasks in admission order with positions, after the
        first ``offset``; running: active tasks); only ``user``'s when given, only those
        waiting for a reason of kind ``reason`` when given, their positions still counted
        in the whole queue (one ranking for the page)."""
        params: dict[str, Any] = {"limit": limit, "offset": offset, "user": user,
                                  "reason": None if reason is None else WaitKind(reason).value}
        with self._snapshot() as conn:  # a task is in one list or the other, never both
            if reason is not None:
                pending = conn.execute(Q["queue_pending_by_reason"], params).fetchall()
                positions = {p["seq"]: p["pos"] for p in conn.execute(
                    Q["queue_positions"], {"seqs": json.dumps([r["seq"] for r in pending])})
                } if pending else {}
            elif user is None:
                pending = conn.execute(Q["queue_pending"], params).fetchall()
                positions = {r["seq"]: offset + i for i, r in enumerate(pending, start=1)}
            else:
                pending = conn.execute(Q["queue_pending_of_user"], params).fetchall()
                positions = {p["seq"]: p["pos"] for p in conn.execute(
                    Q["queue_positions"], {"seqs": json.dumps([r["seq"] for r in pending])})
                } if pending else {}
            running = conn.execute(Q["queue_running"]).fetchall()
        return (
            [task_row(r, positions.get(r["seq"])) for r in pending],
            [task_row(r, None) for r in running if user is None or r["user"] == user],
        )

    def counts_by_state(self) -> dict[str, int]:
        """Number of tasks per state (every state present, zeros included)."""
        counts = {s.value: 0 for s in TaskState}
        for r in self._reader().execute(Q["counts_by_state"]).fetchall():
            counts[r["state"]] = r["n"]
        return counts

    def counts_by_user_and_state(self) -> dict[tuple[str | None, str], int]:
        """``{(user, state): tasks}`` for the pairs that have tasks."""
        rows = self._reader().execute(Q["counts_by_user_and_state"]).fetchall()
        return {(r["user"], r["state"]): r["n"] for r in rows}

    def events(self, task_id: str) -> list[EventRow]:
        rows = self._reader().execute(Q["list_events"], {"task_id": task_id}).fetchall()
        return [
            EventRow(id=r["id"], task_id=r["task_id"], ts=r["ts"], event_type=r["event_type"],
                     payload=json.loads(r["payload_json"]))
            for r in rows
        ]

    # -- scheduler: reads ----------------------------------------------------------------
    def runnable(self, now: float, limit: int, *, per_user: bool = False
                 ) -> list[RunnableRow]:
        """Tasks with ``next_run_at <= now`` in admission order (priority, then FIFO):
        the first ``limit`` of the whole queue; or with ``per_user`` the first of each
        owner's, ``limit`` shared out among the owners but at least ``MIN_PER_USER`` each
        (fair share must see every user's head, however long another user's queue is).
        Partial index scans only."""
        known, made = self._runnable_rows, {}

        def rows_of(cur: sqlite3.Cursor) -> list[RunnableRow]:
            # plain tuples (not sqlite3.Row), and a row seen last tick unchanged is reused:
            # a tick reads up to backfill_window of them
            cur.row_factory = None
            out = []
            for columns in cur:
                found = known.get(columns)
                if found is None:
                    found = _runnable(columns)
                made[columns] = found
                out.append(found)
            return out

        if not per_user:
            out = rows_of(self._reader().execute(Q["runnable"], {"now": now, "limit": limit}))
        else:
            with self._snapshot() as conn:
                users = [r["user"] for r in conn.execute(Q["runnable_users"])]
                each = max(MIN_PER_USER, limit // max(len(users), 1))
                out = [row for u in users for row in rows_of(conn.execute(
                    Q["runnable_of_user"], {"user": u, "now": now, "limit": each}))]
            out.sort(key=lambda r: (-r.priority, r.seq))
        self._runnable_rows = made
        return out

    def active(self, states: Iterable[TaskState] = ACTIVE) -> list[ActiveRow]:
        """Active tasks (SUBMITTING/SUBMITTED/RUNNING by default) with their latest attempt.

        A tick asks five times (resolve SUBMITTING, reconcile, snapshot, watch, admit),
        most often with nothing written in between, and a read costs about 13 us a running
        task (with 48 running, 3.2 ms of a 3.5 ms tick). So the rows are read again only
        when ``PRAGMA data_version`` says a commit (by this process's writer or any other
        connection) came since this thread's last read; the rows are frozen, so sharing
        them is safe."""
        conn = self._reader()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        seen = getattr(self._local, "active", None)
        if seen is None or seen[0] != version:
            cur = conn.execute(Q["active"])
            cur.row_factory = None
            seen = (version, [_active(columns) for columns in cur])
            self._local.active = seen
        if states is ACTIVE:
            return list(seen[1])
        wanted = {TaskState(s) for s in states}
        return [row for row in seen[1] if row.state in wanted]

    # -- users and tokens ------------------------------------------------------------------
    # -- accounting ------------------------------------------------------------------------
    def usage_spans(self, window_from: float, window_to: float, user: str | None = None
                    ) -> list[AttemptSpan]:
        """Attempts that held their gang at some time in ``[window_from, window_to)``."""
        rows = self._reader().execute(Q["usage_spans"], {
            "from": window_from, "to": window_to, "user": user}).fetchall()
        return [_span(r) for r in rows]

    def usage_summary(self, window_from: float, window_to: float, now: float,
                      user: str | None, task_limit: int) -> Summary:
        """The usage in ``[window_from, window_to)`` (``user``'s only when given): per-user
        totals, and the attempts of the ``task_limit`` tasks that used the most. A task
        whose ended attempts all lie inside the window is summed from its running totals
        (one index entry); attempts are read only for the tasks that cross an edge of the
        window, those running now and the top tasks."""
        params = {"from": window_from, "to": window_to, "now": now, "user": user}
        with self._snapshot() as conn:  # the same totals and attempts throughout
            owners = [user] if user is not None else [
                r["user"] for r in conn.execute(Q["usage_owners"])]
            # a second's slack over the longest span: no rounding hides an edge task
            longest = conn.execute(Q["usage_longest_span"]).fetchone()["longest"] + 1.0
            whole, edges = [], []
            for owner in owners:
                mine = {**params, "user": owner, "longest": longest}
                row = conn.execute(Q["usage_whole_of_user"], mine).fetchone()
                whole.append(WholeTotals(owner, row["gpu_seconds"], row["failed_gpu_seconds"],
                                         row["tasks"], row["attempts"]))
                edges += [r["task_id"] for r in conn.execute(Q["usage_edges_of_user"], mine)]
            parts = self._usage_parts(conn, params, edges)
            top_whole = _top_whole(conn, params, task_limit + len(parts)) if task_limit else []
            users, top = window_totals(whole, parts, top_whole, task_limit)
            spans = [_span(r) for r in conn.execute(Q["usage_spans_of_tasks"], {
                "from": window_from, "to": window_to, "task_ids": json.dumps(top)})
                     ] if top else []
        return Summary(users, spans, sum(u.tasks for u in users))

    @staticmethod
    def _usage_parts(conn: sqlite3.Connection, params: dict[str, Any], edges: list[str]
                     ) -> list[TaskPart]:
        """The attempts of the ``edges`` tasks and those running now, clipped per task."""
        return [TaskPart(r["task_id"], r["user"], r["gpu_seconds"], r["failed_gpu_seconds"],
                         r["attempts"], r["running_attempts"], r["whole_gpu_seconds"])
                for r in conn.execute(Q["usage_parts"], {**params, "edges": json.dumps(edges)})]

    def recent_runs(self, scan: int) -> list[EndedRun]:
        """Runs that ended on their own or at their limit, among the ``scan`` attempts that
        ended last (``service.scheduling.runtimes``)."""
        return [EndedRun(r["user"], (r["nnodes"], r["n_gpus_per_node"]), r["runtime_s"],
                         r["max_runtime_s"])
                for r in self._reader().execute(Q["recent_runs"], {"scan": scan})]

    def gpus_in_use_by_user(self) -> dict[str | None, int]:
        """GPUs of each owner's active (SUBMITTING/SUBMITTED/RUNNING) tasks."""
        out: dict[str | None, int] = {}
        for row in self.active():
            out[row.user] = out.get(row.user, 0) + row.total_gpus
        return out

    def gpu_seconds_by_user(self) -> dict[str | None, float]:
        """GPU-seconds of every ended attempt, per owner (the store's running ledger)."""
        rows = self._reader().execute(Q["gpu_seconds_by_user"]).fetchall()
        return {r["user"]: float(r["gpu_seconds"] or 0.0) for r in rows}

    # -- progress and training curves --------------------------------------------------
