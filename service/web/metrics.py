"""Prometheus metrics of one service process, on a registry of its own.

A per-app ``CollectorRegistry`` (never the global one) keeps tests and several apps in
one process independent. Families:

- pushed by the API as things happen: HTTP requests by route template and status,
  accepted submissions;
- pushed per scheduler tick by :class:`MeteredScheduler` (a wrapper the process wiring
  puts between ``SchedulerLoop`` and ``Scheduler``): tick duration histogram, attempts
  submitted to Ray, retries;
- read at scrape time: tasks by state (``store.counts_by_state()``), the loop's own
  tick/error counters, and per user: tasks by state, GPUs in use and GPU-seconds of
  ended attempts (``UserStatsSource``, the store);
- the queue the way Kueue exposes it (``QueueStatsSource``, the store, and the scheduler's
  last cluster snapshot, ``observed.Observed``): the admission wait-time histogram by
  workload and user (fed after each tick with the attempts claimed in it), pending tasks
  by reason kind (``reasons.WaitKind``), the oldest pending task's age, GPUs/CPUs in use
  and free per node (``node``: its name) as
  admission saw them at the last tick (never a Ray call per scrape);
- the nodes' states, health, GPUs and events by node name (``node_metrics``, one store
  read per scrape).

The ``user`` label's values are the users' names: users are created by admins, a few to
some hundreds, so the label stays bounded (users x 8 states for the task counts).

Every series a dashboard sums is there from zero: each known user (the users table, read
at every scrape, so a new user appears at the next one) has all three per-user families
at 0 before their first task, and the responses by status class start at 0. A counter
that appeared only with its first increment would hide that increment from Prometheus'
``increase()`` (the first sample is its baseline), so "GPU-hours per user" undercounted.
Counters carry no ``_created`` series (prometheus_client's switch for that is
process-wide); the process families (``process_*``: CPU, memory, descriptors) are on the
app's registry. The task counts come from a table the store keeps by trigger, so a scrape
never counts the tasks table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from service.cluster.boundary import ClusterSnapshot, ClusterUnavailable
from service.domain.reasons import Planned, WaitKind
from service.domain.rows import PendingGroup, UserRow
from service.domain.states import TaskState
from service.engine.observed import RESOURCES, Observed, total_of
from service.engine.sampling import Sampler, SampleStore
from service.policy.nodehealth import HealthReport
from service.scheduling.fairshare import Share
from service.store.db import log_failure
from service.web.leadership import LeaseCollector, LeaseHolder
from service.web.node_metrics import NodeCollector, NodeStatsSource

if TYPE_CHECKING:
    from service.engine.tick_report import TickReport

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Admission waits run from seconds to days (Kueue's buckets are similar powers).
WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
                14400.0, 43200.0, 86400.0)

STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")

log = logging.getLogger(__name__)

disable_created_metrics()


class LoopCounters(Protocol):
    """The scheduler loop's public counters (``scheduler.SchedulerLoop``)."""

    @property
    def ticks(self) -> int: ...

    @property
    def errors(self) -> int: ...


class _UserList(Protocol):
    def list_users(self) -> Sequence[UserRow]: ...


class _TaskCounts(Protocol):
    def counts_by_user_and_state(self) -> Mapping[tuple[str | None, str], int]: ...

    def gpus_in_use_by_user(self) -> Mapping[str | None, int]: ...


class _Ledger(Protocol):
    def gpu_seconds_by_user(self) -> Mapping[str | None, float]: ...


class UserStatsSource(Protocol):
    """The per-user figures ``/metrics`` reads (``store.Store`` provides them)."""

    @property
    def users(self) -> _UserList: ...

    @property
    def tasks(self) -> _TaskCounts: ...

    @property
    def usage(self) -> _Ledger: ...


class QueueStatsSource(SampleStore, Protocol):
    """The queue figures ``/metrics`` and the sampler read (``store.Store.console``)."""

    def pending_groups(self) -> Sequence[PendingGroup]: ...


class _QueueCollector(Collector):
    """Pending tasks by reason kind, the oldest pending task's age, and per node what
    admission saw at the scheduler's last tick.

    ``waiting`` is told each (workload, owner) with a task waiting, before the admission
    histogram is collected (it is registered after this collector): the pair's series is
    then exported from 0 before that task's admission adds to it, so ``rate()`` counts
    the admission (a series born at 1 hides its first observation)."""

    def __init__(self, source: QueueStatsSource, observed: Observed,
                 clock: Callable[[], float], waiting: Callable[[str, str], object]) -> None:
        self._source = source
        self._observed = observed
        self._clock = clock
        self._waiting = waiting

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_class = dict.fromkeys((k.value for k in WaitKind), 0)
        oldest: float | None = None
        for group in self._source.pending_groups():
            kind = group.kind if group.kind in by_class else WaitKind.OTHER.value
            by_class[kind] += group.tasks
            if group.since is not None:
                oldest = group.since if oldest is None else min(oldest, group.since)
            self._waiting(group.workload, group.user or "")
        pending = GaugeMetricFamily(
            "argus_pending_tasks", "Runnable tasks by the kind of their pending reason "
            "(new: not examined yet).", labels=["reason"])
        for cls, n in by_class.items():
            pending.add_metric([cls], float(n))
        yield pending
        yield GaugeMetricFamily(
            "argus_oldest_pending_task_age_seconds",
            "Seconds the longest-waiting runnable task has been runnable (0: none).",
            value=0.0 if oldest is None else max(0.0, self._clock() - oldest))
        seen = self._observed.last
        snapshot = None if seen is None else seen.snapshot
        yield from _node_families(snapshot)
        yield GaugeMetricFamily(
            "argus_cluster_reachable",
            "1 when Ray answered the scheduler's last snapshot, 0 when it did not "
            "(or no tick ran yet).", value=1.0 if snapshot is not None else 0.0)


def _node_families(snapshot: ClusterSnapshot | None) -> Iterator[GaugeMetricFamily]:
    families = {
        (res, kind): GaugeMetricFamily(
            f"argus_node_{res.lower()}s_{kind}",
            f"{res}s {kind.replace('_', ' ')} per alive node (node: its name), as admission "
            "saw them at the scheduler's last tick.", labels=["node", "node_ip", "node_id"])
        for res in RESOURCES for kind in ("in_use", "free")
    }
    for node in () if snapshot is None else snapshot.nodes:
        for res in RESOURCES:
            free = node.get(res)
            labels = [node.display_name, node.node_ip, node.node_id]
            families[(res, "free")].add_metric(labels, free)
            families[(res, "in_use")].add_metric(labels, max(0.0, total_of(node, res) - free))
    yield from families.values()


class _UserCollector(Collector):
    """Per-user families, computed at scrape time: every known user from zero (tasks
    without an owner are left out)."""

    def __init__(self, source: UserStatsSource) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        counts = self._source.tasks.counts_by_user_and_state()
        in_use = self._source.tasks.gpus_in_use_by_user()
        seconds = self._source.usage.gpu_seconds_by_user()
        owners = {user for user, _ in counts} | set(in_use) | set(seconds)
        users = sorted({u.name for u in self._source.users.list_users()}
                       | {user for user in owners if user is not None})
        tasks = GaugeMetricFamily("argus_user_tasks", "Tasks by owner and state.",
                                  labels=["user", "state"])
        gpus = GaugeMetricFamily(
            "argus_user_gpus_in_use",
            "GPUs of the owner's SUBMITTING/SUBMITTED/RUNNING tasks (held or about to be).",
            labels=["user"])
        total = CounterMetricFamily(
            "argus_user_gpu_seconds",
            "GPU-seconds of the owner's ended attempts (failed ones included): gang GPUs "
            "x (end - start).", labels=["user"])
        for user in users:
            for state in TaskState:
                tasks.add_metric([user, state.value], float(counts.get((user, state.value), 0)))
            gpus.add_metric([user], float(in_use.get(user, 0)))
            total.add_metric([user], float(seconds.get(user, 0.0)))
        yield tasks
        yield gpus
        yield total


class _TaskStateCollector(Collector):
    """``argus_tasks`` gauge, one sample per state, computed at scrape time."""

    def __init__(self, counts_by_state: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts_by_state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self._counts()
        family = GaugeMetricFamily("argus_tasks", "Tasks by state.", labels=["state"])
        for state in TaskState:
            family.add_metric([state.value], float(counts.get(state.value, 0)))
        yield family


class _SchedulerLoopCollector(Collector):
    """Reads the scheduler loop's public counters (``ticks``, ``errors``) at scrape time."""

    def __init__(self, loop: LoopCounters) -> None:
        self._loop = loop

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "argus_scheduler_ticks", "Scheduler ticks completed.", value=float(self._loop.ticks)
        )
        yield CounterMetricFamily(
            "argus_scheduler_tick_errors", "Scheduler ticks that raised.",
            value=float(self._loop.errors),
        )


class ServiceMetrics:
    """Every metric family of one app; :meth:`render` gives the exposition text."""

    def __init__(
        self,
        counts_by_state: Callable[[], Mapping[str, int]],
        scheduler_loop: LoopCounters | None = None,
        *,
        users: UserStatsSource | None = None,
        queue: QueueStatsSource | None = None,
        nodes: NodeStatsSource | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = CollectorRegistry()
        self.observed = Observed()
        self._sampler = None if queue is None else Sampler(queue)
        self.http_requests = Counter(
            "argus_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_responses = Counter(
            "argus_http_responses",
            "HTTP responses by status class (2xx..5xx), every class from zero.",
            ["class"], registry=self.registry,
        )
        for cls in STATUS_CLASSES:
            self.http_responses.labels(cls)
        ProcessCollector(registry=self.registry)
        self.submits = Counter(
            "argus_task_submits", "Tasks accepted by POST /api/v2/tasks.", registry=self.registry
        )
        self.ray_submits = Counter(
            "argus_attempts_submitted", "Attempts handed to Ray by the scheduler.",
            registry=self.registry,
        )
        self.retries = Counter(
            "argus_task_retries", "Attempts re-queued after a retryable failure.",
            registry=self.registry,
        )
        self.preemptions = Counter(
            "argus_preemptions", "Running attempts stopped to make room for a "
            "higher-priority gang, or because their node was drained with requeue (each "
            "is re-queued and resumes from its checkpoint).",
            registry=self.registry,
        )
        self.tick_duration = Histogram(
            "argus_scheduler_tick_duration_seconds",
            "Scheduler tick duration.",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.admission_wait = Histogram(
            "argus_admission_wait_seconds",
            "Seconds a task waited, from becoming runnable to being admitted (its attempt "
            "claimed for Ray), by workload and user.",
            ["workload", "user"], buckets=WAIT_BUCKETS, registry=None,
        )
        self.registry.register(_TaskStateCollector(counts_by_state))
        if queue is not None:
            self.registry.register(_QueueCollector(queue, self.observed, clock,
                                                   self.admission_wait.labels))
        self.registry.register(self.admission_wait)  # after the queue: see _QueueCollector
        if users is not None:
            self.registry.register(_UserCollector(users))
        if nodes is not None:
            self.registry.register(NodeCollector(nodes, self.observed))
        if scheduler_loop is not None:
            self.watch_loop(scheduler_loop)

    def watch_loop(self, scheduler_loop: LoopCounters) -> None:
        """Export the loop's tick and error counters (once per app)."""
        self.registry.register(_SchedulerLoopCollector(scheduler_loop))

    def watch_lease(self, keeper: LeaseHolder) -> None:
        """Export the database lease this instance holds (once per app)."""
        self.registry.register(LeaseCollector(keeper))

    def observe_request(self, method: str, route: str, status: int) -> None:
        self.http_requests.labels(method, route, str(status)).inc()
        self.http_responses.labels(f"{status // 100}xx").inc()

    def observe_tick(self, report: TickReport) -> None:
        """Record one scheduler ``TickReport`` (duration, submits to Ray, retries)."""
        self.tick_duration.observe(report.duration_s)
        self.ray_submits.inc(report.submitted)
        self.retries.inc(report.retried)
        self.preemptions.inc(report.preempted + report.requeued)

    def after_tick(self, now: float, snapshot: ClusterSnapshot | ClusterUnavailable | None,
                   shares: Mapping[str | None, Share] | None = None,
                   estimates: Mapping[str, Planned] | None = None) -> None:
        """Keep the tick's cluster view, count the attempts it admitted, and sample the
        queue for the console's charts. Never raises: a missed sample must not fail
        the tick (a storage fault is logged once per tick, without a traceback)."""
        self.observed.record(now, snapshot, shares, estimates)
        if self._sampler is None:
            return
        try:
            for admitted in self._sampler.admitted(now):
                self.admission_wait.labels(admitted.workload, admitted.user or "").observe(
                    admitted.waited_s)
            self._sampler.sample(
                now, snapshot if isinstance(snapshot, ClusterSnapshot) else None)
        except Exception as exc:
            log_failure(log, "sampling the queue after a tick", exc)

    def render(self) -> bytes:
        """The exposition text. Reads the store (tasks by state): call it off the event
        loop."""
        return generate_latest(self.registry)


class Ticking(Protocol):
    """What ``MeteredScheduler`` wraps (``service.engine.scheduler.Scheduler``)."""

    @property
    def last_snapshot(self) -> ClusterSnapshot | ClusterUnavailable | None: ...

    @property
    def last_shares(self) -> dict[str | None, Share]: ...

    @property
    def last_estimates(self) -> dict[str, Planned]: ...

    @property
    def last_health(self) -> Mapping[str, HealthReport]: ...

    def startup(self, now: float) -> TickReport: ...

    def tick(self, now: float) -> TickReport: ...


class MeteredScheduler:
    """Wraps a ``Scheduler`` for ``SchedulerLoop``: every tick's report feeds the metrics.

    The loop only calls ``startup`` and ``tick``, so the scheduler stays unaware of
    Prometheus and the loop needs no hook.
    """

    def __init__(self, scheduler: Ticking, metrics: ServiceMetrics,
                 after_tick: Callable[[float], None] | None = None) -> None:
        """``after_tick(now)``: once the tick's view is recorded (the leader publishing
        it to the standbys: ``engine.shared_view``)."""
        self._scheduler = scheduler
        self._metrics = metrics
        self._after_tick = after_tick

    def startup(self, now: float) -> TickReport:
        return self._scheduler.startup(now)

    def tick(self, now: float) -> TickReport:
        report = self._scheduler.tick(now)
        self._metrics.observe_tick(report)
        self._metrics.observed.record_health(self._scheduler.last_health)
        self._metrics.after_tick(now, self._scheduler.last_snapshot,
                                 self._scheduler.last_shares, self._scheduler.last_estimates)
        if self._after_tick is not None:
            self._after_tick(now)
        return report
