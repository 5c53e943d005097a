"""Steps 0 and 1 of a tick: leftover SUBMITTING rows, then every attempt on the cluster
checked with Ray (one ``cluster.job_infos`` read each, the latter after the stops Argus
asks for); an outage noted on every attempt on the cluster.

Ray unreachable leaves every row as it is. What follows an attempt's end is
``service.engine.attempt_end``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from service.cluster.boundary import Cluster, ClusterUnavailable, JobInfo
from service.domain.reasons import Interrupted, Reason, WaitKind
from service.domain.states import ON_CLUSTER, RayStatus, TaskState
from service.engine.attempt_end import AttemptEnder
from service.engine.placement import PlacementRecorder
from service.engine.ports import SchedulerStore
from service.engine.tick_report import TickReport
from service.store.writer import ActiveRow, EventRow, StaleState, truncate_message

log = logging.getLogger(__name__)

# The events that show an outage on every attempt on the cluster (no state change).
CLUSTER_UNREACHABLE = "CLUSTER_UNREACHABLE"
CLUSTER_BACK = "CLUSTER_BACK"


def open_outage_since(histories: Sequence[Sequence[EventRow]]) -> float | None:
    """When the outage that the events of the attempts on the cluster leave open began
    (the newest outage event of all is CLUSTER_UNREACHABLE), else None."""
    outage = [e for events in histories for e in events
              if e.event_type in (CLUSTER_UNREACHABLE, CLUSTER_BACK)]
    if not outage:
        return None
    last = max(outage, key=lambda e: (e.ts, e.id))
    return last.ts if last.event_type == CLUSTER_UNREACHABLE else None


class Reconciler:
    """Ray's word on every attempt Argus put there, and the outage it may be in."""

    def __init__(self, store: SchedulerStore, cluster: Cluster, ender: AttemptEnder,
                 on_driver_node: Callable[[str, str], None],
                 placement: PlacementRecorder | None = None) -> None:
        self.store = store
        self.cluster = cluster
        self.ender = ender
        self.on_driver_node = on_driver_node  # (submission id, node id) seen running
        self.placement = placement  # records where each attempt ran
        # since when Ray has not answered the reconcile (a head restart), None while it does
        self.outage_since: float | None = None

    def note_outage(self, now: float, unreachable: str | None) -> None:
        """An event on every attempt on the cluster when Ray stops answering and when it
        answers again: the attempts stay as they are, their events show the outage."""
        if (unreachable is None) == (self.outage_since is None):
            return
        ids = [row.task_id for row in self.store.tasks.active(ON_CLUSTER)]
        if unreachable is not None:
            self.outage_since = now
            self.store.attempts.note_cluster(ids, now, CLUSTER_UNREACHABLE, {"reason": unreachable})
        else:
            since, self.outage_since = self.outage_since, None
            assert since is not None
            self.store.attempts.note_cluster(ids, now, CLUSTER_BACK, {"after_s": round(now - since,
                                                                                       1)})

    # -- step 0: leftover SUBMITTING rows ----------------------------------------------------
    def resolve_submitting(self, now: float, report: TickReport) -> bool:
        """Rows left SUBMITTING by a submit that never said how it went (one
        ``job_infos`` read of them all): Ray has the job, so it was submitted; Ray does
        not, so the claim goes back and the task is submitted anew. False when Ray did not
        answer (the rows stay SUBMITTING for the next tick)."""
        rows = self.store.tasks.active([TaskState.SUBMITTING])
        if not rows:
            return True
        try:
            known = self.cluster.job_infos([row.ray_submission_id for row in rows])
        except ClusterUnavailable as exc:
            report.unreachable = str(exc)
            return False
        for row in rows:
            sid = row.ray_submission_id
            if sid in known:
                self.store.attempts.mark_submitted(row.task_id, row.attempt_no, now,
                                                   already_existed=True)
            else:
                self.store.attempts.release_claim(
                    row.task_id, row.attempt_no,
                    Reason(WaitKind.RESUBMIT, Interrupted(row.attempt_no, sid)), now)
        return True

    # -- step 1: reconcile -------------------------------------------------------------------
    def reconcile(self, now: float, report: TickReport) -> None:
        rows = self.store.tasks.active(ON_CLUSTER)
        if not rows:
            return
        try:
            for row in rows:
                if _asked(row):  # stopped first: Ray's word below may already be its end
                    self._guarded(row, lambda r=row: self.ender.stop(r, now))
            infos = self.cluster.job_infos([row.ray_submission_id for row in rows])
            for row in rows:
                self._guarded(row, lambda r=row: self._one(
                    r, infos.get(r.ray_submission_id), now, report))
                report.reconciled += 1
        except ClusterUnavailable as exc:
            report.unreachable = str(exc)  # nothing is known; do not hammer a dead server

    @staticmethod
    def _guarded(row: ActiveRow, step: Callable[[], None]) -> None:
        """``step`` on ``row``; a row that changed since the tick read it is left as it is
        (the next tick reads it anew)."""
        try:
            step()
        except StaleState as exc:
            log.warning("reconcile %s: %s", row.task_id, exc)

    def _one(self, row: ActiveRow, info: JobInfo | None, now: float,
             report: TickReport) -> None:
        """One attempt on the cluster, given Ray's word on its job (None: Ray does not
        know it)."""
        sid = row.ray_submission_id
        if info is None:
            self.ender.lost(row, now, report)
            return
        status = RayStatus(info.status)
        if info.driver_node_id and self.placement is not None:
            self.placement.driver(row, info.driver_node_id, now,
                                  ending=status.is_terminal())
        if status.is_terminal():
            self.ender.ended(row, info, now, report)
            return
        if info.driver_node_id:
            self.on_driver_node(sid, info.driver_node_id)
        if not _asked(row) and row.past_deadline(now):
            self.ender.stop(row, now, "time_limit")  # ends TIME_LIMIT once Ray says it ended
        to_running = row.state is TaskState.SUBMITTED and status is RayStatus.RUNNING
        if (to_running or status.value != row.ray_status or info.start_time != row.start_time
                or truncate_message(info.message) != row.message):
            self.store.attempts.sync_attempt(
                row.task_id, row.attempt_no, ray_status=status.value, message=info.message,
                start_time=info.start_time, now=now,
                to_running_from=row.state if to_running else None,
            )


def _asked(row: ActiveRow) -> bool:
    """Whether Argus wants the attempt stopped (a cancel, a preemption): asked again every
    tick until Ray says it ended."""
    return row.cancel_requested or row.preempted_for is not None
