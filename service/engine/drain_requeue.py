"""Step 2 of a tick, after the watches: ``drain --requeue`` acted on (issue 55).

``service.scheduling.drain`` picks the attempts on a node drained with requeue; this
module marks them (``preempted_for`` holds the node's mark, with a PREEMPTION_REQUESTED
event, committed before Ray is asked) and stops them. From there they are preemptions
like any other: the reconcile sends the stop again every tick until Ray says the job
ended (or, when Ray lost the job, asks its driver's watcher), and
``service.engine.attempt_end`` ends the attempt PREEMPTED and re-queues the task at once,
not charged to its retries, to resume from its checkpoint on another node.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from service.cluster.boundary import Cluster, ClusterSnapshot, ClusterUnavailable, JobNotFound
from service.domain.states import ON_CLUSTER
from service.engine.ports import SchedulerStore
from service.engine.tick_report import TickReport
from service.scheduling.drain import requeuing, to_requeue

log = logging.getLogger(__name__)


class DrainRequeue:
    """Stops the attempts on the nodes drained with requeue, tick after tick."""

    def __init__(self, store: SchedulerStore, cluster: Cluster) -> None:
        self.store = store
        self.cluster = cluster

    def run(self, now: float, snapshot: ClusterSnapshot, driver_nodes: Mapping[str, str],
            report: TickReport) -> None:
        drains = requeuing(self.store.nodes.states())
        if not drains:
            return
        picks = to_requeue(self.store.tasks.active(ON_CLUSTER), snapshot, drains,
                           driver_nodes)
        for pick in picks:
            row = pick.row
            # recorded before Ray is asked: a crash in between leaves a marked attempt,
            # whose stop the reconcile sends every tick
            if not self.store.attempts.request_drain_requeue(
                    [(row.task_id, row.attempt_no)], pick.node, pick.state.reason, now):
                continue  # ended or being stopped meanwhile
            report.requeued += 1
            log.warning("node %s drained with requeue (%s): stopping %s to re-queue it",
                        pick.node, pick.state.reason, row.ray_submission_id)
            try:
                with contextlib.suppress(JobNotFound):  # gone already: reconcile sees it
                    self.cluster.stop(row.ray_submission_id)
            except ClusterUnavailable as exc:
                report.unreachable = str(exc)  # the reconcile sends it again
