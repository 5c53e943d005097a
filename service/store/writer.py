"""Tasks, attempts and events in SQLite: every state write of the service, as a transaction.

* One writing connection behind one lock, each write a ``BEGIN IMMEDIATE`` transaction:
  exactly one writer. Every state change is ``states.check_transition`` followed by a
  compare-and-set (``UPDATE tasks ... WHERE task_id = :task_id AND state = :expected``);
  zero rows raises ``StaleState``. The transition's event row is written in the same
  transaction, and with it the webhook deliveries the event causes (the outbox:
  ``service.store.webhooks``).
* ``Store`` is one object made of parts, by job: this module's task writes (create,
  priority, cancel, bulk load); ``store_core`` (the writer, faults, events, guarded moves,
  the errors); ``store_attempts`` (the scheduler's and the log follower's writes);
  ``store_progress`` (training progress from the driver logs); ``store_users`` (users,
  tokens, console sessions); ``store_console`` (the console's and
  the metrics' reads, queue samples); ``pipeline_store`` and ``store_webhooks``.
* Reads come from ``StoreReads`` (``service.store.reads``): per-thread connections that
  never wait for this writer.
* The statements are the named queries of ``service/store/sql/queries.sql``; the schema
  and the connections' pragmas are ``service.store.db``'s; the rows are
  ``service.domain.rows``' dataclasses.
* A write that fails because of the storage (disk full, read-only, locked: see
  ``db.storage_fault``) is rolled back and raises ``StorageUnavailable``; ``write_fault``
  says what happened until a write commits again (``probe_write`` tries one that changes
  nothing).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.domain.ids import submission_id
from service.domain.rows import (
    ActiveRow,
    AttemptRow,
    Claim,
    CreatedToken,
    EventRow,
    RunnableRow,
    TaskRow,
    TokenRow,
    UserRow,
    UserStatusChange,
)
from service.domain.states import WAITING, RayStatus, TaskState
from service.domain.writes import (
    AttemptEnd,
    BulkTask,
    CancelKind,
    CancelOutcome,
    RetryPlan,
)
from service.policy.quotas import HOUR_S, Limits, submit_refusal, window_start_hour
from service.store.attempts import AttemptWrites
from service.store.console import ConsoleReads
from service.store.core import (
    QuotaExceeded,
    StaleProgress,
    StaleState,
    StoreError,
    TaskExists,
    TaskNotFound,
    TokenNotFound,
    TooManyTokens,
    UserDisabled,
    UserExists,
    UserNotFound,
    by_field,
    truncate_message,
)
from service.store.db import StorageUnavailable
from service.store.pipelines import PipelineStore
from service.store.progress import ProgressStore
from service.store.reads import ACTIVE, MAX_SEQ, spec_json
from service.store.sql import QUERIES as Q
from service.store.users import UserStore
from service.store.webhooks import WebhookStore

# The store's API: the class, its errors, and the rows it takes and returns.
__all__ = [
    "ACTIVE", "MAX_SEQ", "ActiveRow", "AttemptEnd", "AttemptRow", "BulkTask", "CancelKind",
    "CancelOutcome", "Claim", "CreatedToken", "EventRow", "RetryPlan", "RunnableRow",
    "StaleProgress", "StaleState",
    "StorageUnavailable", "Store", "StoreError", "TaskExists", "TaskNotFound", "TaskRow",
    "TokenNotFound", "TokenRow", "TooManyTokens", "UserDisabled", "UserExists",
    "UserNotFound", "UserRow", "UserStatusChange", "truncate_message",
]

_S = TaskState
log = logging.getLogger(__name__)


class Store(AttemptWrites, ProgressStore, UserStore, ConsoleReads, PipelineStore,
            WebhookStore):
    """Thread-safe access to the service database (see the module docstring)."""

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
                        {"state": state.value, "priority": priority, **by_field(user)})

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
                            {"from": old, "to": priority, **by_field(by)})
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
