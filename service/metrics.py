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
  ended attempts (``UserStatsSource``, the store).

The ``user`` label's values are the users' names: users are created by admins, a few to
some hundreds, so the label stays bounded (users x 8 states at most for the task counts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from service.states import TaskState

if TYPE_CHECKING:
    from service.scheduler import Scheduler, TickReport

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopCounters(Protocol):
    """The scheduler loop's public counters (``scheduler.SchedulerLoop``)."""

    @property
    def ticks(self) -> int: ...

    @property
    def errors(self) -> int: ...


class UserStatsSource(Protocol):
    """The per-user figures ``/metrics`` reads (``store.Store`` provides them)."""

    def counts_by_user_and_state(self) -> Mapping[tuple[str | None, str], int]: ...

    def gpu_seconds_by_user(self) -> Mapping[str | None, float]: ...

    def gpus_in_use_by_user(self) -> Mapping[str | None, int]: ...


class _UserCollector(Collector):
    """Per-user families, computed at scrape time (tasks without an owner are left out)."""

    def __init__(self, source: UserStatsSource) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        tasks = GaugeMetricFamily("argus_user_tasks", "Tasks by owner and state.",
                                  labels=["user", "state"])
        for (user, state), n in sorted(self._source.counts_by_user_and_state().items(),
                                       key=lambda kv: (kv[0][0] or "", kv[0][1])):
            if user is not None:
                tasks.add_metric([user, state], float(n))
        yield tasks
        in_use = GaugeMetricFamily(
            "argus_user_gpus_in_use",
            "GPUs of the owner's SUBMITTING/SUBMITTED/RUNNING tasks (held or about to be).",
            labels=["user"])
        for user, gpus in sorted(self._source.gpus_in_use_by_user().items(),
                                 key=lambda kv: kv[0] or ""):
            if user is not None:
                in_use.add_metric([user], float(gpus))
        yield in_use
        seconds = CounterMetricFamily(
            "argus_user_gpu_seconds",
            "GPU-seconds of the owner's ended attempts (failed ones included): gang GPUs "
            "x (end - start).", labels=["user"])
        for user, total in sorted(self._source.gpu_seconds_by_user().items(),
                                  key=lambda kv: kv[0] or ""):
            if user is not None:
                seconds.add_metric([user], float(total))
        yield seconds


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
    ) -> None:
        self.registry = CollectorRegistry()
        self.http_requests = Counter(
            "argus_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
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
        self.tick_duration = Histogram(
            "argus_scheduler_tick_duration_seconds",
            "Scheduler tick duration.",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_TaskStateCollector(counts_by_state))
        if users is not None:
            self.registry.register(_UserCollector(users))
        if scheduler_loop is not None:
            self.watch_loop(scheduler_loop)

    def watch_loop(self, scheduler_loop: LoopCounters) -> None:
        """Export the loop's tick and error counters (once per app)."""
        self.registry.register(_SchedulerLoopCollector(scheduler_loop))

    def observe_request(self, method: str, route: str, status: int) -> None:
        self.http_requests.labels(method, route, str(status)).inc()

    def observe_tick(self, report: TickReport) -> None:
        """Record one scheduler ``TickReport`` (duration, submits to Ray, retries)."""
        self.tick_duration.observe(report.duration_s)
        self.ray_submits.inc(report.submitted)
        self.retries.inc(report.retried)

    def render(self) -> bytes:
        """The exposition text. Reads the store (tasks by state): call it off the event
        loop."""
        return generate_latest(self.registry)


class MeteredScheduler:
    """Wraps a ``Scheduler`` for ``SchedulerLoop``: every tick's report feeds the metrics.

    The loop only calls ``startup`` and ``tick``, so the scheduler stays unaware of
    Prometheus and the loop needs no hook.
    """

    def __init__(self, scheduler: Scheduler, metrics: ServiceMetrics) -> None:
        self._scheduler = scheduler
        self._metrics = metrics

    def startup(self, now: float) -> TickReport:
        return self._scheduler.startup(now)

    def tick(self, now: float) -> TickReport:
        report = self._scheduler.tick(now)
        self._metrics.observe_tick(report)
        return report
