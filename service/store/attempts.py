"""The attempts aggregate (``Store.attempts``): the scheduler's writes (claims,
submissions, syncs, ends, retries, preemptions), each a guarded compare-and-set with its
event in the same transaction, and the attempt reads."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.domain.ids import submission_id
from service.domain.newtask import stored_spec
from service.domain.nodes import drain_mark
from service.domain.reasons import Reason
from service.domain.rows import AttemptRow, Claim
from service.domain.states import RUNNABLE, RayStatus, TaskState, check_transition
from service.domain.writes import AttemptEnd, RetryPlan
from service.scheduling.runtimes import EndedRun
from service.store.core import Part, TaskNotFound, truncate_message
from service.store.placement import nodes_by_attempt, nodes_of
from service.store.reads import attempt_row
from service.store.sql import QUERIES as Q

_S = TaskState
log = logging.getLogger(__name__)


class AttemptStore(Part):
    """Attempts: the scheduler's writes and the attempt reads."""

    # -- scheduler: writes ---------------------------------------------------------------
    def mark_pending(self, items: Iterable[tuple[str, TaskState, Reason]], now: float,
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
        batches: dict[TaskState, list[tuple[str, str, str]]] = {}
        for task_id, state, reason in items:
            if state not in RUNNABLE:
                raise ValueError(f"task {task_id}: {state} is not a runnable state")
            batches.setdefault(TaskState(state), []).append(
                (task_id, reason.text, reason.kind.value))
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
                     jobspec_yaml=row["jobspec_yaml"], spec=stored_spec(row["spec_json"], row),
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

    def release_claim(self, task_id: str, attempt_no: int, reason: Reason, now: float
                      ) -> TaskState:
        """SUBMITTING -> PENDING_RESOURCES: Ray never accepted the attempt; the same
        attempt number is used on the next try. A cancel requested meanwhile completes
        here (-> CANCELED). Returns the new state."""
        with self._tx() as conn:
            row = conn.execute(Q["cancel_requested_at"], {"task_id": task_id}).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            self._transition(conn, task_id, _S.SUBMITTING, _S.PENDING_RESOURCES, now,
                             {"attempt_no": attempt_no, "reason": reason.text},
                             query="move_released", reason=reason.text,
                             reason_kind=reason.kind.value)
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
                       end: AttemptEnd, plan: RetryPlan, reason: Reason, now: float) -> None:
        """The attempt failed retryably: back to PENDING_RESOURCES as ``plan`` says
        (scanned from ``next_run_at``, submitted not before ``not_before``); the next
        claim makes attempt ``attempt_no + 1``."""
        with self._tx() as conn:
            self._end(conn, task_id, attempt_no, end)
            self._transition(conn, task_id, expected, _S.PENDING_RESOURCES, now,
                             {"attempt_no": attempt_no, "failure_kind": end.failure_kind,
                              "reason": reason.text},
                             query="move_retry", next_run_at=plan.next_run_at,
                             runnable_since=plan.runnable_since,
                             retry_not_before=plan.not_before,
                             resource_failures=plan.resource_failures,
                             preemptions=plan.preemptions, reason=reason.text,
                             reason_kind=reason.kind.value)
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
        extra = dict(detail or {})
        with self._tx() as conn:
            marked = self._mark_stopped(conn, victims, preemptor, now, extra)
            if marked:
                self._event(conn, preemptor, now, "PREEMPTING", {"victims": marked, **extra})
        return marked

    def request_drain_requeue(self, victims: Iterable[tuple[str, int]], node: str,
                              reason: str, now: float) -> list[str]:
        """Mark the attempts ``(task_id, attempt_no)`` as stopped because node ``node`` is
        drained with requeue (``preempted_for`` holds the node's mark: they end PREEMPTED
        and are re-queued), in one transaction with a PREEMPTION_REQUESTED event on each.
        An attempt that ended or is being stopped already is skipped. Returns the tasks
        marked."""
        with self._tx() as conn:
            return self._mark_stopped(conn, victims, drain_mark(node), now,
                                      {"node": node, "reason": reason})

    def _mark_stopped(self, conn: sqlite3.Connection, victims: Iterable[tuple[str, int]],
                      preempted_for: str, now: float, detail: Mapping[str, Any]
                      ) -> list[str]:
        """In the caller's transaction: each attempt of ``victims`` still running and not
        being stopped is marked ``preempted_for`` with its PREEMPTION_REQUESTED event
        (``detail`` joins the payload). Returns the tasks marked."""
        marked: list[str] = []
        for task_id, attempt_no in victims:
            cur = conn.execute(Q["request_preemption"], {
                "task_id": task_id, "attempt_no": attempt_no, "preempted_for": preempted_for})
            if cur.rowcount:
                marked.append(task_id)
                self._event(conn, task_id, now, "PREEMPTION_REQUESTED",
                            {"attempt_no": attempt_no, "for": preempted_for, **detail})
        return marked

    # -- reads ---------------------------------------------------------------------------
    def list_attempts(self, task_id: str) -> list[AttemptRow]:
        """A task's attempts, each with the nodes it ran on (``Store.placement``)."""
        with self._snapshot() as conn:
            rows = conn.execute(Q["list_attempts"], {"task_id": task_id}).fetchall()
            nodes = nodes_by_attempt(conn.execute(Q["attempt_nodes_of_task"],
                                                  {"task_id": task_id}))
        return [attempt_row(r, nodes.get(r["attempt_no"], ())) for r in rows]

    def get_attempt(self, task_id: str, attempt_no: int | None = None) -> AttemptRow | None:
        """Attempt ``attempt_no`` of a task, or its latest one when None."""
        if attempt_no is None:
            query, params = "get_latest_attempt", {"task_id": task_id}
        else:
            query, params = "get_attempt", {"task_id": task_id, "attempt_no": attempt_no}
        with self._snapshot() as conn:
            row = conn.execute(Q[query], params).fetchone()
            if row is None:
                return None
            nodes = nodes_of(conn.execute(Q["attempt_nodes_of_attempt"], {
                "task_id": task_id, "attempt_no": row["attempt_no"]}))
        return attempt_row(row, nodes)

    def recent_runs(self, scan: int) -> list[EndedRun]:
        """Runs that ended on their own or at their limit, among the ``scan`` attempts that
        ended last (``service.scheduling.runtimes``)."""
        return [EndedRun(r["user"], (r["nnodes"], r["n_gpus_per_node"]), r["runtime_s"],
                         r["max_runtime_s"])
                for r in self._reader().execute(Q["recent_runs"], {"scan": scan})]
