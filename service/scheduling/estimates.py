"""The timeline of a reservation pass and its estimates (``service.scheduling.reservations``).

The planned start of each reserved task is its estimate (``Plan.estimates``), shown in
its wait reason. Waiting tasks past the first ``reservations`` get an estimate too, from
the same timeline once every decision is made (up to ``ESTIMATED`` of them, in admission
order, each seeing the ones before it): an estimate that protects nothing, so backfill is
not cut by it. (With few firm reservations, as the trace bench chose, most of the queue
would otherwise show no start at all.) The examined tasks past those are handed over with
the timeline (``Plan.deep``) and estimated a few a tick after it (``service.scheduling.deep``).

``EstimatingPass`` holds what the walk of ``ReservationPass`` writes on: the timeline of
the running attempts' ends and the holds, the firm estimates, the decisions in order (for
the replay of expected starts); after the walk it adds the soft estimates, hands the rest
of the queue over (``Plan.deep``) and builds the plan.
"""

from __future__ import annotations

from service.domain.reasons import Planned
from service.domain.rows import ActiveRow, RunnableRow
from service.domain.timefmt import iso
from service.scheduling.admission import FreePool, Gang
from service.scheduling.deep import DeepQueue, DeepTask
from service.scheduling.fairshare import FairOrder
from service.scheduling.forecast import Placed, Releasing, expected_starts
from service.scheduling.passes import BasePass
from service.scheduling.plan import Plan, PlanInput, Preemption, Start, Wait
from service.scheduling.rules import Rules
from service.scheduling.runtimes import LIMIT_SLACK_S, RuntimeModel, held_for
from service.scheduling.timeline import INF, Timeline

# waiting tasks given a start estimate (firm reservations included) per tick: bounds the
# plan's cost with 10k runnable tasks. About 0.065 ms each with every task under a limit
# (bench_tick.py --limits: slowest tick 14.1 ms with 64, 17.6 with 128, 25.7 with 256)
ESTIMATED = 64


class EstimatingPass(BasePass):
    """The timeline and the estimates of a reservation pass (see the module docstring)."""

    def __init__(self, rules: Rules, inp: PlanInput, capacity: FreePool | None,
                 order: FairOrder) -> None:
        super().__init__(rules, inp, capacity, order)
        self.estimates: dict[str, float] = {}
        self.deep: DeepQueue | None = None  # the waiting tasks past ESTIMATED
        self.free_now = self.pool.free_by_node()
        self.timeline = Timeline(self.now, self.free_now)
        self.placed: list[Placed] = []  # the decisions, in order: replayed for expected starts
        cpg = self.sched.cpus_per_gpu
        for row in inp.active:
            end = self.release_time(row)
            for node, gpus in inp.snapshot.held_on.get(row.ray_submission_id, {}).items():
                self.timeline.release(node, end, gpus, gpus * cpg)
        # the tasks that wait past the budget: each with its gang and its step's index
        self.unplanned: list[tuple[RunnableRow, Gang, int]] = []
        # task id -> the index in ``steps`` of its wait with a start estimate: only those
        # are rewritten once the estimates are known, not the whole queue's steps
        self.planned_at: dict[str, int] = {}

    def release_time(self, row: ActiveRow) -> float:
        """When ``row``'s GPUs come back at the latest (inf: unknown)."""
        if row.cancel_requested or row.stop_requested or row.preempted_for is not None:
            return self.now + LIMIT_SLACK_S
        start = row.start_time if row.start_time is not None else self.now
        return max(start + held_for(row.max_runtime_s), self.now)  # no limit: inf

    def duration(self, cand: RunnableRow) -> float:
        return held_for(cand.max_runtime_s)

    def _estimate_the_rest(self) -> None:
        """Soft estimates for waiting tasks beyond the budget: each gets the earliest
        start the timeline knows after every decision and the reservations before it, and
        its reason says so as a firm one's does. Run after the walk, it decides nothing.

        Which tasks get one: the first in admission order (a new task of a user with a
        small share gets one at once); the others are handed over, in the same order, to
        be estimated after the tick (``Plan.deep``). The order they take the timeline in:
        priority, then the longest waiting. A task this deep in the queue is reserved only
        once it has waited past the guard, and past the guard the plan reserves by age, not
        by fair share (in fair-share order the trace bench's first estimates were off by a median
        28% of the wait, 22% in age order: seed 1, load 0.95). Not with the big gangs'
        credit (``reserve_order``): the small tasks it puts after them start around them
        (backfill); in that order the estimates were off by a median 26.5% of the wait,
        24.8% by age (before small gangs of a high priority were reserved at once; 20%
        since: docs/benchmarks.md)."""
        rest = [u for u in self.unplanned if u[0].task_id not in self.estimates]
        room = max(0, ESTIMATED - len(self.estimates))
        for cand, gang, at in sorted(rest[:room], key=_estimate_order):
            start = self.timeline.place(gang.nnodes, float(gang.gpus_per_node),
                                        gang.cpus_per_node, self.duration(cand),
                                        cand.retry_not_before, cand.task_id)
            if start is None:
                continue
            self._record(cand, gang, None, not_before=cand.retry_not_before)
            self.estimates[cand.task_id] = start
            step = self.steps[at]
            self.steps[at] = Wait(step.cand, step.why.planned_by(Planned(start)))
            self.planned_at[cand.task_id] = at
        if len(rest) > room:  # the rest after the tick (service.scheduling.deep)
            self.deep = DeepQueue(self.timeline, [
                DeepTask(cand.task_id, gang.nnodes, float(gang.gpus_per_node),
                         gang.cpus_per_node, self.duration(cand), cand.retry_not_before,
                         cand.user, cand.max_runtime_s)
                for cand, gang, _ in sorted(rest[room:], key=_estimate_order)])

    def plan(self, preemption: Preemption | None, kept: frozenset[str]) -> Plan:
        """The plan: the steps of the walk, its preemption, the nodes ``kept`` for the
        guard's holder, and every estimate (the soft ones are added here)."""
        # until the soft estimates are added, the estimates are the firm reservations
        reserved = frozenset(self.estimates)
        self._estimate_the_rest()
        model = self.inp.runtimes
        if model is None or model.empty or not (self.estimates or self.deep):
            return Plan(self.steps, preemption, kept,
                        estimates={task_id: Planned(bound)
                                   for task_id, bound in self.estimates.items()},
                        deep=self.deep, reserved=reserved)
        forecast = expected_starts(self.now, self.free_now, self._releasing(model),
                                   self.placed, model)
        if self.deep is not None:  # the rest of the queue goes on from the replay's end
            self.deep.expected, self.deep.model = forecast.timeline, model
        expected = forecast.starts
        steps = self.steps
        for task_id, at in self.planned_at.items():
            steps[at] = _with_expected(steps[at], expected.get(task_id),
                                       self.estimates.get(task_id))
        estimates = {task_id: Planned.of(bound, expected.get(task_id))
                     for task_id, bound in self.estimates.items()}
        return Plan(steps, preemption, kept, estimates=estimates,
                    deep=self.deep, reserved=reserved)

    def _releasing(self, model: RuntimeModel) -> list[Releasing]:
        """The attempts on the cluster, each ending when ``model`` expects."""
        out = []
        cpg = self.sched.cpus_per_gpu
        for row in self.inp.active:
            held = self.inp.snapshot.held_on.get(row.ray_submission_id, {})
            if not held:
                continue
            end = self.release_time(row)
            if end != INF and not (row.cancel_requested or row.stop_requested
                                   or row.preempted_for is not None):
                assert row.max_runtime_s is not None
                start = row.start_time if row.start_time is not None else self.now
                expected = model.end(row.user, (row.nnodes, row.n_gpus_per_node),
                                     row.max_runtime_s, start, self.now)
                end = end if expected is None else expected
            out.append(Releasing({n: (g, g * cpg) for n, g in held.items()}, end))
        return out

    def _record(self, cand: RunnableRow, gang: Gang, nodes: tuple[str, ...] | None,
                *, not_before: float | None = None, forever: bool = False) -> None:
        self.placed.append(Placed(cand.task_id, cand.user, (gang.nnodes, gang.gpus_per_node),
                                  gang.cpus_per_node, cand.max_runtime_s, nodes, not_before,
                                  forever))


def _estimate_order(u: tuple[RunnableRow, Gang, int]) -> tuple[int, float, int]:
    """The order estimates take the timeline in: priority, then the longest waiting."""
    cand = u[0]
    return -cand.priority, cand.runnable_since, cand.seq


def _with_expected(step: Start | Wait, expected: float | None, bound: float | None
                   ) -> Start | Wait:
    """A waiting task's reason with its expected start beside the limits' bound (where
    run history moved it)."""
    if not isinstance(step, Wait) or expected is None or bound is None or expected >= bound:
        return step
    planned = step.why.planned
    # as a rule the very same float; only when not, compared as people read them (to the
    # millisecond: rendering both costs ~4 us, and ~64 steps a tick are matched)
    if planned is None or (planned.bound != bound and iso(planned.bound) != iso(bound)):
        return step
    return Wait(step.cand, step.why.planned_by(Planned(bound, expected)))
