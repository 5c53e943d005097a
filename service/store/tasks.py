"""The tasks aggregate: a task's row, its create, priority and cancel writes, the task
reads (one task, pages, the queue, counts, events) and the scheduler's reads of runnable
and active tasks. Every state write is a guarded compare-and-set with its event in the
same transaction (``core.WriteCore.transition``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from service.domain.ids import MAX_TRIES, TaskIdExhausted, new_task_id, submission_id
from service.domain.newtask import NewTask
from service.domain.reasons import WaitKind
from service.domain.rows import (
    MAX_SEQ,
    ActiveRow,
    EventRow,
    RunnableRow,
    TaskRow,
)
from service.domain.states import RUNNABLE, WAITING, RayStatus, TaskState
from service.domain.writes import BulkTask, CancelKind, CancelOutcome
from service.policy.idempotency import IdemKey
from service.policy.quotas import Limits, window_start_hour
from service.store.core import Part, StaleState, TaskNotFound, WriteCore, by_field
from service.store.idempotency import check_key, record_key
from service.store.inserts import (
    add_spec_bytes,
    check_quota,
    insert_deps,
    insert_task,
    taken_task_id,
)
from service.store.placement import nodes_of_json
from service.store.reads import (
    ACTIVE,
    Readers,
    active_row,
    is_int,
    runnable_row,
    task_row,
)
from service.store.sql import QUERIES as Q

_S = TaskState

# The least of each owner's runnable tasks a fair-share tick looks at.
MIN_PER_USER = 16


class TaskStore(Part):
    """Tasks: create, priority, cancel, bulk load; their reads."""

    def __init__(self, core: WriteCore, reads: Readers) -> None:
        super().__init__(core, reads)
        # the rows ``runnable`` returned last, by their columns: a row unchanged since the
        # last tick is not made again (a tick reads up to backfill_window rows, and making
        # each took more than SQLite took to read it)
        self._runnable_rows: dict[tuple, RunnableRow] = {}
        # each owner's first hour still counted when its older JobSpec bytes were last
        # dropped: once an hour is enough (the quota reads from that hour on anyway), and
        # a statement less for every other submit
        self._swept: dict[str, int] = {}

    # -- create --------------------------------------------------------------------------
    def new_id(self, prefix: str, workload: str, now: float, user: str | None,
               taken: Iterable[str] = ()) -> str:
        """A free task id (``ids.new_task_id``), none of ``taken`` either (ids chosen in
        this transaction), for a pipeline's stages (their ids are in each other's
        templates before any is inserted). On the write lane, it is still free when
        inserted. A lone task's id is minted by ``create_task`` itself, without a read."""
        taken = frozenset(taken)
        return new_task_id(prefix, workload, now,
                           lambda c: c in taken or self.task_exists(c), user=user)

    def create_task(self, task: NewTask, *, task_id: str | None = None,
                    quota: Limits | None = None, admin: bool = False,
                    key: IdemKey | None = None) -> str:
        """Insert ``task`` (QUEUED, runnable at once; or BLOCKED with its dependencies,
        whose parents must exist and be its owner's, any task's for an ``admin``:
        DependencyError else) and its CREATED event, under ``task_id`` or a fresh id
        (``new_id``); returns the id.

        With ``quota`` (the owner's limits; None: exempt), the owner's waiting tasks and
        JobSpec bytes of the last day are checked in the same transaction: over either,
        ``QuotaExceeded`` and nothing is written. The bytes are added to the owner's
        hourly bucket (hours out of the window are dropped as it goes).

        With ``key`` (its owner's ``Idempotency-Key``), a key seen before raises
        ``KeyReplayed`` (the same request: its task) or ``KeyMismatch`` before anything is
        written; a new one is kept in the same transaction as the task.

        Builds no row on purpose: the API answers a submit with the id and QUEUED, and
        the full row (queue position included) would cost every POST a count over the
        queue."""
        if task_id is not None:
            return self._create(task, task_id, quota, admin, key, checked=True)
        for _ in range(MAX_TRIES):
            # no read for a free id first: the insert itself finds a clash (one in 65,536
            # per second of a user's submits), and another id is tried; on PostgreSQL the
            # check was a round trip of its own before every submit
            minted = new_task_id(task.id_prefix, task.workload, task.created_at,
                                 lambda _: False, user=task.user)
            try:
                return self._create(task, minted, quota, admin, key, checked=False)
            except self._core.engine.integrity_errors as exc:
                if not taken_task_id(exc):
                    raise
        raise TaskIdExhausted(f"no free task id for a {task.workload} task of "
                              f"{task.user or 'nobody'} after {MAX_TRIES} tries")

    def _create(self, task: NewTask, task_id: str, quota: Limits | None, admin: bool,
                key: IdemKey | None, *, checked: bool) -> str:
        size, user, now = task.stored_bytes, task.user, task.created_at
        first_hour = window_start_hour(now)
        with self._tx() as conn:
            check_key(conn, key)
            if quota is not None and user is not None:
                check_quota(conn, user, quota, size, now, first_hour)
            insert_task(conn, task_id, task, checked=checked)
            if task.after:
                insert_deps(conn, task_id, task.after, user, admin)
            if user is not None:
                add_spec_bytes(conn, user, now, size)
                if self._swept.get(user) != first_hour:
                    conn.execute(Q["drop_user_spec_bytes_before"],
                                 {"user": user, "hour": first_hour})
                    self._swept[user] = first_hour
            self._event(conn, task_id, now, "CREATED", {
                "state": task.state.value, "priority": task.priority, **by_field(user)})
            record_key(conn, key, {"task_id": task_id, "state": task.state.value}, now)
        return task_id

    def set_priority(self, task_id: str, priority: int, now: float, by: str | None = None
                     ) -> TaskRow:
        """Change a waiting (QUEUED / PENDING_RESOURCES) task's priority, with a
        PRIORITY_CHANGED event (``by``: who asked). Raises TaskNotFound, or StaleState
        when the task is not waiting (it started or ended: its priority no longer counts).
        An unchanged value writes nothing."""
        with self._tx() as conn:
            row = conn.execute(Q["cancel_target"], {"task_id": task_id}).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            state = TaskState(row["state"])
            if state not in WAITING:
                raise StaleState(task_id, _S.PENDING_RESOURCES, state.value)
            old = row["priority"]
            if old != priority:
                cur = conn.execute(Q["set_priority"], {
                    "task_id": task_id, "expected": state.value, "priority": priority,
                    "now": now})
                if cur.rowcount != 1:  # unreachable under the writer's lock; kept as guard
                    raise StaleState(task_id, state, None)
                self._event(conn, task_id, now, "PRIORITY_CHANGED",
                            {"from": old, "to": priority, **by_field(by)})
        task = self.get_task(task_id)
        if task is None:  # pragma: no cover - tasks are never deleted
            raise TaskNotFound(task_id)
        return task

    def cancel(self, task_id: str, now: float, by: str | None = None) -> CancelOutcome:
        """Cancel a runnable task at once; flag an active one for the scheduler to stop.
        ``by``: who asked (recorded in the event)."""
        with self._tx() as conn:
            row = conn.execute(Q["cancel_target"], {"task_id": task_id}).fetchone()
            if row is None:
                return CancelOutcome(CancelKind.NOT_FOUND, None)
            state, sid = TaskState(row["state"]), row["ray_submission_id"]
            if state.is_terminal():
                kind = CancelKind.TERMINAL
            elif state in WAITING:
                self._transition(conn, task_id, state, _S.CANCELED, now,
                                 {"reason": "cancel requested", **by_field(by)},
                                 query="move_canceled", error_summary="canceled by request")
                kind = CancelKind.CANCELED
            else:
                if row["cancel_requested_at"] is None:
                    conn.execute(Q["flag_cancel"],
                                 {"now": now, "task_id": task_id, "expected": state.value})
                    self._event(conn, task_id, now, "CANCEL_REQUESTED",
                                {"state": state.value, "ray_submission_id": sid, **by_field(by)})
                kind = CancelKind.STOPPING
        return CancelOutcome(kind, self.get_task(task_id), sid)


    # -- benchmarks ------------------------------------------------------------------------
    def bulk_load(self, tasks: Iterable[BulkTask]) -> int:
        """Insert many task rows in one transaction, without events; with one ended
        attempt for a task that has an ``attempt_span``.

        For benchmarks and large fixtures only: the service itself uses ``create_task``.
        The WAL is checkpointed at the end, as the service's own commits would have done
        on the way (every 1000 pages): the next commit does not pay for the whole load.
        """
        tasks = list(tasks)
        attempts = [
            {"task_id": t.task_id, "ray_submission_id": submission_id(t.task_id, 1),
             "ray_status": RayStatus.SUCCEEDED.value, "start_time": t.attempt_span[0],
             "end_time": t.attempt_span[1], "failure_kind": None}
            for t in tasks if t.attempt_span is not None
        ]
        with self._tx() as conn:  # the one insert's row, many at once
            conn.executemany(Q["insert_task"], [t.new_task().row(t.task_id, TaskState(t.state))
                                                for t in tasks])
            conn.executemany(Q["insert_ended_attempt"], attempts)
            conn.executemany(Q["add_gpu_seconds"], attempts)
            conn.executemany(Q["add_task_usage"], attempts)
        self._core.checkpoint()
        return len(tasks)

    # -- reads ---------------------------------------------------------------------------
    def task_exists(self, task_id: str) -> bool:
        if "\x00" in task_id:  # no id holds NUL (PostgreSQL's text could not even hold it)
            return False
        row = self._reader().execute(Q["task_exists"], {"task_id": task_id}).fetchone()
        return row is not None

    def cancel_requested(self, task_id: str) -> bool:
        row = self._reader().execute(Q["cancel_requested_at"], {"task_id": task_id}).fetchone()
        return row is not None and row["cancel_requested_at"] is not None

    def get_task(self, task_id: str) -> TaskRow | None:
        """One task with its latest attempt and queue position (indexed lookups); None for
        an id no task has (one holding NUL included: PostgreSQL's text cannot hold it)."""
        if "\x00" in task_id:
            return None
        row = self._reader().execute(Q["get_task"], {"task_id": task_id}).fetchone()
        if row is None:
            return None
        # one task: its latest attempt's nodes too (a task list leaves them unread)
        return task_row(row, row["queue_position"], nodes_of_json(row["latest_nodes"]))

    def list_tasks(self, *, state: TaskState | None = None, limit: int = 50,
                   before_seq: int | None = None, user: str | None = None,
                   reason: WaitKind | None = None, labels: Mapping[str, str] | None = None
                   ) -> tuple[list[TaskRow], int | None]:
        """Newest first: up to ``limit`` tasks with ``seq < before_seq`` (from the newest
        when None), of ``user`` only when given, waiting for a reason of kind ``reason``
        only when given, with every label of ``labels`` when given. Returns the page and
        the ``before_seq`` of the next one (None: last)."""
        if not is_int(limit) or limit < 1:
            raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
        if before_seq is not None and (not is_int(before_seq) or not 1 <= before_seq <= MAX_SEQ):
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
        if labels and any("\x00" in value for value in labels.values()):
            # the API's "no task has both" (one key asked twice); no stored label holds NUL
            # (a JobSpec's labels are printable), and PostgreSQL's jsonb could not read it
            return [], None
        if labels:
            query = "list_tasks_by_labels"
            params.update(labels=json.dumps(dict(labels)), user=user,
                          reason=None if reason is None else WaitKind(reason).value,
                          state=None if state is None else TaskState(state).value)
        with self._snapshot() as conn:  # the positions of the rows as read
            rows = conn.execute(Q[query], params).fetchall()
            waiting = [r["seq"] for r in rows[:limit] if TaskState(r["state"]) in RUNNABLE]
            positions = {} if not waiting else {
                p["seq"]: p["pos"] for p in conn.execute(
                    Q["queue_positions"], {"seqs": json.dumps(waiting)})}
        page = [task_row(r, positions.get(r["seq"])) for r in rows[:limit]]
        return page, page[-1].seq if len(rows) > limit else None

    def queue(self, user: str | None = None, *, limit: int = MAX_SEQ, offset: int = 0,
              reason: WaitKind | None = None) -> tuple[list[TaskRow], list[TaskRow]]:
        """(pending: ``limit`` runnable tasks in admission order with positions, after the
        first ``offset``; running: active tasks); only ``user``'s when given, only those
        waiting for a reason of kind ``reason`` when given, their positions still counted
        in the whole queue (one statement for the page: queue_positions)."""
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
                    found = runnable_row(columns)
                made[columns] = found
                out.append(found)
            return out

        if not per_user:
            out = rows_of(self._reader().execute(Q["runnable"], {"now": now, "limit": limit}))
        else:
            with self._snapshot() as conn:
                users = [r["user"] for r in conn.execute(Q["runnable_users"])]
                each = max(MIN_PER_USER, limit // max(len(users), 1))
                heads = [(Q["runnable_of_user"], {"user": u, "now": now, "limit": each})
                         for u in users]
                with self._reads.prefetched(heads):  # PostgreSQL: one round trip for all
                    out = [row for sql, params in heads
                           for row in rows_of(conn.execute(sql, params))]
            out.sort(key=lambda r: (-r.priority, r.seq))
        self._runnable_rows = made
        return out

    def active(self, states: Iterable[TaskState] = ACTIVE) -> list[ActiveRow]:
        """Active tasks (SUBMITTING/SUBMITTED/RUNNING by default) with their latest attempt.

        A tick asks five times (resolve SUBMITTING, reconcile, snapshot, watch, admit),
        most often with nothing written in between, and a read costs about 13 us a running
        task (with 48 running, 3.2 ms of a 3.5 ms tick). So the rows are read again only
        when a commit (by this process's writer or any other connection) may have come
        since this thread's last read (``Readers.version``); the rows are frozen, so
        sharing them is safe."""
        rows = self._reread_on_change("active", _read_active)
        if states is ACTIVE:
            return rows
        wanted = {TaskState(s) for s in states}
        return [row for row in rows if row.state in wanted]

    def gpus_in_use_by_user(self) -> dict[str | None, int]:
        """GPUs of each owner's active (SUBMITTING/SUBMITTED/RUNNING) tasks."""
        out: dict[str | None, int] = {}
        for row in self.active():
            out[row.user] = out.get(row.user, 0) + row.total_gpus
        return out


def _read_active(conn: sqlite3.Connection) -> list[ActiveRow]:
    cur = conn.execute(Q["active"])
    cur.row_factory = None
    return [active_row(columns) for columns in cur]
