"""Step 2 of a tick: the watches over RUNNING attempts that Ray's status does not end.

A RUNNING attempt whose placement groups stay unplaced past ``stuck_timeout_s`` is hung
(stop, INSUFFICIENT_RESOURCES, retry); one whose driver's node left the alive nodes for
``DRIVER_NODE_GONE_S`` is lost (stop, CLUSTER_LOST), whatever Ray still says, once its
driver is gone too (the task's lock: ``service.engine.attempt_end``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from service.cluster.boundary import Cluster, ClusterSnapshot, ClusterUnavailable, JobNotFound
from service.config import SchedulerSettings
from service.domain.states import FailureKind, RayStatus, TaskState
from service.engine.attempt_end import AttemptEnder
from service.engine.ports import SchedulerStore
from service.engine.tick_report import TickReport
from service.store.writer import AttemptEnd, StaleState

log = logging.getLogger(__name__)

# A RUNNING job whose driver's node is gone from the cluster for this long is lost, whatever
# Ray's job status says: after a head failover Ray may not monitor it again until another
# job request (ray#65037), and it stays RUNNING with its supervisor dead.
DRIVER_NODE_GONE_S = 60.0


class Watch:
    """The watches, with what they remember between ticks (the drivers' nodes)."""

    def __init__(self, store: SchedulerStore, cluster: Cluster, sched: SchedulerSettings,
                 ender: AttemptEnder) -> None:
        self.store = store
        self.cluster = cluster
        self.sched = sched
        self.ender = ender
        # per running submission id: its driver's node (from Ray), and since when that node
        # has been missing from the cluster's alive nodes
        self._driver_node: dict[str, str] = {}
        self._driver_gone_since: dict[str, float] = {}

    def note_driver_node(self, submission_id: str, node_id: str) -> None:
        """Where Ray says an attempt's driver runs (the reconcile tells, every tick)."""
        self._driver_node[submission_id] = node_id

    @property
    def driver_node_ids(self) -> Mapping[str, str]:
        """Submission id -> the node id its driver runs on, as Ray last said."""
        return self._driver_node

    # -- step 2: attempts whose driver's node is gone -------------------------------------------
    def driver_nodes(self, now: float, snapshot: ClusterSnapshot,
                            report: TickReport) -> None:
        """A RUNNING attempt whose driver's node has been missing from the alive nodes for
        DRIVER_NODE_GONE_S is stopped (a job request, which also wakes Ray's job monitor)
        and ends CLUSTER_LOST: it resumes from its checkpoint."""
        running = {row.ray_submission_id: row
                   for row in self.store.tasks.active([TaskState.RUNNING])}
        self._driver_node = {sid: n for sid, n in self._driver_node.items() if sid in running}
        alive = {node.node_id for node in snapshot.nodes}
        gone = {sid for sid, node in self._driver_node.items() if node not in alive}
        self._driver_gone_since = {sid: self._driver_gone_since.get(sid, now) for sid in gone}
        for sid, since in list(self._driver_gone_since.items()):
            row = running[sid]
            if now - since < DRIVER_NODE_GONE_S or row.cancel_requested:
                continue
            if self.ender.driver_alive(row):
                continue  # the node's raylet left, its driver did not: it still runs
            with contextlib.suppress(JobNotFound, ClusterUnavailable):
                self.cluster.stop(sid)
            message = (f"the driver's node {self._driver_node[sid][:12]} left the cluster "
                       f"{now - since:.0f}s ago while Ray still said RUNNING")
            end = AttemptEnd(row.ray_status, FailureKind.CLUSTER_LOST.value, message,
                             row.start_time, now)
            try:
                self.ender.failed(row, end, FailureKind.CLUSTER_LOST, message, now, report)
            except StaleState as exc:
                log.warning("driver node watch %s: %s", row.task_id, exc)
            del self._driver_gone_since[sid], self._driver_node[sid]

    # -- step 2: hung attempts -----------------------------------------------------------------
    def hung(self, now: float, snapshot: ClusterSnapshot, report: TickReport) -> None:
        limit = self.sched.stuck_timeout_s
        if limit is None or not snapshot.pending_pg_since:
            return
        for row in self.store.tasks.active([TaskState.RUNNING]):
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
            self.store.attempts.mark_stop_requested(row.task_id, row.attempt_no, now)
            log_text = self.ender.archive_log(row)
            message = (f"placement groups unplaceable for {now - since:.0f}s "
                       f"(stuck_timeout_s={limit:g}); stopped by Argus")
            end = AttemptEnd(RayStatus.STOPPED.value,
                             FailureKind.INSUFFICIENT_RESOURCES.value, message,
                             row.start_time, now)
            self.ender.failed(row, end, FailureKind.INSUFFICIENT_RESOURCES, log_text, now, report)
