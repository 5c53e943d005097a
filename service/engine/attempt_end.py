"""How an attempt ends: its stop, its log archived, its outcome, a retry or the end.

``AttemptEnder`` is shared by the reconcile (Ray says the job ended, or no longer knows it)
and the watches (a hung attempt, a driver whose node left): each decides *that* an attempt
ended; this module decides *what follows*: SUCCEEDED, CANCELED, FAILED, or (a retryable
failure with attempts left) back to the queue with a retry plan (``service.policy.retry``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

from service.cluster.boundary import Cluster, ClusterError, JobInfo, JobNotFound
from service.config import SchedulerSettings
from service.domain.reasons import Preempted, Reason, RetryAfterFailure, WaitKind
from service.domain.states import FailureKind, RayStatus, TaskState
from service.engine.artifacts import Artifacts
from service.engine.tick_report import TickReport
from service.policy import failures, retry
from service.store.writer import ActiveRow, AttemptEnd, Store

log = logging.getLogger(__name__)


def ran_past_limit(row: ActiveRow, info: JobInfo, now: float) -> bool:
    """Whether an attempt that ended did so at or past its time limit (Argus stops it
    there; an attempt that failed on its own earlier is seen late only)."""
    start = info.start_time if info.start_time is not None else row.start_time
    if row.max_runtime_s is None or start is None:
        return False
    return (info.end_time or now) >= start + row.max_runtime_s


class AttemptEnder:
    """The effects of an attempt's end, in the store (and Ray's stop, the log archive)."""

    def __init__(self, store: Store, cluster: Cluster, sched: SchedulerSettings,
                 artifacts: Artifacts) -> None:
        self.store = store
        self.cluster = cluster
        self.sched = sched
        self.artifacts = artifacts

    def stop(self, row: ActiveRow, now: float, reason: str | None = None) -> None:
        with contextlib.suppress(JobNotFound):  # job_info says so too
            self.cluster.stop(row.ray_submission_id)
        if not row.stop_requested:
            self.store.mark_stop_requested(row.task_id, row.attempt_no, now, reason)

    def _fresh(self, row: ActiveRow) -> ActiveRow:
        """``row`` with a cancel that committed after the tick read it. The API commits a
        cancel before it stops the job, so when the stop is what ended the job, the flag
        is there by the time Ray says so (read after Ray, not before)."""
        if row.cancel_requested or not self.store.cancel_requested(row.task_id):
            return row
        return dataclasses.replace(row, cancel_requested=True)

    def lost(self, row: ActiveRow, now: float, report: TickReport) -> None:
        row = self._fresh(row)
        message = f"Ray no longer knows job {row.ray_submission_id} (head restarted?)"
        end = AttemptEnd(row.ray_status, FailureKind.CLUSTER_LOST.value, message,
                         row.start_time, now)
        if row.cancel_requested:
            self.finish(row, end, TaskState.CANCELED, "canceled by request", now, report)
        else:
            self.failed(row, end, FailureKind.CLUSTER_LOST, message, now, report)

    def ended(self, row: ActiveRow, info: JobInfo, now: float, report: TickReport) -> None:
        row = self._fresh(row)
        status = RayStatus(info.status)
        log_text = self.archive_log(row)
        base = dict(ray_status=status.value, message=info.message, start_time=info.start_time,
                    end_time=info.end_time or now, exit_code=info.exit_code)
        asked = row.cancel_requested or row.preempted_for is not None
        if not asked and failures.supervisor_lost(status, info.message):
            code = self.artifacts.read_exit_code(row.ray_submission_id, row.user)
            end = failures.driver_end(code)
            if end is failures.DriverEnd.GONE:
                text = (f"Ray lost the job's supervisor ({info.message.strip()}) and the "
                        f"driver left no exit marker: the run is gone")
                kind = FailureKind.CLUSTER_LOST
                ended = AttemptEnd(**{**base, "message": text}, failure_kind=kind.value)
                self.failed(row, ended, kind, text, now, report)
                return
            base["exit_code"] = code
            if end is failures.DriverEnd.SUCCEEDED:  # the attempt keeps Ray's own status
                summary = (f"the driver exited 0 (its exit marker); Ray lost the final "
                           f"status: {info.message.strip()}")
                self.finish(row, AttemptEnd(**base), TaskState.SUCCEEDED, summary, now,
                             report)
                return
        if status is RayStatus.SUCCEEDED:
            # A job that completed before the stop took effect did its work: say so.
            summary = "finished before the cancel took effect" if row.cancel_requested else None
            self.finish(row, AttemptEnd(**base), TaskState.SUCCEEDED, summary, now, report)
        elif row.cancel_requested:
            end = AttemptEnd(**base)
            summary = f"canceled by request (Ray status {status.value})"
            self.finish(row, end, TaskState.CANCELED, summary, now, report)
        elif row.preempted_for is not None:
            kind = FailureKind.PREEMPTED
            end = AttemptEnd(**base, failure_kind=kind.value)
            self.failed(row, end, kind, f"preempted for {row.preempted_for}", now, report)
        elif ran_past_limit(row, info, now):
            kind = FailureKind.TIME_LIMIT
            text = f"ran past its max_runtime_s ({row.max_runtime_s:g} s): stopped"
            end = AttemptEnd(**{**base, "message": text}, failure_kind=kind.value)
            self.failed(row, end, kind, text, now, report)
        else:
            kind = failures.classify(status, info.message, log_text)
            end = AttemptEnd(**base, failure_kind=kind.value)
            self.failed(row, end, kind, log_text, now, report)

    def archive_log(self, row: ActiveRow) -> str | None:
        """Best effort: Ray's driver log to the attempt's archive; None if unavailable."""
        sid = row.ray_submission_id
        try:
            text = self.cluster.logs(sid)
        except ClusterError as exc:
            log.warning("logs of %s unavailable: %s", sid, exc)
            return None
        try:
            self.artifacts.archive_log(sid, row.user, text)
        except OSError as exc:
            log.warning("archiving the log of %s failed: %s", sid, exc)
        return text

    def finish(self, row: ActiveRow, end: AttemptEnd, outcome: TaskState,
                summary: str | None, now: float, report: TickReport) -> None:
        self.store.finish_attempt(row.task_id, row.state, row.attempt_no, end, outcome,
                                  summary, now)
        report.finished += 1

    def failed(self, row: ActiveRow, end: AttemptEnd, kind: FailureKind,
                log_text: str | None, now: float, report: TickReport) -> None:
        """Retry a retryable failure while attempts are left; otherwise FAILED."""
        n = row.attempt_no
        summary = failures.summarize(kind, end.message, log_text)
        if kind.retryable and (kind is FailureKind.PREEMPTED or retry.may_retry(
                retry.counted(n, row.preemptions), self.sched.max_attempts)):
            plan = retry.plan(kind, now, self.sched, attempt_no=n,
                              resource_failures=row.resource_failures,
                              preemptions=row.preemptions)
            at = max(plan.next_run_at, plan.not_before or 0.0)
            if kind is FailureKind.PREEMPTED:
                reason = Reason(WaitKind.PREEMPTION, Preempted(n, row.preempted_for))
            else:
                reason = Reason(WaitKind.RETRY_BACKOFF, RetryAfterFailure(n, kind.value, at))
            self.store.schedule_retry(row.task_id, row.state, n, end, plan, reason, now)
            report.retried += 1
            return
        if kind.retryable:
            summary = f"gave up after {n} attempts (max_attempts={self.sched.max_attempts}); " \
                      f"last failure {summary}"
        self.finish(row, end, TaskState.FAILED, summary, now, report)
