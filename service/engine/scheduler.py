"""The scheduler: one ``tick(now)`` that moves every task one step.

A tick, in order:

0. **Leftover SUBMITTING rows** (a crash, or Ray unreachable at start-up) are resolved by
   their deterministic submission id: Ray knows it -> SUBMITTED; Ray does not -> back to
   PENDING_RESOURCES, to be submitted again under the same id.
1. **Reconcile** every SUBMITTED/RUNNING attempt with ``cluster.job_info``; a requested
   cancel sends ``stop`` every tick until Ray confirms. Ended attempts get their driver
   log archived and classified: SUCCEEDED, FAILED, CANCELED, or (retryable kinds) back to
   PENDING_RESOURCES with ``next_run_at = now + delay``. A job Ray no longer knows is
   CLUSTER_LOST. Ray unreachable leaves every row as it is.
2. **Snapshot** the cluster once; **watch hung attempts** (RUNNING with a placement group
   unplaced for ``stuck_timeout_s``: stop, INSUFFICIENT_RESOURCES, retry).
3. **Plan, then submit**: ``service.scheduling.planner`` decides from a snapshot (pure:
   runnable tasks, attempts on the cluster, free resources, fair shares) which tasks start,
   why the others wait, which nodes are kept, whom to preempt (the queue policy below); the
   scheduler
   applies the plan. The claim (-> SUBMITTING + attempt row) is committed before Ray is
   called, so a crash between the two is reconciled by step 0 and never submits an
   attempt twice.

Because step 1 runs before step 3, a slot freed by a job that just ended is used in the
same tick.

Queue policy
------------
* Admission order (``service.scheduling.fairshare``): priority first (higher first); among equal
  priorities the user with the smallest weighted share of the GPUs (DRF, optionally of
  decayed usage) goes next, re-ranked as the tick admits; FIFO within a user. With
  ``fair_share`` off: priority, then FIFO. Retried tasks keep their place (their
  original ``seq``).
* Retry (``service.policy.retry``): in ``when_fits`` mode a task whose attempt failed retryably
  stays in the scan and is submitted once its gang fits and its short backoff has passed;
  while it waits out the backoff with room to start, that room is kept for it (nothing
  behind it takes it). In ``timer`` mode it is out of the scan until ``next_run_at``.
* Backfill: a later task that fits may start while an earlier one waits for room.
* Reservations (``reservations: N``, off by default;
  ``service.scheduling.reservations``): instead of the one guard below, a forward plan
  from the time limits: the first N waiting tasks reserved, anything else starts only where it
  delays none.
* Starvation guard: when a task that does not fit has been runnable for longer than
  ``starvation_guard_s``, the nodes it will use are kept for it as they drain (one
  reservation, EASY backfilling); backfill goes on elsewhere.
* Time limits (``max_runtime_s``): an attempt running past its task's limit is stopped
  and ends TIME_LIMIT (final). Limits are also promises: when every attempt on the kept
  nodes has one, the nodes are surely drained by the latest of them (the *shadow* time),
  and a task whose own limit ends by then may run on them meanwhile: it cannot delay the
  gang they are kept for.
* Preemption (off by default, ``service.scheduling.preemption``): a gang that an idle cluster could
  take, waiting past ``preemption_grace_s``, stops the fewest lower-priority running
  tasks (that checkpoint) that make it fit; their attempts end PREEMPTED and they are
  requeued in their place. While they stop, nothing behind the preemptor starts. One
  preemption at a time.
* A gang that even an idle cluster could not take (node capacity from the snapshot: e.g.
  1x8 GPUs on 4-GPU nodes) waits with a reason that says so and never holds the guard:
  it would otherwise stop the queue behind it for good. It starts once nodes that fit it
  join.
* Backfill window: at most ``backfill_window`` runnable tasks are examined per tick (like
  Slurm's ``bf_max_job_test``), which bounds the tick's cost however long the queue is.
  Tasks beyond the window keep their last ``pending_reason`` until they move up.
* ``max_running_tasks`` (0 = no limit) caps SUBMITTING + SUBMITTED + RUNNING tasks.
* Per-user limits (``v2.users.limits``, ``service.policy.quotas``) come first: a task whose
  owner already runs as many tasks or GPUs as allowed (or is disabled) waits with a
  reason that says so, and is passed over: it blocks no other user's task and never
  holds the starvation guard.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from service.cluster.boundary import (
    Cluster,
    ClusterError,
    ClusterSnapshot,
    ClusterUnavailable,
    JobAlreadyExists,
    JobInfo,
    JobNotFound,
    SubmitRejected,
    SubmitRequest,
)
from service.config import Settings, thaw
from service.domain.states import ON_CLUSTER, FailureKind, RayStatus, TaskState
from service.domain.timefmt import iso
from service.domain.workloads import driver
from service.engine.artifacts import Artifacts
from service.engine.dependency_tick import DependencyStep
from service.jobspec.spec import JobSpec
from service.jobspec.submission import build_submit_request, driver_argv
from service.policy import failures, retry
from service.scheduling.admission import (
    unreachable_reason,
)
from service.scheduling.fairshare import Ledger, Share, Span, decayed_usage
from service.scheduling.plan import PlanInput, Preemption, Wait
from service.scheduling.planner import Planner
from service.scheduling.runtimes import RuntimeModel
from service.store.db import storage_fault
from service.store.writer import (
    ActiveRow,
    AttemptEnd,
    Claim,
    EventRow,
    RunnableRow,
    StaleState,
    Store,
    truncate_message,
)

log = logging.getLogger(__name__)

BACKFILL_WINDOW = 500
# A RUNNING job whose driver's node is gone from the cluster for this long is lost, whatever
# Ray's job status says: after a head failover Ray may not monitor it again until another
# job request (ray#65037), and it stays RUNNING with its supervisor dead.
DRIVER_NODE_GONE_S = 60.0
# the expected run times (``service.scheduling.runtimes``) learn from the runs among the
# attempts that ended last, read again once a minute
RUNTIMES_SCAN = 2000
RUNTIMES_EVERY_S = 60.0
# The events that show an outage on every attempt on the cluster (no state change).
CLUSTER_UNREACHABLE = "CLUSTER_UNREACHABLE"
CLUSTER_BACK = "CLUSTER_BACK"


@dataclass
class TickReport:
    reconciled: int = 0  # on-cluster attempts checked with Ray
    submitted: int = 0  # attempts handed to Ray this tick
    retried: int = 0  # attempts that failed retryably and were re-queued
    finished: int = 0  # tasks that reached a terminal state
    pending: int = 0  # runnable tasks examined that keep waiting
    preempted: int = 0  # running attempts asked to stop for a higher-priority gang
    released: int = 0  # BLOCKED tasks whose dependencies now hold (queued this tick)
    unreachable: str | None = None  # Ray's error when it did not answer
    duration_s: float = 0.0


class _Submit(enum.Enum):
    SUBMITTED = "submitted"  # Ray has it (or already had it)
    ENDED = "ended"  # refused for good or moved away meanwhile: nothing reserved
    UNAVAILABLE = "unavailable"  # Ray did not answer: stop submitting this tick


def _ran_past_limit(row: ActiveRow, info: JobInfo, now: float) -> bool:
    """Whether an attempt that ended did so at or past its time limit (Argus stops it
    there; an attempt that failed on its own earlier is seen late only)."""
    start = info.start_time if info.start_time is not None else row.start_time
    if row.max_runtime_s is None or start is None:
        return False
    return (info.end_time or now) >= start + row.max_runtime_s


def open_outage_since(histories: Sequence[Sequence[EventRow]]) -> float | None:
    """When the outage that the events of the attempts on the cluster leave open began
    (the newest outage event of all is CLUSTER_UNREACHABLE), else None."""
    outage = [e for events in histories for e in events
              if e.event_type in (CLUSTER_UNREACHABLE, CLUSTER_BACK)]
    if not outage:
        return None
    last = max(outage, key=lambda e: (e.ts, e.id))
    return last.ts if last.event_type == CLUSTER_UNREACHABLE else None


class Scheduler:
    def __init__(self, store: Store, cluster: Cluster, settings: Settings,
                 artifacts: Artifacts, *, backfill_window: int = BACKFILL_WINDOW) -> None:
        if backfill_window < 1:
            raise ValueError(f"backfill_window must be >= 1, got {backfill_window}")
        self.store = store
        self.cluster = cluster
        self.settings = settings
        self.sched = settings.scheduler
        self.artifacts = artifacts
        self.backfill_window = backfill_window
        self.driver = driver(settings.entrypoint_resources, settings.entrypoint_num_cpus)
        self.planner = Planner(self.sched, settings.users, self.driver)
        # BLOCKED tasks: released, canceled or kept before admission (dependency_tick)
        self.dependencies = DependencyStep(store, settings)
        # the last tick's cluster view (or why Ray did not answer), for /metrics and the
        # console's cluster page, which never call Ray themselves
        self.last_snapshot: ClusterSnapshot | ClusterUnavailable | None = None
        # each user's fair share as the last admission saw it (the queue shows it)
        self.last_shares: dict[str | None, Share] = {}
        # task id -> planned start, from the last plan's reservations (none without them)
        self.last_estimates: dict[str, float] = {}
        self._ledger: Ledger | None = None  # decayed usage (fair_share_half_life_s)
        # the node ids the guard kept last tick: they have been draining, so the guard
        # keeps them again (for the same gang, or the one that holds the guard next)
        self._reservation: frozenset[str] = frozenset()
        # since when Ray has not answered the reconcile (a head restart), None while it does
        self._outage_since: float | None = None
        # per running submission id: its driver's node (from Ray), and since when that node
        # has been missing from the cluster's alive nodes
        self._driver_node: dict[str, str] = {}
        self._driver_gone_since: dict[str, float] = {}
        # expected run times for the estimates, from recent runs (reservations only)
        self._runtimes: tuple[float, RuntimeModel] | None = None  # (read at, model)

    # -- entry points ----------------------------------------------------------------------
    def startup(self, now: float) -> TickReport:
        """Resolve SUBMITTING rows left by a previous run before anything new happens, and
        take over an outage a previous run saw begin: a service that lives in the head
        container dies with it, so the outage's end (``CLUSTER_BACK``) is this run's to
        note."""
        report = TickReport()
        started = time.perf_counter()
        on_cluster = self.store.active(ON_CLUSTER)
        self._outage_since = open_outage_since(
            [self.store.events(row.task_id) for row in on_cluster])
        self._resolve_submitting(now, report)
        report.duration_s = time.perf_counter() - started
        return report

    def tick(self, now: float) -> TickReport:
        report = TickReport()
        started = time.perf_counter()
        if self._resolve_submitting(now, report):
            self._reconcile(now, report)
        self._note_outage(now, report.unreachable)
        waits = self.dependencies.run(now)
        report.released = waits.released
        report.finished += waits.canceled
        snapshot: ClusterSnapshot | ClusterUnavailable
        try:
            snapshot = self.cluster.snapshot(
                [row.ray_submission_id for row in self.store.active()])
        except ClusterUnavailable as exc:
            snapshot = exc
            report.unreachable = str(exc)
        else:
            self._watch_hung(now, snapshot, report)
            self._watch_driver_nodes(now, snapshot, report)
        self.last_snapshot = snapshot
        self._admit(now, snapshot, report)
        report.duration_s = time.perf_counter() - started
        return report

    def _note_outage(self, now: float, unreachable: str | None) -> None:
        """An event on every attempt on the cluster when Ray stops answering and when it
        answers again: the attempts stay as they are, their events show the outage."""
        if (unreachable is None) == (self._outage_since is None):
            return
        ids = [row.task_id for row in self.store.active(ON_CLUSTER)]
        if unreachable is not None:
            self._outage_since = now
            self.store.note_cluster(ids, now, CLUSTER_UNREACHABLE, {"reason": unreachable})
        else:
            since, self._outage_since = self._outage_since, None
            assert since is not None
            self.store.note_cluster(ids, now, CLUSTER_BACK, {"after_s": round(now - since, 1)})

    # -- step 0: leftover SUBMITTING rows ----------------------------------------------------
    def _resolve_submitting(self, now: float, report: TickReport) -> bool:
        """False when Ray did not answer (the rows stay SUBMITTING for the next tick)."""
        for row in self.store.active([TaskState.SUBMITTING]):
            sid = row.ray_submission_id
            try:
                self.cluster.job_info(sid)
            except JobNotFound:
                self.store.release_claim(
                    row.task_id, row.attempt_no,
                    f"attempt {row.attempt_no} never reached Ray (interrupted submit); "
                    f"it will be submitted again as {sid}", now,
                )
            except ClusterUnavailable as exc:
                report.unreachable = str(exc)
                return False
            else:
                self.store.mark_submitted(row.task_id, row.attempt_no, now,
                                          already_existed=True)
        return True

    # -- step 1: reconcile -------------------------------------------------------------------
    def _reconcile(self, now: float, report: TickReport) -> None:
        for row in self.store.active(ON_CLUSTER):
            try:
                self._reconcile_one(row, now, report)
            except ClusterUnavailable as exc:
                report.unreachable = str(exc)
                return  # nothing is known; do not hammer a dead job server
            except StaleState as exc:
                log.warning("reconcile %s: %s", row.task_id, exc)
            report.reconciled += 1

    def _reconcile_one(self, row: ActiveRow, now: float, report: TickReport) -> None:
        sid = row.ray_submission_id
        asked = row.cancel_requested or row.preempted_for is not None
        if asked:
            self._stop(row, now)  # again every tick until Ray says it ended
        try:
            info = self.cluster.job_info(sid)
        except JobNotFound:
            self._lost(row, now, report)
            return
        status = RayStatus(info.status)
        if status.is_terminal():
            self._ended(row, info, now, report)
            return
        if info.driver_node_id:
            self._driver_node[sid] = info.driver_node_id
        if not asked and row.deadline is not None and now >= row.deadline:
            self._stop(row, now, "time_limit")  # ends TIME_LIMIT once Ray says it ended
        to_running = row.state is TaskState.SUBMITTED and status is RayStatus.RUNNING
        if (to_running or status.value != row.ray_status or info.start_time != row.start_time
                or truncate_message(info.message) != row.message):
            self.store.sync_attempt(
                row.task_id, row.attempt_no, ray_status=status.value, message=info.message,
                start_time=info.start_time, now=now,
                to_running_from=row.state if to_running else None,
            )

    def _stop(self, row: ActiveRow, now: float, reason: str | None = None) -> None:
        with contextlib.suppress(JobNotFound):  # job_info says so too
            self.cluster.stop(row.ray_submission_id)
        if not row.stop_requested:
            self.store.mark_stop_requested(row.task_id, row.attempt_no, now, reason)

    def _lost(self, row: ActiveRow, now: float, report: TickReport) -> None:
        message = f"Ray no longer knows job {row.ray_submission_id} (head restarted?)"
        end = AttemptEnd(row.ray_status, FailureKind.CLUSTER_LOST.value, message,
                         row.start_time, now)
        if row.cancel_requested:
            self._finish(row, end, TaskState.CANCELED, "canceled by request", now, report)
        else:
            self._failed(row, end, FailureKind.CLUSTER_LOST, message, now, report)

    def _ended(self, row: ActiveRow, info: JobInfo, now: float, report: TickReport) -> None:
        status = RayStatus(info.status)
        log_text = self._archive_log(row)
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
                self._failed(row, ended, kind, text, now, report)
                return
            base["exit_code"] = code
            if end is failures.DriverEnd.SUCCEEDED:  # the attempt keeps Ray's own status
                summary = (f"the driver exited 0 (its exit marker); Ray lost the final "
                           f"status: {info.message.strip()}")
                self._finish(row, AttemptEnd(**base), TaskState.SUCCEEDED, summary, now,
                             report)
                return
        if status is RayStatus.SUCCEEDED:
            # A job that completed before the stop took effect did its work: say so.
            summary = "finished before the cancel took effect" if row.cancel_requested else None
            self._finish(row, AttemptEnd(**base), TaskState.SUCCEEDED, summary, now, report)
        elif row.cancel_requested:
            end = AttemptEnd(**base)
            summary = f"canceled by request (Ray status {status.value})"
            self._finish(row, end, TaskState.CANCELED, summary, now, report)
        elif row.preempted_for is not None:
            kind = FailureKind.PREEMPTED
            end = AttemptEnd(**base, failure_kind=kind.value)
            self._failed(row, end, kind, f"preempted for {row.preempted_for}", now, report)
        elif _ran_past_limit(row, info, now):
            kind = FailureKind.TIME_LIMIT
            text = f"ran past its max_runtime_s ({row.max_runtime_s:g} s): stopped"
            end = AttemptEnd(**{**base, "message": text}, failure_kind=kind.value)
            self._failed(row, end, kind, text, now, report)
        else:
            kind = failures.classify(status, info.message, log_text)
            end = AttemptEnd(**base, failure_kind=kind.value)
            self._failed(row, end, kind, log_text, now, report)

    def _archive_log(self, row: ActiveRow) -> str | None:
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

    def _finish(self, row: ActiveRow, end: AttemptEnd, outcome: TaskState,
                summary: str | None, now: float, report: TickReport) -> None:
        self.store.finish_attempt(row.task_id, row.state, row.attempt_no, end, outcome,
                                  summary, now)
        report.finished += 1

    def _failed(self, row: ActiveRow, end: AttemptEnd, kind: FailureKind,
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
                reason = (f"attempt {n} preempted for {row.preempted_for}; attempt {n + 1} "
                          "as soon as it fits again (resumes from its checkpoint)")
            else:
                reason = (f"attempt {n} failed ({kind.value}); attempt {n + 1} "
                          f"not before {iso(at)}")
            self.store.schedule_retry(row.task_id, row.state, n, end, plan, reason, now)
            report.retried += 1
            return
        if kind.retryable:
            summary = f"gave up after {n} attempts (max_attempts={self.sched.max_attempts}); " \
                      f"last failure {summary}"
        self._finish(row, end, TaskState.FAILED, summary, now, report)

    # -- step 2: attempts whose driver's node is gone -------------------------------------------
    def _watch_driver_nodes(self, now: float, snapshot: ClusterSnapshot,
                            report: TickReport) -> None:
        """A RUNNING attempt whose driver's node has been missing from the alive nodes for
        DRIVER_NODE_GONE_S is stopped (a job request, which also wakes Ray's job monitor)
        and ends CLUSTER_LOST: it resumes from its checkpoint."""
        running = {row.ray_submission_id: row for row in self.store.active([TaskState.RUNNING])}
        self._driver_node = {sid: n for sid, n in self._driver_node.items() if sid in running}
        alive = {node.node_id for node in snapshot.nodes}
        gone = {sid for sid, node in self._driver_node.items() if node not in alive}
        self._driver_gone_since = {sid: self._driver_gone_since.get(sid, now) for sid in gone}
        for sid, since in list(self._driver_gone_since.items()):
            row = running[sid]
            if now - since < DRIVER_NODE_GONE_S or row.cancel_requested:
                continue
            with contextlib.suppress(JobNotFound, ClusterUnavailable):
                self.cluster.stop(sid)
            message = (f"the driver's node {self._driver_node[sid][:12]} left the cluster "
                       f"{now - since:.0f}s ago while Ray still said RUNNING")
            end = AttemptEnd(row.ray_status, FailureKind.CLUSTER_LOST.value, message,
                             row.start_time, now)
            try:
                self._failed(row, end, FailureKind.CLUSTER_LOST, message, now, report)
            except StaleState as exc:
                log.warning("driver node watch %s: %s", row.task_id, exc)
            del self._driver_gone_since[sid], self._driver_node[sid]

    # -- step 2: hung attempts -----------------------------------------------------------------
    def _watch_hung(self, now: float, snapshot: ClusterSnapshot, report: TickReport) -> None:
        limit = self.sched.stuck_timeout_s
        if limit is None or not snapshot.pending_pg_since:
            return
        for row in self.store.active([TaskState.RUNNING]):
            since = snapshot.pending_pg_since.get(row.ray_submission_id)
            if (since is None or row.cancel_requested or row.preempted_for is not None
                    or now - since < limit):
                continue
            try:
                self.cluster.stop(row.ray_submission_id)
            except JobNotFound:
                pass  # gone already: what matters is that it cannot run
            except ClusterUnavailable as exc:
                report.unreachable = str(exc)
                return
            self.store.mark_stop_requested(row.task_id, row.attempt_no, now)
            log_text = self._archive_log(row)
            message = (f"placement groups unplaceable for {now - since:.0f}s "
                       f"(stuck_timeout_s={limit:g}); stopped by Argus")
            end = AttemptEnd(RayStatus.STOPPED.value,
                             FailureKind.INSUFFICIENT_RESOURCES.value, message,
                             row.start_time, now)
            self._failed(row, end, FailureKind.INSUFFICIENT_RESOURCES, log_text, now, report)

    # -- step 3: admit and submit --------------------------------------------------------------
    def _admit(self, now: float, snapshot: ClusterSnapshot | ClusterUnavailable,
               report: TickReport) -> None:
        """Apply the planner's decisions: submit what starts, record why the rest waits,
        stop the victims of a preemption. A submit Ray refuses leaves its room unused
        until the next tick; Ray not answering makes every later task wait."""
        candidates = self.store.runnable(now, self.backfill_window,
                                         per_user=self.sched.fair_share)
        active = self.store.active()
        charges = self._charges(active, now)
        if isinstance(snapshot, ClusterUnavailable):
            reason = unreachable_reason(snapshot)
            self._wait([(c, reason) for c in candidates], now, report)
            self.last_estimates = {}
            return
        plan = self.planner.plan(PlanInput(now, candidates, active, snapshot, charges,
                                           self.store.disabled_users(), self._reservation,
                                           self._runtime_model(now)))
        waits: list[tuple[RunnableRow, str]] = []
        unreachable: str | None = None
        for step in plan.steps:
            if unreachable is not None:
                waits.append((step.cand, unreachable))
            elif isinstance(step, Wait):
                waits.append((step.cand, step.reason))
            else:
                outcome = self._submit(step.cand, now, report)
                if outcome is _Submit.SUBMITTED:
                    report.submitted += 1
                elif outcome is _Submit.UNAVAILABLE:
                    unreachable = unreachable_reason(report.unreachable)
        if plan.preemption is not None and unreachable is None:
            self._preempt(plan.preemption, active, now, report)
        self._reservation = plan.kept
        self.last_shares = plan.shares
        self.last_estimates = plan.estimates
        self._wait(waits, now, report)

    def _runtime_model(self, now: float) -> RuntimeModel | None:
        """What recent runs say of run times, read again every ``RUNTIMES_EVERY_S``."""
        if self.sched.reservations <= 0:
            return None
        if self._runtimes is None or now - self._runtimes[0] >= RUNTIMES_EVERY_S:
            self._runtimes = (now, RuntimeModel(self.store.recent_runs(RUNTIMES_SCAN)))
        return self._runtimes[1]

    # -- fair share ------------------------------------------------------------------------
    def _charges(self, active: list[ActiveRow], now: float) -> dict[str | None, float]:
        """Each user's fair-share charge now: GPUs of their active tasks, or (with a
        half-life) their decayed usage in GPU units (``fairshare.Ledger``)."""
        held: dict[str | None, float] = {}
        for row in active:
            held[row.user] = held.get(row.user, 0.0) + row.total_gpus
        half_life = self.sched.fair_share_half_life_s
        if half_life is None:
            return held
        if self._ledger is None:
            self._ledger = Ledger(half_life, self._usage_history(now, half_life), now)
        self._ledger.advance(now, held)
        return self._ledger.charges()

    def _usage_history(self, now: float, half_life: float) -> dict[str | None, float]:
        """Decayed usage from the attempts of the last 20 half-lives (the rest weighs
        less than a millionth), read once when the scheduler starts."""
        spans = [Span(s.user, s.gpus, s.start_time, s.end_time)
                 for s in self.store.usage_spans(now - 20 * half_life, now)
                 if s.start_time is not None]
        return decayed_usage(spans, now, half_life)

    # -- preemption ------------------------------------------------------------------------
    def _preempt(self, preemption: Preemption, active: list[ActiveRow], now: float,
                 report: TickReport) -> None:
        """Stop the victims the planner chose for ``preemption.cand``."""
        cand, victims = preemption.cand, preemption.victims
        sids = {r.task_id: r.ray_submission_id for r in active}
        # Recorded before Ray is asked: a crash in between leaves marked attempts,
        # whose stop reconcile sends every tick; never a stopped job taken for failed.
        marked = self.store.request_preemption(
            [(v.task_id, v.attempt_no) for v in victims], cand.task_id, now,
            {"priority": cand.priority})
        for task_id in marked:
            try:
                self.cluster.stop(sids[task_id])
            except JobNotFound:
                pass  # gone already: reconcile sees it
            except ClusterUnavailable as exc:
                report.unreachable = str(exc)  # reconcile sends it again
                break
        names = ", ".join(f"{v.task_id} (priority {v.priority})" for v in victims)
        report.preempted += len(marked)
        log.info("preempting %s for %s (priority %d)", names, cand.task_id, cand.priority)

    def _wait(self, waits: Iterable[tuple[RunnableRow, str]], now: float,
              report: TickReport) -> None:
        """Record why tasks wait; rows whose state and reason are unchanged are not
        rewritten (a long queue costs no writes per tick)."""
        recheck = self.sched.pending_recheck_s
        items = []
        for cand, reason in waits:
            report.pending += 1
            if recheck > 0 or cand.state is TaskState.QUEUED or cand.pending_reason != reason:
                items.append((cand.task_id, cand.state, reason))
        if items:
            self.store.mark_pending(items, now, now + recheck if recheck > 0 else None)

    def _submit(self, cand: RunnableRow, now: float, report: TickReport) -> _Submit:
        try:
            claim = self.store.claim_for_submit(cand.task_id, cand.state, now)
        except StaleState:
            return _Submit.ENDED  # canceled meanwhile
        try:
            req = build_submit_request(
                JobSpec.from_dict(claim.spec), task_id=claim.task_id,
                attempt_no=claim.attempt_no, user=claim.user, settings=self.settings,
            )
        except (TypeError, ValueError) as exc:
            self.store.fail_submit(claim.task_id, claim.attempt_no, FailureKind.UNKNOWN.value,
                                   f"cannot build the Ray submission: {exc}", now)
            return _Submit.ENDED
        self._write_submission(claim, req)
        try:
            self.cluster.submit(req)
        except JobAlreadyExists:
            self.store.mark_submitted(claim.task_id, claim.attempt_no, now,
                                      already_existed=True)
        except ClusterUnavailable as exc:
            report.unreachable = str(exc)
            self.store.release_claim(claim.task_id, claim.attempt_no,
                                     unreachable_reason(exc), now)
            return _Submit.UNAVAILABLE
        except SubmitRejected as exc:
            self.store.fail_submit(claim.task_id, claim.attempt_no,
                                   FailureKind.USER_ERROR.value,
                                   f"Ray rejected the submission: {exc}", now)
            return _Submit.ENDED
        else:
            self.store.mark_submitted(claim.task_id, claim.attempt_no, now)
        return _Submit.SUBMITTED

    def _write_submission(self, claim: Claim, req: SubmitRequest) -> None:
        payload = {
            "submission_id": req.submission_id,
            "entrypoint": req.entrypoint,
            "argv": driver_argv(req.entrypoint),
            "runtime_env": thaw(req.runtime_env),
            "entrypoint_resources": dict(req.entrypoint_resources),
            "entrypoint_num_cpus": req.entrypoint_num_cpus,
            "metadata": dict(req.metadata),
        }
        try:
            self.artifacts.write_submission(req.submission_id, claim.user, claim.jobspec_yaml,
                                            payload)
        except OSError as exc:  # shared storage trouble must not wedge the queue
            log.warning("writing artifacts of %s failed: %s", req.submission_id, exc)


class StorageHealth(Protocol):
    """What the loop needs of the store to tell whether writes work (``Store``)."""

    @property
    def write_fault(self) -> str | None: ...

    def probe_write(self) -> None: ...


class SchedulerLoop:
    """Runs ``startup`` then ``tick`` every ``tick_s`` (or at once after ``wake``) in a
    daemon thread. A failing tick is logged and counted; the loop goes on.

    Storage faults (disk full, read-only, locked: ``db.storage_fault``) make the loop
    ``degraded`` rather than noisy: one log line when writes start failing and one when
    they work again, no traceback per tick. While the store reports a failed write, each
    tick starts with ``storage.probe_write()`` (a write that changes nothing), so the
    loop notices the storage is back within a tick even when it has nothing to write.
    ``last_error`` is the error of the last tick, None once a tick succeeds again.
    """

    def __init__(self, scheduler: Scheduler, tick_s: float,
                 clock: Callable[[], float] = time.time, *,
                 storage: StorageHealth | None = None) -> None:
        if tick_s <= 0:
            raise ValueError(f"tick_s must be > 0, got {tick_s}")
        self.scheduler = scheduler
        self.tick_s = tick_s
        self.clock = clock
        self.storage = storage
        self.ticks = 0
        self.errors = 0
        self.last_error: str | None = None
        self.last_tick_duration_s = 0.0
        self.last_report: TickReport | None = None
        self._tick_fault: str | None = None  # storage fault of the last tick
        self._started = False  # startup() succeeded
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def failed(self) -> bool:
        """The loop thread ended without being asked to: nothing is being scheduled."""
        return self._thread is not None and not self._thread.is_alive() and not self._stop.is_set()

    @property
    def degraded(self) -> str | None:
        """Why the service cannot write its database now (None: it can, as far as the
        last tick and the last write know)."""
        fault = self._tick_fault
        if fault is None and self.storage is not None:
            fault = self.storage.write_fault
        return None if fault is None else f"storage unavailable: {fault}"

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("scheduler loop already started")
        self._thread = threading.Thread(target=self._run, name="argus-scheduler", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Tick as soon as possible (a task arrived or was canceled)."""
        self._wake.set()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # a wake() during the tick below triggers the next at once
            self.run_once()
            self._wake.wait(self.tick_s)

    def run_once(self) -> None:
        """One turn of the loop: probe the storage if a write failed, ``startup`` until it
        has succeeded once, then ``tick``; failures are recorded, never raised."""
        try:
            if self.storage is not None and self.storage.write_fault is not None:
                self.storage.probe_write()
            if not self._started:
                self.scheduler.startup(self.clock())
                self._started = True
            report = self.scheduler.tick(self.clock())
        except Exception as exc:  # a bug or a DB hiccup must not end scheduling
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            fault = storage_fault(exc)
            if fault is None:
                log.exception("scheduler tick failed")
            elif fault != self._tick_fault:
                log.warning("scheduler: the database cannot be written (%s); retrying every "
                            "tick", exc)
            self._tick_fault = fault
            return
        if self._tick_fault is not None:
            log.warning("scheduler: the database is writable again")
        self._tick_fault = None
        self.ticks += 1
        self.last_report = report
        self.last_tick_duration_s = report.duration_s
        self.last_error = None
