"""Start estimates for the waiting tasks past a tick's own (``estimates.ESTIMATED``),
a few a tick.

A tick estimates the first ``ESTIMATED`` waiting tasks on its plan's timeline; each more
costs about 0.065 ms (docs/benchmarks.md), so the rest of the queue it examines would
break the tick's 20-ms floor. The plan hands over what it did not estimate
(``DeepQueue``: those tasks in the order their estimates take the timeline, and the
timeline after every decision and estimate of that tick); ``DeepEstimates`` goes on
placing them on that timeline, ``DEEP_PER_TICK`` a tick, and adopts the newest plan's
queue once it has placed every task of its own. A task's deep estimate is thus the one
its position had on a plan a few ticks old (500 examined tasks, 436 of them deep: a sweep
of 28 ticks, so an estimate comes within 56 ticks of a submission and is at most that
old). Where run history gives expected run times, the plan hands over its replay's
timeline too (``service.scheduling.forecast``: what runs and what the tick placed, each for
its expected length), and each deep task is placed there as well for its own expected
length: its estimate shows that expected start beside the limits' bound, as the tick's own
do (from the limits alone the trace bench's deep estimates were off by about the whole
wait: docs/benchmarks.md). It decides nothing. Pure: the timelines' arithmetic, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from service.domain.reasons import Planned
from service.scheduling.runtimes import RuntimeModel
from service.scheduling.timeline import Timeline

# deep estimates a tick: 16 cost about 1 ms (bench/bench_tick.py --limits)
DEEP_PER_TICK = 16


class DeepTask(NamedTuple):
    """A waiting task to estimate: its gang and how long it holds it."""

    task_id: str
    nnodes: int
    gpus: float
    cpus: float
    duration: float
    not_before: float | None  # a retry's backoff
    user: str | None = None
    limit_s: float | None = None  # its time limit (None: none)


@dataclass
class DeepQueue:
    """What a plan did not estimate, and the timeline to estimate it on (the plan's own,
    after its decisions: no longer changed by the plan); with run history, the replay's
    timeline of expected run times and the model of run times it replayed."""

    timeline: Timeline
    tasks: list[DeepTask]
    expected: Timeline | None = None
    model: RuntimeModel | None = None

    def bound(self, task: DeepTask) -> float | None:
        """Place ``task`` on the limits' timeline for its limit: when it starts there
        (None: no room known)."""
        return self.timeline.place(task.nnodes, task.gpus, task.cpus, task.duration,
                                   task.not_before, task.task_id)

    def expected_start(self, task: DeepTask) -> float | None:
        """Place ``task`` on the expected timeline for its expected length: when it
        starts there (None: no history, or no room known)."""
        if self.expected is None or self.model is None:
            return None
        length = self.model.length(task.user, (task.nnodes, int(task.gpus)), task.limit_s)
        return self.expected.place(task.nnodes, task.gpus, task.cpus, length,
                                   task.not_before, task.task_id)


class DeepEstimates:
    """The deep queue being estimated, and the estimates found so far."""

    def __init__(self, per_tick: int = DEEP_PER_TICK) -> None:
        self.per_tick = per_tick
        self._queue: DeepQueue | None = None
        self._next = 0  # the next task of ``_queue`` to place
        self.estimates: dict[str, Planned] = {}
        # the tasks the latest plan left unestimated: the others' deep estimates are not
        # shown (started, gone, or estimated by the tick itself)
        self._unestimated: frozenset[str] = frozenset()

    def advance(self, latest: DeepQueue | None, now: float) -> None:
        """One tick at ``now``: adopt ``latest`` (the tick's plan's queue) when the queue
        at hand is placed to its end, then place up to ``per_tick`` tasks more (a start
        the older plan put before ``now`` is ``now``). None: the plan left no task
        unestimated, so no deep estimate holds any longer."""
        if latest is None:
            self.reset()
            return
        self._unestimated = frozenset(task.task_id for task in latest.tasks)
        if self._queue is None or self._next >= len(self._queue.tasks):
            self._adopt(latest)
        queue = self._queue
        assert queue is not None
        end = min(self._next + self.per_tick, len(queue.tasks))
        for task in queue.tasks[self._next:end]:
            start = queue.bound(task)
            if start is None:
                self.estimates.pop(task.task_id, None)
                continue
            expected = queue.expected_start(task)
            self.estimates[task.task_id] = Planned.of(
                max(start, now), None if expected is None else max(expected, now))
        self._next = end

    def _adopt(self, queue: DeepQueue) -> None:
        """Estimate ``queue`` from its start; the estimates of its tasks found before stay
        until their turn comes again, those of tasks no longer in it go (``queue`` is the
        latest: its tasks are ``_unestimated``)."""
        keep = self._unestimated
        self.estimates = {tid: e for tid, e in self.estimates.items() if tid in keep}
        self._queue, self._next = queue, 0

    def reset(self) -> None:
        self._queue, self._next = None, 0
        self.estimates = {}
        self._unestimated = frozenset()

    def merged(self, firm: dict[str, Planned]) -> dict[str, Planned]:
        """Every estimate to show: the tick's own (``firm``), and the deep ones of the
        tasks the latest plan left unestimated."""
        if not self.estimates:
            return firm
        deep = {tid: e for tid, e in self.estimates.items() if tid in self._unestimated}
        return {**deep, **firm}
