"""The scheduler: one ``tick(now)`` that moves every task one step.

A tick, in order:

0. **Leftover SUBMITTING rows** (a crash, or Ray unreachable at start-up) are resolved by
   their deterministic submission id: Ray knows it -> SUBMITTED; Ray does not -> back to
   PENDING_RESOURCES, to be submitted again under the same id.
1. **Reconcile** every SUBMITTED/RUNNING attempt with ``cluster.job_infos``; a requested
   cancel sends ``stop`` every tick until Ray confirms. Ended attempts get their driver
   log archived and classified: SUCCEEDED, FAILED, CANCELED, or (retryable kinds) back to
   PENDING_RESOURCES with ``next_run_at = now + delay``. A job Ray no longer knows is
   CLUSTER_LOST. Ray unreachable leaves every row as it is.
2. **Snapshot** the cluster once; **watch hung attempts** (RUNNING with a placement group
   unplaced for ``stuck_timeout_s``: stop, INSUFFICIENT_RESOURCES, retry); stop the
   attempts on a node drained with requeue (``service.engine.drain_requeue``: they end
   PREEMPTED and are re-queued); the health files read (``service.engine.node_health``);
   the **fences** kept (``service.engine.fences``): a Ray job on each cordoned or drained
   node holds its free resources, so Ray places nothing new there; a resumed node's is
   stopped (and the snapshot read again); while a fence just started does not hold its
   node yet (seconds), step 3 waits.
3. **Plan, then submit**: ``service.scheduling.planner`` decides from a snapshot (pure:
   runnable tasks, attempts on the cluster, free resources, fair shares) which tasks start,
   why the others wait, which nodes are kept, whom to preempt (the queue policy below); the
   scheduler applies the plan. The claim (-> SUBMITTING + attempt row) is committed before Ray is
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
* Reservations (``reservations: N``, 8 by default; ``service.scheduling.reservations``):
  a forward plan from the time limits: the first N waiting tasks reserved, anything else
  starts only where it delays none, and a start estimate for the waiting tasks; for
  tasks without a limit the plan keeps nodes as the starvation guard does.
* Starvation guard (alone with ``reservations: 0``): when a task that does not fit has
  been runnable for longer than ``starvation_guard_s``, the nodes it will use are kept
  for it as they drain (one reservation, EASY backfilling); backfill goes on elsewhere.
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

import logging
import time
from collections.abc import Mapping

from service.cluster.boundary import Cluster, ClusterSnapshot, ClusterUnavailable
from service.config import Settings
from service.domain.reasons import Planned, Reason, WaitKind, as_text
from service.domain.rows import ActiveRow
from service.domain.states import ON_CLUSTER
from service.domain.workloads import driver
from service.engine.applier import Applier
from service.engine.artifacts import Artifacts
from service.engine.attempt_end import AttemptEnder
from service.engine.dependency_tick import DependencyStep
from service.engine.drain_requeue import DrainRequeue
from service.engine.fences import FenceKeeper
from service.engine.node_health import NodeHealth
from service.engine.placement import PlacementRecorder
from service.engine.ports import SchedulerStore
from service.engine.reconcile import (
    CLUSTER_BACK,
    CLUSTER_UNREACHABLE,
    Reconciler,
    open_outage_since,
)
from service.engine.scheduler_loop import SchedulerLoop, StorageHealth
from service.engine.tick_report import TickReport
from service.engine.watch import DRIVER_NODE_GONE_S, Watch
from service.policy.nodehealth import HealthReport
from service.scheduling.fairshare import Share
from service.scheduling.planner import Planner

# the names callers import from here (the tick's steps live in the modules above)
__all__ = ["BACKFILL_WINDOW", "CLUSTER_BACK", "CLUSTER_UNREACHABLE", "DRIVER_NODE_GONE_S",
           "Scheduler", "SchedulerLoop", "StorageHealth", "TickReport", "open_outage_since"]

BACKFILL_WINDOW = 500
log = logging.getLogger(__name__)


class Scheduler:
    """The tick's order; each step's work is its module's (see the module docstring)."""

    def __init__(self, store: SchedulerStore, cluster: Cluster, settings: Settings,
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
        self.ender = AttemptEnder(store, cluster, self.sched, artifacts)
        self.watch = Watch(store, cluster, self.sched, self.ender)
        self.placement = PlacementRecorder(store)  # where each attempt ran, by name
        self.reconciler = Reconciler(store, cluster, self.ender, self.watch.note_driver_node,
                                     self.placement)
        self.applier = Applier(store, cluster, settings, artifacts, self.planner,
                               backfill_window)
        self.health = NodeHealth(store, settings)  # the health-driven cordon
        self.drains = DrainRequeue(store, cluster)  # drain --requeue stops what is there
        self.fences = FenceKeeper(store, cluster, settings)  # the cordon on Ray's side
        self._fence_wait: tuple[str, ...] = ()  # nodes whose new fence admission waits for
        # the last tick's cluster view (or why Ray did not answer), for /metrics and the
        # console's cluster page, which never call Ray themselves
        self.last_snapshot: ClusterSnapshot | ClusterUnavailable | None = None

    @property
    def last_shares(self) -> dict[str | None, Share]:
        """Each user's fair share as the last admission saw it (the queue shows it)."""
        return self.applier.last_shares

    @property
    def last_estimates(self) -> dict[str, Planned]:
        """Task id -> its start estimate, from the last plan."""
        return self.applier.last_estimates

    @property
    def last_health(self) -> Mapping[str, HealthReport]:
        """The usable health reports of the last health read, by node."""
        return self.health.reports

    # -- entry points ----------------------------------------------------------------------
    def startup(self, now: float) -> TickReport:
        """Resolve SUBMITTING rows left by a previous run before anything new happens, and
        take over an outage a previous run saw begin: a service that lives in the head
        container dies with it, so the outage's end (``CLUSTER_BACK``) is this run's to
        note."""
        report = TickReport()
        started = time.perf_counter()
        on_cluster = self.store.tasks.active(ON_CLUSTER)
        self.reconciler.outage_since = open_outage_since(
            [self.store.tasks.events(row.task_id) for row in on_cluster])
        self.reconciler.resolve_submitting(now, report)
        report.duration_s = time.perf_counter() - started
        return report

    def _snapshot(self, report: TickReport, active: list[ActiveRow] | None = None
                  ) -> ClusterSnapshot | ClusterUnavailable:
        """The cluster once; ``active``: the attempts on it, when the caller read them."""
        if active is None:
            active = self.store.tasks.active()
        try:
            return self.cluster.snapshot([row.ray_submission_id for row in active])
        except ClusterUnavailable as exc:
            report.unreachable = str(exc)
            return exc

    def _fence_hold(self, now: float, snapshot: ClusterSnapshot | ClusterUnavailable
                    ) -> Reason | None:
        """Why nothing may start while a fence just started does not hold its node yet (a
        few seconds): Ray could place the new attempt on that node. None: admit."""
        if isinstance(snapshot, ClusterUnavailable):
            return None
        waiting = self.fences.settling(now, snapshot.nodes)
        if waiting and waiting != self._fence_wait:
            log.info("admission waits for the fence to hold node(s) %s", ", ".join(waiting))
        self._fence_wait = waiting
        if not waiting:
            return None
        return as_text(f"waiting for Ray-side fence to hold node(s) {', '.join(waiting)} "
                       "(just taken out of admission)", WaitKind.RESOURCES)

    def tick(self, now: float) -> TickReport:
        with self.store.tick_scope():  # its repeated reads asked once while unchanged
            return self._tick(now)

    def _tick(self, now: float) -> TickReport:
        report = TickReport()
        started = time.perf_counter()
        if self.reconciler.resolve_submitting(now, report):  # step 0
            self.reconciler.reconcile(now, report)  # step 1
        self.reconciler.note_outage(now, report.unreachable)
        waits = self.dependencies.run(now)
        report.released = waits.released
        report.finished += waits.canceled
        active = self.store.tasks.active()
        snapshot = self._snapshot(report, active)
        if not isinstance(snapshot, ClusterUnavailable):  # step 2
            self.placement.seen(now, snapshot, active)
            self.watch.hung(now, snapshot, report)
            self.watch.driver_nodes(now, snapshot, report)
            self.drains.run(now, snapshot, self.watch.driver_node_ids, report)
        self.last_snapshot = snapshot
        if not isinstance(snapshot, ClusterUnavailable) and self.health.due(now):
            # unhealthy nodes out of admission before this tick's plan (node_health)
            self.health.run(now, [n.display_name for n in snapshot.nodes])
        if not isinstance(snapshot, ClusterUnavailable) and self.fences.run(now, snapshot.nodes)[1]:
            snapshot = self._snapshot(report)  # a fence stopped: its node is free again
            self.last_snapshot = snapshot
        self.applier.admit(now, snapshot, report, self._fence_hold(now, snapshot))  # step 3
        report.duration_s = time.perf_counter() - started
        return report
