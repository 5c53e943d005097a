"""Tasks, attempts and events in SQLite: every state write of the service, as a transaction.

* One writing connection behind one lock, each write a ``BEGIN IMMEDIATE`` transaction:
  exactly one writer. Every state change is ``states.check_transition`` followed by a
  compare-and-set (``UPDATE tasks ... WHERE task_id = :task_id AND state = :expected``);
  zero rows raises ``StaleState``. The transition's event row is written in the same
  transaction, and with it the webhook deliveries the event causes (the outbox:
  ``service.store_webhooks``).
* Reads come from ``StoreReads`` (``service.store_reads``): per-thread connections that
  never wait for this writer.
* The statements are the named queries of ``service/sql/queries.sql``; the schema and the
  connections' pragmas are ``service.db``'s; the rows are ``service.rows``' dataclasses.
* A write that fails because of the storage (disk full, read-only, locked: see
  ``db.storage_fault``) is rolled back and raises ``StorageUnavailable``; ``write_fault``
  says what happened until a write commits again (``probe_write`` tries one that changes
  nothing).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from service.db import (
    DEFAULT_SYNCHRONOUS,
    StorageUnavailable,
    connect,
    initialize,
    storage_fault,
)
from service.ids import submission_id
from service.pipeline_store import PipelineStore
from service.quotas import HOUR_S, Limits, QuotaRefusal, submit_refusal, window_start_hour
from service.rows import (
    ActiveRow,
    Admitted,
    AttemptEnd,
    AttemptRow,
    BulkTask,
    CancelKind,
    CancelOutcome,
    Claim,
    CreatedToken,
    EventRow,
    PendingGroup,
    PendingRow,
    ProgressUpdate,
    RetryPlan,
    RunnableRow,
    Sample,
    SessionRow,
    TaskRow,
    TokenRow,
    UserRow,
    UserStatusChange,
)
from service.sql import QUERIES as Q
from service.states import RUNNABLE, WAITING, RayStatus, TaskState, check_transition
from service.store_reads import (
    ACTIVE,
    MAX_SEQ,
    StoreReads,
    spec_json,
    spec_of,
    task_row,
    token_row,
    user_row,
)
from service.store_webhooks import WebhookStore
from service.store_webhooks import enqueue as enqueue_webhooks
from service.users import Role, label_problem, name_problem, new_token

# The store's API: the class, its errors, and the rows it takes and returns.
__all__ = [
    "ACTIVE", "MAX_SEQ", "ActiveRow", "AttemptEnd", "AttemptRow", "BulkTask", "CancelKind",
    "CancelOutcome", "Claim", "CreatedToken", "EventRow", "RetryPlan", "RunnableRow",
    "StaleProgress", "StaleState",
    "StorageUnavailable", "Store", "StoreError", "TaskExists", "TaskNotFound", "TaskRow",
    "TokenNotFound", "TokenRow", "TooManyTokens", "UserDisabled", "UserExists",
    "UserNotFound", "UserRow", "UserStatusChange", "truncate_message",
]

MESSAGE_HEAD = 1_000
# After a storage fault, every commit for this long is followed by a checkpoint (below)
RECOVERY_WINDOW_S = 60.0
MESSAGE_TAIL = 3_000

_S = TaskState

log = logging.getLogger(__name__)


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


class QuotaExceeded(StoreError):
    """A submission the owner's storage quota refuses (nothing was written)."""

    def __init__(self, refusal: QuotaRefusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class StaleState(StoreError):
    """A guarded write found the task in another state than expected (a lost race)."""

    def __init__(self, task_id: str, expected: TaskState, actual: str | None) -> None:
        super().__init__(f"task {task_id}: expected state {expected}, found {actual}")
        self.task_id = task_id
        self.expected = expected
        self.actual = actual


class StaleProgress(StoreError):
    """A progress write found another log offset than the one its reader started from."""

    def __init__(self, task_id: str, attempt_no: int, expected_offset: int) -> None:
        super().__init__(f"task {task_id} attempt {attempt_no}: progress moved past offset "
                         f"{expected_offset} meanwhile")
        self.task_id = task_id
        self.attempt_no = attempt_no


class UserNotFound(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"user {name} not found")
        self.name = name


class UserExists(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"user {name} already exists")
        self.name = name


class UserDisabled(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"user {name} is disabled")
        self.name = name


class TokenNotFound(StoreError):
    def __init__(self, user: str, token_id: str) -> None:
        super().__init__(f"user {user} has no token {token_id}")
        self.user = user
        self.token_id = token_id


class TooManyTokens(StoreError):
    def __init__(self, user: str, limit: int) -> None:
        super().__init__(f"user {user} already has {limit} live tokens (the limit); "
                         "revoke one first")
        self.user = user
        self.limit = limit


def _by(user: str | None) -> dict[str, str]:
    """Who did it, for an event's payload (nothing when unknown)."""
    return {} if user is None else {"by": user}


def truncate_message(text: str | None) -> str | None:
    """Keep the head and the tail of a long message (the error is usually at the end)."""
    if text is None or len(text) <= MESSAGE_HEAD + MESSAGE_TAIL:
        return text
    cut = len(text) - MESSAGE_HEAD - MESSAGE_TAIL
    return f"{text[:MESSAGE_HEAD]}\n...[{cut} characters truncated]...\n{text[-MESSAGE_TAIL:]}"


class Store(PipelineStore, StoreReads, WebhookStore):
    """Thread-safe access to the service database (see the module docstring)."""

    def __init__(self, db_path: str, *, synchronous: str = DEFAULT_SYNCHRONOUS) -> None:
        super().__init__(db_path)
        self._lock = threading.RLock()
        self._conn = connect(db_path, synchronous=synchronous)
        self._write_fault: str | None = None
        self._fault_at = float("-inf")  # monotonic time of the last storage fault
        try:
            initialize(self._conn)
        except BaseException:
            self._conn.close()
            raise

    @property
    def write_fault(self) -> str | None:
        """Why the last write failed when the storage was to blame (``"disk full"``...);
        None once a write commits again."""
        return self._write_fault

    def close(self) -> None:
        with self._lock:
            self._close_readers()
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction on the one writing connection.

        Whatever fails (the body, or the COMMIT itself) leaves no transaction open: a
        connection left inside a failed transaction would refuse every later write, long
        after the disk has room again. A storage fault becomes ``StorageUnavailable``.
        """
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
            except sqlite3.Error as exc:
                fault = storage_fault(exc)
                if fault is None:
                    raise
                self._fault(fault, exc)
                raise StorageUnavailable(fault, str(exc)) from exc
            if self._write_fault is not None:
                log.warning("database writes work again (they failed: %s)", self._write_fault)
                self._write_fault = None
            if time.monotonic() - self._fault_at < RECOVERY_WINDOW_S:
                self._checkpoint()

    def _fault(self, fault: str, exc: sqlite3.Error) -> None:
        """Record a storage fault (logged once until writes work again) and checkpoint.

        Why checkpoint: a WAL that has not reached its checkpoint size must grow to take
        the next commit, and on a nearly full disk it eats whatever space comes back,
        frame by frame, until the disk is full again (the service would fail again a few
        writes after space returned). A checkpoint copies the WAL's pages into the
        database, mostly over pages that are there already, after which the next commit
        starts the WAL again from its beginning, inside the space the file already has.
        A passive checkpoint never waits; when it cannot finish now, the next one goes on.
        """
        if self._write_fault != fault:
            log.warning("database writes fail: %s (%s); answering 503 until they work", fault,
                        exc)
        self._write_fault = fault
        self._fault_at = time.monotonic()
        self._checkpoint()

    def _checkpoint(self) -> None:
        with suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _rollback(self) -> None:
        """Roll back if a transaction is still open (SQLite ends some failed ones itself);
        a rollback that fails too leaves the connection as SQLite left it."""
        if self._conn.in_transaction:
            with suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def probe_write(self) -> None:
        """Commit a write that changes nothing (the schema version, rewritten as it is):
        it needs what any write needs (the lock, room in the WAL), so it tells whether
        writes work again. Raises ``StorageUnavailable`` while they do not."""
        with self._tx() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            conn.execute(f"PRAGMA user_version = {int(version)}")

    # -- write helpers (inside a transaction) ------------------------------------------
    @staticmethod
    def _event(conn: sqlite3.Connection, task_id: str, now: float, kind: str,
               payload: Mapping[str, Any]) -> None:
        cur = conn.execute(Q["insert_event"], {
            "task_id": task_id, "ts": now, "event_type": kind,
            "payload_json": json.dumps(payload, sort_keys=True, default=str),
        })
        # the webhook outbox, in this same transaction (never lost, never early)
        enqueue_webhooks(conn, cur.lastrowid, task_id, now, kind, payload)

    def _transition(self, conn: sqlite3.Connection, task_id: str, src: TaskState,
                    dst: TaskState, now: float, payload: Mapping[str, Any] | None = None,
                    *, query: str = "move", **params: Any) -> None:
        """Guarded ``src -> dst`` by the named ``move*`` query (``params``: its other
        values), plus the transition's event."""
        check_transition(src, dst)
        cur = conn.execute(Q[query], {
            **params, "task_id": task_id, "expected": src.value, "dst": dst.value, "now": now,
        })
        if cur.rowcount != 1:
            row = conn.execute(Q["task_state"], {"task_id": task_id}).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            raise StaleState(task_id, src, row["state"])
        self._event(conn, task_id, now, "STATE_TRANSITION",
                    {"from": src.value, "to": dst.value, **(payload or {})})

    @staticmethod
    def _update_attempt(conn: sqlite3.Connection, query: str, task_id: str, attempt_no: int,
                        **params: Any) -> None:
        cur = conn.execute(Q[query], {**params, "task_id": task_id, "attempt_no": attempt_no})
        if cur.rowcount != 1:
            raise StoreError(f"task {task_id} has no attempt {attempt_no}")

    # -- tasks: create and read ----------------------------------------------------------
    def create_task(self, *, task_id: str, workload: str, jobspec_yaml: str,
                    spec: Mapping[str, Any], nnodes: int, n_gpus_per_node: int,
                    user: str | None, now: float, priority: int = 0,
                    max_runtime_s: float | None = None, quota: Limits | None = None,
                    after: Sequence[tuple[str, str]] = (), admin: bool = False) -> None:
        """Insert a QUEUED task (runnable at once) and its CREATED event; with ``after``
        (``(condition, parent)`` pairs) a BLOCKED one and its dependencies, whose parents
        must exist and be ``user``'s (any task for an ``admin``): DependencyError else.

        With ``quota`` (the owner's limits; None: exempt), the owner's waiting tasks and
        JobSpec bytes of the last day are checked in the same transaction: over either,
        ``QuotaExceeded`` and nothing is written. The bytes are added to the owner's
        hourly bucket (hours out of the window are dropped as it goes).

        Returns nothing on purpose: the API answers a submit with the id and QUEUED, and
        building the full row (queue position included) would cost every POST a count
        over the queue."""
        stored = spec_json(spec)
        size = len(jobspec_yaml.encode("utf-8")) + len(stored.encode("utf-8"))
        first_hour = window_start_hour(now)
        state = _S.BLOCKED if after else _S.QUEUED
        with self._tx() as conn:
            if quota is not None and user is not None:
                self._check_quota(conn, user, quota, size, now, first_hour)
            try:
                conn.execute(Q["insert_task"], {
                    "task_id": task_id, "workload": workload, "state": state.value,
                    "jobspec_yaml": jobspec_yaml, "spec_json": stored, "nnodes": nnodes,
                    "n_gpus_per_node": n_gpus_per_node, "user": user, "now": now,
                    "priority": priority, "max_runtime_s": max_runtime_s,
                })
            except sqlite3.IntegrityError as exc:
                if "UNIQUE" in str(exc):
                    raise TaskExists(task_id) from exc
                raise
            if after:
                self._insert_deps(conn, task_id, after, user, admin)
            if user is not None:
                conn.execute(Q["add_user_spec_bytes"],
                             {"user": user, "hour": int(now // HOUR_S), "bytes": size})
                conn.execute(Q["drop_user_spec_bytes_before"],
                             {"user": user, "hour": first_hour})
            self._event(conn, task_id, now, "CREATED",
                        {"state": state.value, "priority": priority, **_by(user)})

    @staticmethod
    def _check_quota(conn: sqlite3.Connection, user: str, quota: Limits, size: int,
                     now: float, first_hour: int) -> None:
        waiting = conn.execute(Q["user_waiting_count"], {"user": user}).fetchone()["n"]
        hourly = [(r["hour"], r["bytes"]) for r in conn.execute(
            Q["user_spec_bytes_since"], {"user": user, "hour": first_hour})]
        refusal = submit_refusal(user, quota, waiting=waiting, hourly_bytes=hourly,
                                 new_bytes=size, now=now)
        if refusal is not None:
            raise QuotaExceeded(refusal)

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
                            {"from": old, "to": priority, **_by(by)})
        task = self.get_task(task_id)
        if task is None:  # pragma: no cover - tasks are never deleted
            raise TaskNotFound(task_id)
        return task

    # -- cancel --------------------------------------------------------------------------
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
                                 {"reason": "cancel requested", **_by(by)},
                                 query="move_canceled", error_summary="canceled by request")
                kind = CancelKind.CANCELED
            else:
                if row["cancel_requested_at"] is None:
                    conn.execute(Q["flag_cancel"],
                                 {"now": now, "task_id": task_id, "expected": state.value})
                    self._event(conn, task_id, now, "CANCEL_REQUESTED",
                                {"state": state.value, "ray_submission_id": sid, **_by(by)})
                kind = CancelKind.STOPPING
        return CancelOutcome(kind, self.get_task(task_id), sid)

    # -- scheduler: writes ---------------------------------------------------------------
    def mark_pending(self, items: Iterable[tuple[str, TaskState, str]], now: float,
                     next_run_at: float | None = None) -> int:
        """Record why runnable tasks wait: ``(task_id, expected_state, reason)`` each.

        QUEUED tasks move to PENDING_RESOURCES (with an event); PENDING_RESOURCES tasks get
        the new reason. A task no longer in its expected state (canceled meanwhile) is
        skipped, never overwritten. ``next_run_at`` defers the next look at them.
        Returns how many tasks were updated.

        One guarded statement per expected state with the (id, reason) pairs as a JSON
        array: a tick that sends hundreds of tasks to wait, for as many reasons, stays one
        short transaction, and only the rows the guard let through get their event.
        """
        batches: dict[TaskState, list[tuple[str, str]]] = {}
        for task_id, state, reason in items:
            if state not in RUNNABLE:
                raise ValueError(f"task {task_id}: {state} is not a runnable state")
            batches.setdefault(TaskState(state), []).append((task_id, reason))
        changed = 0
        with self._tx() as conn:
            for state, pairs in batches.items():
                if state == _S.QUEUED:
                    check_transition(state, _S.PENDING_RESOURCES)
                moved = conn.execute(Q["mark_pending"], {
                    "from_state": state.value, "to_state": _S.PENDING_RESOURCES.value,
                    "now": now, "next_run_at": next_run_at, "items": json.dumps(pairs),
                }).fetchall()
                changed += len(moved)
                if state == _S.QUEUED and moved:
                    conn.execute(Q["insert_pending_events"], {
                        "now": now, "from_state": state.value,
                        "to_state": _S.PENDING_RESOURCES.value,
                        "moved": json.dumps([[r["task_id"], r["pending_reason"]]
                                             for r in moved])})
        return changed

    def claim_for_submit(self, task_id: str, expected: TaskState, now: float) -> Claim:
        """Runnable -> SUBMITTING and the attempt row, committed before Ray is called.

        The attempt number is the latest one again when Ray never accepted it
        (``submitted_at`` is NULL), else the next one: a submission id that Ray accepted
        is never reused for a new attempt.
        """
        with self._tx() as conn:
            row = conn.execute(Q["claim_target"], {"task_id": task_id}).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            latest = row["latest_attempt_no"]
            reuse = latest >= 1 and row["submitted_at"] is None
            attempt_no = latest if reuse else latest + 1
            sid = submission_id(task_id, attempt_no)
            self._transition(conn, task_id, expected, _S.SUBMITTING, now,
                             {"attempt_no": attempt_no, "ray_submission_id": sid},
                             query="move_claimed", attempt_no=attempt_no)
            if not reuse:
                conn.execute(Q["insert_attempt"], {"task_id": task_id, "attempt_no": attempt_no,
                                                   "ray_submission_id": sid, "now": now})
        return Claim(task_id=task_id, attempt_no=attempt_no, ray_submission_id=sid,
                     jobspec_yaml=row["jobspec_yaml"], spec=spec_of(row),
                     user=row["user"])

    def mark_submitted(self, task_id: str, attempt_no: int, now: float, *,
                       already_existed: bool = False) -> None:
        """SUBMITTING -> SUBMITTED: Ray has the attempt (``already_existed``: Ray said so)."""
        with self._tx() as conn:
            self._update_attempt(conn, "attempt_submitted", task_id, attempt_no, now=now,
                                 ray_status=RayStatus.PENDING.value)
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
            row = conn.execute(Q["cancel_requested_at"], {"task_id": task_id}).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            self._transition(conn, task_id, _S.SUBMITTING, _S.PENDING_RESOURCES, now,
                             {"attempt_no": attempt_no, "reason": reason},
                             query="move_released", reason=reason)
            if row["cancel_requested_at"] is None:
                return _S.PENDING_RESOURCES
            self._transition(conn, task_id, _S.PENDING_RESOURCES, _S.CANCELED, now,
                             {"reason": "cancel requested"}, query="move_ended",
                             error_summary="canceled by request")
            return _S.CANCELED

    def fail_submit(self, task_id: str, attempt_no: int, failure_kind: str, message: str,
                    now: float) -> None:
        """SUBMITTING -> FAILED: Ray refused the submission for good."""
        with self._tx() as conn:
            self._update_attempt(conn, "attempt_refused", task_id, attempt_no,
                                 failure_kind=failure_kind, message=truncate_message(message),
                                 now=now)
            self._transition(conn, task_id, _S.SUBMITTING, _S.FAILED, now,
                             {"attempt_no": attempt_no, "failure_kind": failure_kind},
                             query="move_ended",
                             error_summary=f"{failure_kind}: {message}"[:300])

    def sync_attempt(self, task_id: str, attempt_no: int, *, ray_status: str,
                     message: str | None, start_time: float | None, now: float,
                     to_running_from: TaskState | None = None) -> None:
        """Record Ray's view of a live attempt; ``to_running_from`` also moves the task
        to RUNNING (from SUBMITTED)."""
        with self._tx() as conn:
            self._update_attempt(conn, "attempt_synced", task_id, attempt_no,
                                 ray_status=ray_status, message=truncate_message(message),
                                 start_time=start_time)
            self._event(conn, task_id, now, "RAY_STATUS_SYNC",
                        {"attempt_no": attempt_no, "ray_status": ray_status})
            if to_running_from is not None:
                self._transition(conn, task_id, to_running_from, _S.RUNNING, now,
                                 {"attempt_no": attempt_no})

    def note_cluster(self, task_ids: Sequence[str], now: float, event_type: str,
                     payload: Mapping[str, Any]) -> None:
        """An event on each of ``task_ids`` (attempts on the cluster) that Ray went away or
        came back: what a head restart looked like to the task, with no state change."""
        with self._tx() as conn:
            for task_id in task_ids:
                self._event(conn, task_id, now, event_type, dict(payload))

    def mark_stop_requested(self, task_id: str, attempt_no: int, now: float,
                            reason: str | None = None) -> None:
        """Record that ``stop`` was sent to Ray for this attempt (first time: an event,
        with ``reason`` when Argus stops it on its own, e.g. ``time_limit``)."""
        with self._tx() as conn:
            cur = conn.execute(Q["request_stop"], {"task_id": task_id, "attempt_no": attempt_no})
            if cur.rowcount:
                payload: dict[str, Any] = {"attempt_no": attempt_no}
                if reason is not None:
                    payload["reason"] = reason
                self._event(conn, task_id, now, "STOP_REQUESTED", payload)

    def _end(self, conn: sqlite3.Connection, task_id: str, attempt_no: int,
             end: AttemptEnd) -> None:
        self._update_attempt(
            conn, "attempt_ended", task_id, attempt_no, ray_status=end.ray_status,
            failure_kind=end.failure_kind, message=truncate_message(end.message),
            start_time=end.start_time, end_time=end.end_time, exit_code=end.exit_code,
        )
        used = {"task_id": task_id, "start_time": end.start_time, "end_time": end.end_time}
        conn.execute(Q["add_gpu_seconds"], used)
        conn.execute(Q["add_task_usage"], {**used, "failure_kind": end.failure_kind})

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
                             query="move_ended", error_summary=error_summary)

    def schedule_retry(self, task_id: str, expected: TaskState, attempt_no: int,
                       end: AttemptEnd, plan: RetryPlan, reason: str, now: float) -> None:
        """The attempt failed retryably: back to PENDING_RESOURCES as ``plan`` says
        (scanned from ``next_run_at``, submitted not before ``not_before``); the next
        claim makes attempt ``attempt_no + 1``."""
        with self._tx() as conn:
            self._end(conn, task_id, attempt_no, end)
            self._transition(conn, task_id, expected, _S.PENDING_RESOURCES, now,
                             {"attempt_no": attempt_no, "failure_kind": end.failure_kind},
                             query="move_retry", next_run_at=plan.next_run_at,
                             runnable_since=plan.runnable_since,
                             retry_not_before=plan.not_before,
                             resource_failures=plan.resource_failures,
                             preemptions=plan.preemptions, reason=reason)
            self._event(conn, task_id, now, "RETRY_SCHEDULED",
                        {"failed_attempt": attempt_no, "next_attempt": attempt_no + 1,
                         "failure_kind": end.failure_kind,
                         "next_run_at": max(plan.next_run_at, plan.not_before or 0.0)})

    def request_preemption(self, victims: Iterable[tuple[str, int]], preemptor: str,
                           now: float, detail: Mapping[str, Any] | None = None) -> list[str]:
        """Mark the attempts ``(task_id, attempt_no)`` as stopped to make room for task
        ``preemptor``, in one transaction: a PREEMPTION_REQUESTED event on each victim and
        one PREEMPTING event on the preemptor (``detail`` joins both payloads). An attempt
        that ended or was marked already is skipped. Returns the victims marked."""
        marked: list[str] = []
        extra = dict(detail or {})
        with self._tx() as conn:
            for task_id, attempt_no in victims:
                cur = conn.execute(Q["request_preemption"], {
                    "task_id": task_id, "attempt_no": attempt_no, "preempted_for": preemptor})
                if cur.rowcount:
                    marked.append(task_id)
                    self._event(conn, task_id, now, "PREEMPTION_REQUESTED",
                                {"attempt_no": attempt_no, "for": preemptor, **extra})
            if marked:
                self._event(conn, preemptor, now, "PREEMPTING", {"victims": marked, **extra})
        return marked

    # -- users and tokens ----------------------------------------------------------------
    def ensure_users(self, *, bootstrap_admin: str, default_user: str, now: float) -> int:
        """Start-up, in one transaction: the bootstrap admin exists as an enabled admin
        (the operator holding its token decides), the default user exists (as a user
        when it is someone else), and tasks created before users existed belong to the
        default user. Returns how many tasks got that owner."""
        for name in (bootstrap_admin, default_user):
            problem = name_problem(name)
            if problem:
                raise ValueError(problem)
        with self._tx() as conn:
            for name, role in ((bootstrap_admin, Role.ADMIN), (default_user, Role.USER)):
                if conn.execute(Q["get_user"], {"name": name}).fetchone() is None:
                    conn.execute(Q["insert_user"], {"name": name, "role": role.value,
                                                    "now": now})
            conn.execute(Q["make_admin"], {"name": bootstrap_admin})
            conn.execute(Q["adopt_gpu_seconds"], {"user": default_user})
            conn.execute(Q["adopt_task_usage"], {"user": default_user})
            return conn.execute(Q["adopt_ownerless_tasks"], {"user": default_user}).rowcount

    def create_user(self, name: str, role: Role, now: float) -> UserRow:
        problem = name_problem(name)
        if problem:
            raise ValueError(problem)
        with self._tx() as conn:
            try:
                conn.execute(Q["insert_user"], {"name": name, "role": Role(role).value,
                                                "now": now})
            except sqlite3.IntegrityError as exc:
                if "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc):
                    raise UserExists(name) from exc
                raise
        return UserRow(name=name, role=Role(role), enabled=True, created_at=now,
                       disabled_at=None)

    def set_user_enabled(self, name: str, enabled: bool, now: float) -> UserStatusChange:
        """Enable or disable a user (guarded: a user already in that state is left as it
        is). Tasks are not touched: active ones run to their end, runnable ones wait
        while the user is disabled (the scheduler's limit check)."""
        with self._tx() as conn:
            changed = conn.execute(Q["set_user_enabled"], {
                "name": name, "enabled": int(enabled), "now": now}).rowcount == 1
            row = conn.execute(Q["get_user"], {"name": name}).fetchone()
            if row is None:
                raise UserNotFound(name)

            def count(states: frozenset[TaskState]) -> int:
                return conn.execute(Q["user_task_counts"], {
                    "user": name, "states": json.dumps(sorted(s.value for s in states)),
                }).fetchone()["n"]

            active, runnable = count(ACTIVE), count(RUNNABLE)
        return UserStatusChange(user_row(row), changed, active, runnable)

    def create_token(self, user: str, label: str, expires_at: float | None, now: float,
                     *, max_live: int) -> CreatedToken:
        """A new token for an enabled ``user`` (at most ``max_live`` unrevoked, unexpired
        tokens each). Only its hash is stored; the secret is returned this once."""
        problem = label_problem(label)
        if problem:
            raise ValueError(f"label {problem}")
        with self._tx() as conn:
            row = conn.execute(Q["get_user"], {"name": user}).fetchone()
            if row is None:
                raise UserNotFound(user)
            if not row["enabled"]:
                raise UserDisabled(user)
            live = conn.execute(Q["live_tokens"], {"user": user, "now": now}).fetchone()["n"]
            if live >= max_live:
                raise TooManyTokens(user, max_live)
            token = new_token()
            while conn.execute(Q["token_exists"], {"token_id": token.token_id}).fetchone():
                token = new_token()  # a 48-bit id clashed: take another
            conn.execute(Q["insert_token"], {
                "token_id": token.token_id, "user": user, "label": label,
                "sha256": token.sha256, "now": now, "expires_at": expires_at,
            })
        return CreatedToken(TokenRow(token_id=token.token_id, user=user, label=label,
                                     created_at=now, last_used_at=None,
                                     expires_at=expires_at, revoked_at=None),
                            token.secret)

    def revoke_token(self, user: str, token_id: str, now: float) -> tuple[TokenRow, bool]:
        """Revoke ``user``'s token ``token_id``; ``(the token, whether this call revoked
        it)`` (False: it was revoked before, and keeps its first revocation time)."""
        with self._tx() as conn:
            changed = conn.execute(Q["revoke_token"], {
                "token_id": token_id, "user": user, "now": now}).rowcount == 1
            row = conn.execute(Q["get_token"], {"token_id": token_id}).fetchone()
            if row is None or row["user"] != user:
                raise TokenNotFound(user, token_id)
        return token_row(row), changed

    def touch_token(self, token_id: str, now: float) -> None:
        """Record that a token was used at ``now`` (callers write this at most once a
        minute per token, so reads do not become writes)."""
        with self._tx() as conn:
            conn.execute(Q["touch_token"], {"token_id": token_id, "now": now})

    # -- benchmarks ------------------------------------------------------------------------
    def bulk_load(self, tasks: Iterable[BulkTask]) -> int:
        """Insert many task rows in one transaction, without events; with one ended
        attempt for a task that has an ``attempt_span``.

        For benchmarks and large fixtures only: the service itself uses ``create_task``.
        The WAL is checkpointed at the end, as the service's own commits would have done
        on the way (every 1000 pages): the next commit does not pay for the whole load.
        """
        tasks = list(tasks)
        rows = [
            {"task_id": t.task_id, "workload": t.workload, "state": TaskState(t.state).value,
             "jobspec_yaml": t.jobspec_yaml,
             "spec_json": spec_json(t.spec or {}), "nnodes": t.nnodes,
             "n_gpus_per_node": t.n_gpus_per_node, "user": t.user, "now": t.created_at,
             "priority": t.priority, "max_runtime_s": t.max_runtime_s}
            for t in tasks
        ]
        attempts = [
            {"task_id": t.task_id, "ray_submission_id": submission_id(t.task_id, 1),
             "ray_status": RayStatus.SUCCEEDED.value, "start_time": t.attempt_span[0],
             "end_time": t.attempt_span[1], "failure_kind": None}
            for t in tasks if t.attempt_span is not None
        ]
        with self._tx() as conn:
            conn.executemany(Q["insert_task"], rows)
            conn.executemany(Q["insert_ended_attempt"], attempts)
            conn.executemany(Q["add_gpu_seconds"], attempts)
            conn.executemany(Q["add_task_usage"], attempts)
        self._checkpoint()
        return len(rows)

    # -- the web console -------------------------------------------------------------------
    def create_session(self, id_sha256: str, session: SessionRow, now: float,
                       max_per_user: int = 0) -> None:
        """Store a console session (and drop the expired ones: the table stays small).
        With ``max_per_user``, the user's oldest sessions past that many are dropped."""
        with self._tx() as conn:
            conn.execute(Q["delete_expired_sessions"], {"now": now})
            conn.execute(Q["insert_session"], {
                "id_sha256": id_sha256, "user": session.user, "token_id": session.token_id,
                "token_fp": session.token_fp, "csrf": session.csrf, "now": session.created_at,
                "expires_at": session.expires_at})
            if max_per_user:
                conn.execute(Q["drop_oldest_sessions"],
                             {"user": session.user, "keep": max_per_user})

    def delete_session(self, id_sha256: str) -> None:
        with self._tx() as conn:
            conn.execute(Q["delete_session"], {"id_sha256": id_sha256})

    def get_session(self, id_sha256: str) -> SessionRow | None:
        r = self._reader().execute(Q["get_session"], {"id_sha256": id_sha256}).fetchone()
        if r is None:
            return None
        return SessionRow(user=r["user"], token_id=r["token_id"], token_fp=r["token_fp"],
                          csrf=r["csrf"], created_at=r["created_at"],
                          expires_at=r["expires_at"])

    def queue_page(self, *, user: str | None, workload: str | None, offset: int,
                   limit: int) -> tuple[list[PendingRow], int]:
        """One page of the runnable tasks in queue order (positions counted in the whole
        queue), of ``user`` / ``workload`` only when given; and how many match."""
        params = {"user": user, "workload": workload, "offset": offset, "limit": limit}
        with self._snapshot() as conn:
            rows = conn.execute(Q["queue_pending_page"], params).fetchall()
            total = conn.execute(Q["queue_pending_count"], params).fetchone()["n"]
        return [PendingRow(
            seq=r["seq"], task_id=r["task_id"], state=TaskState(r["state"]),
            workload=r["workload"], user=r["user"], nnodes=r["nnodes"],
            n_gpus_per_node=r["n_gpus_per_node"], created_at=r["created_at"],
            runnable_since=r["runnable_since"], next_run_at=r["next_run_at"],
            pending_reason=r["pending_reason"], cancel_requested_at=r["cancel_requested_at"],
            attempts=r["latest_attempt_no"], queue_position=r["queue_position"],
            priority=r["priority"],
        ) for r in rows], total

    def pending_workloads(self) -> list[str]:
        """The workloads of the runnable tasks (the queue page's filter choices)."""
        return sorted(r["workload"] for r in self._reader().execute(Q["workloads"]))

    def pending_groups(self) -> list[PendingGroup]:
        """The runnable tasks counted by workload, owner and pending reason."""
        return [PendingGroup(r["workload"], r["user"], r["pending_reason"], r["n"], r["since"])
                for r in self._reader().execute(Q["pending_groups"])]

    def admitted_between(self, since: float, until: float) -> list[Admitted]:
        """Attempts claimed in ``(since, until]``, with how long their task waited."""
        rows = self._reader().execute(Q["admitted_since"], {"since": since, "until": until})
        return [Admitted(r["workload"], r["user"], max(0.0, r["waited_s"]), r["created_at"])
                for r in rows]

    def queue_sizes(self) -> tuple[int, int]:
        """(runnable tasks, active tasks): two indexed counts."""
        with self._snapshot() as conn:
            pending = conn.execute(Q["runnable_count"]).fetchone()["n"]
            running = conn.execute(Q["active_count"]).fetchone()["n"]
        return pending, running

    def last_sample_ts(self) -> float | None:
        return self._reader().execute(Q["last_sample_ts"]).fetchone()["ts"]

    def record_sample(self, sample: Sample, keep_s: float) -> None:
        """Add a sample and delete those older than ``keep_s`` before it (bounded table)."""
        with self._tx() as conn:
            conn.execute(Q["insert_sample"], {
                "ts": sample.ts, "pending": sample.pending, "running": sample.running,
                "gpus_used": sample.gpus_used, "gpus_total": sample.gpus_total})
            conn.execute(Q["delete_samples_before"], {"before": sample.ts - keep_s})

    def samples_since(self, since: float) -> list[Sample]:
        rows = self._reader().execute(Q["samples_since"], {"since": since}).fetchall()
        return [Sample(r["ts"], r["pending"], r["running"], r["gpus_used"], r["gpus_total"])
                for r in rows]

    def task_jobspec(self, task_id: str) -> str | None:
        """The JobSpec text of a task, as it was submitted."""
        row = self._reader().execute(Q["task_jobspec"], {"task_id": task_id}).fetchone()
        return None if row is None else row["jobspec_yaml"]

    def change_seq(self) -> int:
        """A number that grows after any task was created or moved (one row by key)."""
        return int(self._reader().execute(Q["change_seq"]).fetchone()["seq"])

    def active_tasks(self) -> list[TaskRow]:
        """SUBMITTING / SUBMITTED / RUNNING tasks with their latest attempt, in queue order
        (without reading the runnable ones, however many)."""
        return [task_row(r, None) for r in self._reader().execute(Q["queue_running"])]

    def gpu_seconds_in_window(self, window_from: float, window_to: float, now: float
                              ) -> dict[str | None, float]:
        """``{owner: GPU-seconds}`` inside ``[window_from, window_to)``, as
        ``usage.account`` totals them (running attempts counted up to ``now``)."""
        users, _ = self._usage_totals(window_from, window_to, now, None, 0)
        return {u.user: u.gpu_seconds for u in users if u.gpu_seconds > 0}

    def recent_finished(self, limit: int, user: str | None = None) -> list[TaskRow]:
        """The newest ``limit`` finished tasks (``user``'s only when given), newest first."""
        with self._snapshot() as conn:
            ids = [r["task_id"] for r in conn.execute(
                Q["recent_finished"], {"limit": limit, "user": user})]
            rows = [conn.execute(Q["get_task"], {"task_id": i}).fetchone() for i in ids]
        return [task_row(r, None) for r in rows if r is not None]

    def record_progress(self, update: ProgressUpdate, now: float) -> None:
        """What one read of an attempt's driver log added (``ProgressUpdate``), in one
        transaction guarded by the offset it read from; ``StaleProgress`` if that moved."""
        key = {"task_id": update.task_id, "attempt_no": update.attempt_no}
        p = update.progress
        with self._tx() as conn:
            conn.execute(Q["insert_progress"], {**key, "now": now})
            moved = conn.execute(Q["update_progress"], {
                **key, "expected_offset": update.expected_offset,
                "log_offset": update.log_offset, "step": p.step, "total_steps": p.total,
                "resumed_from": p.resumed_from, "first_step": p.first_step,
                "first_at": p.first_at, "last_at": p.last_at, "rate": p.rate,
                "eta_at": p.eta_at, "now": now,
            }).rowcount
            if moved != 1:
                raise StaleProgress(update.task_id, update.attempt_no, update.expected_offset)
            ids = {name: conn.execute(Q["upsert_series"], {
                **key, "key": name, "stride": stride, "seen": seen}).fetchone()["series_id"]
                for name, (stride, seen) in update.series.items()}
            conn.executemany(Q["put_point"], [
                {"series_id": ids[pt.key], "step": pt.step, "value": pt.value}
                for pt in update.points])
            conn.executemany(Q["delete_point"], [
                {"series_id": ids[name], "step": step} for name, step in update.dropped])
