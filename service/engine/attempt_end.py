"""How an attempt ends: its stop, its log archived, its outcome, a retry or the end.

``AttemptEnder`` is shared by the reconcile (Ray says the job ended, or no longer knows it)
and the watches (a hung attempt, a driver whose node left): each decides *that* an attempt
ended; this module decides *what follows*: SUCCEEDED, CANCELED, FAILED, or (a retryable
failure with attempts left) back to the queue with a retry plan (``service.policy.retry``).

One thing comes first: an attempt whose task's lock is still held (a driver of the task
runs on: ``service.jobspec.submission``) is not over, whatever Ray says. Ray can lose a
job's supervisor, or the whole job, in a head failover while the driver runs on,
orphaned; retrying then would start a second driver of the task on the same checkpoint
dir. Such an attempt stays RUNNING, says why, and ends when its driver does. When Argus
wants it stopped (a cancel, a preemption, its time limit), which Ray can no longer do, it
asks the driver's watcher (``<lock>.stop``) and waits for the lock, then ends it as asked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

from service.cluster.boundary import Cluster, ClusterError, JobInfo, JobNotFound
from service.config import SchedulerSettings
from service.domain.nodes import drained_node, stopped_for
from service.domain.reasons import Preempted, Reason, RetryAfterFailure, WaitKind
from service.domain.states import FailureKind, RayStatus, TaskState
from service.engine.artifacts import Artifacts
from service.engine.ports import SchedulerStore
from service.engine.tick_report import TickReport
from service.policy import failures, retry
from service.store.writer import ActiveRow, AttemptEnd, truncate_message

log = logging.getLogger(__name__)


# In an attempt's message while its driver outlives Ray's word on its job (``_driver_runs``).
DRIVER_RUNS = "its driver still runs"


def outlived_ray(row: ActiveRow) -> bool:
    """Whether the attempt's driver ran on after Ray said its job ended: its end is when
    Argus saw the driver's lock free, not Ray's end time."""
    return DRIVER_RUNS in (row.message or "")


def ran_past_limit(row: ActiveRow, info: JobInfo, now: float) -> bool:
    """Whether an attempt that ended did so at or past its time limit (Argus stops it
    there; an attempt that failed on its own earlier is seen late only)."""
    start = info.start_time if info.start_time is not None else row.start_time
    if row.max_runtime_s is None or start is None:
        return False
    end = now if outlived_ray(row) else (info.end_time or now)
    return end >= start + row.max_runtime_s


def _first_line(text: str | None, limit: int = 200) -> str:
    line = (text or "").strip().partition("\n")[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


class AttemptEnder:
    """The effects of an attempt's end, in the store (and Ray's stop, the log archive)."""

    def __init__(self, store: SchedulerStore, cluster: Cluster, sched: SchedulerSettings,
                 artifacts: Artifacts) -> None:
        self.store = store
        self.cluster = cluster
        self.sched = sched
        self.artifacts = artifacts

    def stop(self, row: ActiveRow, now: float, reason: str | None = None) -> None:
        with contextlib.suppress(JobNotFound):  # job_info says so too
            self.cluster.stop(row.ray_submission_id)
        if not row.stop_requested:
            self.store.attempts.mark_stop_requested(row.task_id, row.attempt_no, now, reason)

    def _fresh(self, row: ActiveRow) -> ActiveRow:
        """``row`` with a cancel that committed after the tick read it. The API commits a
        cancel before it stops the job, so when the stop is what ended the job, the flag
        is there by the time Ray says so (read after Ray, not before)."""
        if row.cancel_requested or not self.store.tasks.cancel_requested(row.task_id):
            return row
        return dataclasses.replace(row, cancel_requested=True)

    def driver_alive(self, row: ActiveRow) -> bool:
        """Whether a driver of the task still holds the task's lock, whatever Ray says."""
        return self.artifacts.task_lock_held(row.task_id, row.user)

    def _driver_runs(self, row: ActiveRow, ray_status: str | None, said: str,
                     now: float) -> bool:
        """True while a driver of the task holds the task's lock: the attempt is not over.
        One Argus wants stopped is asked to stop through its watcher. The attempt's
        message says which (written when it changes)."""
        if not self.driver_alive(row):
            return False
        lock = self.artifacts.task_lock(row.task_id, row.user)
        holder = f"{self.artifacts.lock_holder(row.task_id, row.user) or 'unknown'}, " \
                 f"holding {lock}"
        past_limit = row.past_deadline(now)
        if row.cancel_requested or row.preempted_for is not None or past_limit:
            why = ("canceled" if row.cancel_requested else
                   stopped_for(row.preempted_for) if row.preempted_for is not None
                   else "time limit")
            self.artifacts.request_driver_stop(row.task_id, row.user, why)
            if past_limit and not row.stop_requested:
                self.store.attempts.mark_stop_requested(row.task_id, row.attempt_no, now,
                                                        "time_limit")
            tail = f"{DRIVER_RUNS} ({holder}): asked its watcher to stop it ({why})"
        else:
            tail = f"{DRIVER_RUNS} ({holder}): followed until it ends, then retried from " \
                   f"its checkpoint"
        message = f"{said}; {tail}"
        status = ray_status or row.ray_status or RayStatus.RUNNING.value
        if truncate_message(message) != row.message or status != row.ray_status:
            log.warning("%s: %s", row.ray_submission_id, message)
            self.store.attempts.sync_attempt(row.task_id, row.attempt_no, ray_status=status,
                                             message=message, start_time=row.start_time, now=now)
        return True

    def lost(self, row: ActiveRow, now: float, report: TickReport) -> None:
        row = self._fresh(row)
        message = f"Ray no longer knows job {row.ray_submission_id} (head restarted?)"
        if self._driver_runs(row, None, message, now):
            return
        end = AttemptEnd(row.ray_status, FailureKind.CLUSTER_LOST.value, message,
                         row.start_time, now)
        if row.cancel_requested:
            self.finish(row, end, TaskState.CANCELED, "canceled by request", now, report)
        else:
            self.failed(row, end, FailureKind.CLUSTER_LOST, message, now, report)

    def ended(self, row: ActiveRow, info: JobInfo, now: float, report: TickReport) -> None:
        row = self._fresh(row)
        status = RayStatus(info.status)
        asked = row.cancel_requested or row.preempted_for is not None
        said = f"Ray says {status.value}: {_first_line(info.message)}"
        if status is not RayStatus.SUCCEEDED and self._driver_runs(row, status.value, said,
                                                                    now):
            return
        log_text = self.archive_log(row)
        end_time = now if outlived_ray(row) else (info.end_time or now)
        base = dict(ray_status=status.value, message=info.message, start_time=info.start_time,
                    end_time=end_time, exit_code=info.exit_code)
        if not asked and failures.supervisor_lost(status, info.message):
            code = self.artifacts.read_exit_code(row.ray_submission_id, row.user)
            end = failures.driver_end(code)
            # a driver Argus stopped for its time limit (through its watcher, when Ray had
            # lost it) leaves no marker either: that is TIME_LIMIT, below, not a lost run
            stopped_at_limit = row.stop_requested and ran_past_limit(row, info, now)
            if end is failures.DriverEnd.GONE and not stopped_at_limit:
                text = (f"Ray lost the job's supervisor ({info.message.strip()}) and the "
                        f"driver left no exit marker: the run is gone")
                kind = FailureKind.CLUSTER_LOST
                ended = AttemptEnd(**{**base, "message": text}, failure_kind=kind.value)
                self.failed(row, ended, kind, text, now, report)
                return
            if code is not None:
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
            self.failed(row, end, kind, stopped_for(row.preempted_for), now, report)
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
        self.store.attempts.finish_attempt(row.task_id, row.state, row.attempt_no, end, outcome,
                                           summary, now)
        report.finished += 1

    def _preempted(self, row: ActiveRow) -> Preempted:
        """Why a preempted attempt's task waits: the task it made room for, or the drained
        node it left, with the drain's reason while the node is drained still."""
        node = drained_node(row.preempted_for)
        state = None if node is None else self.store.nodes.state(node)
        return Preempted(row.attempt_no, row.preempted_for,
                         None if state is None else state.reason)

    def failed(self, row: ActiveRow, end: AttemptEnd, kind: FailureKind,
                log_text: str | None, now: float, report: TickReport) -> None:
        """Retry a retryable failure while attempts are left; otherwise FAILED."""
        n = row.attempt_no
        own = row.spec.get("max_attempts")  # the JobSpec's own budget (None: the configured)
        budget = self.sched.max_attempts if own is None else own
        summary = failures.summarize(kind, end.message, log_text)
        if kind.retryable and (kind is FailureKind.PREEMPTED or retry.may_retry(
                retry.counted(n, row.preemptions), budget)):
            plan = retry.plan(kind, now, self.sched, attempt_no=n,
                              resource_failures=row.resource_failures,
                              preemptions=row.preemptions, waited_s=row.waited_s)
            at = max(plan.next_run_at, plan.not_before or 0.0)
            if kind is FailureKind.PREEMPTED:
                reason = Reason(WaitKind.PREEMPTION, self._preempted(row))
            else:
                reason = Reason(WaitKind.RETRY_BACKOFF, RetryAfterFailure(n, kind.value, at))
            self.store.attempts.schedule_retry(row.task_id, row.state, n, end, plan, reason, now)
            report.retried += 1
            return
        if kind.retryable:
            summary = failures.gave_up(n, budget, summary)
        self.finish(row, end, TaskState.FAILED, summary, now, report)
