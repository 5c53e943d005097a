"""The admission rules that do not depend on how a pass walks the queue: a task's gang,
its owner's limits, whom the starvation guard keeps nodes for, whom a preemption stops."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.cluster.boundary import ClusterSnapshot
from service.domain.reasons import Preempting, Reason, WaitKind
from service.domain.resources import Driver
from service.domain.rows import ActiveRow, RunnableRow
from service.domain.states import TaskState
from service.policy.quotas import Load, hold
from service.scheduling.admission import FreePool, Gang
from service.scheduling.plan import Preemption
from service.scheduling.preemption import Running, choose_victims, eligible

if TYPE_CHECKING:
    from service.config import SchedulerSettings, UserSettings


class Rules:
    """The admission rules of one deployment (settings fixed)."""

    def __init__(self, sched: SchedulerSettings, users: UserSettings, driver: Driver) -> None:
        self.sched = sched
        self.users = users
        self.driver = driver
        # one Gang per shape (it is immutable): a tick asks for one per examined task
        self._gangs: dict[tuple[int, int], Gang] = {}

    def gang(self, cand: RunnableRow) -> Gang:
        shape = (cand.nnodes, cand.n_gpus_per_node)
        found = self._gangs.get(shape)
        if found is None:
            found = self._gangs[shape] = Gang(*shape, self.sched.cpus_per_gpu)
        return found

    def held(self, cand: RunnableRow, loads: dict[str, Load], disabled: frozenset[str]
             ) -> Reason | None:
        """Why the owner's limits hold ``cand`` back, or None."""
        owner = cand.user
        if owner is None:
            return None
        return hold(owner, loads.get(owner), self.users.limits_for(owner),
                    cand.nnodes * cand.n_gpus_per_node, enabled=owner not in disabled)

    def guard_holder(self, candidates: list[RunnableRow], now: float,
                     capacity: FreePool | None, preempting: set[str],
                     loads: dict[str, Load], disabled: frozenset[str]) -> RunnableRow | None:
        """The task the starvation guard keeps nodes for: a preemptor whose victims are
        stopping, else the task of the highest priority that has waited the longest past
        ``starvation_guard_s`` (whatever fair share says: the guard is what bounds every
        task's wait). Not one its owner's limits hold, nor one that can never fit; none
        when backfill is off (nothing passes a waiting task anyway)."""
        if not self.sched.backfill:
            return None
        guard_s = self.sched.starvation_guard_s
        due = [c for c in candidates
               if c.task_id in preempting or now - c.runnable_since >= guard_s]
        due.sort(key=lambda c: (c.task_id not in preempting, -c.priority, c.runnable_since,
                                c.seq))
        for cand in due:
            if self.held(cand, loads, disabled) is not None:
                continue
            if capacity is None or capacity.decide(self.gang(cand), self.driver).fits:
                return cand
        return None

    def preemption(self, starving: list[tuple[RunnableRow, Gang]], pool: FreePool,
                   active: list[ActiveRow], snapshot: ClusterSnapshot, now: float
                   ) -> Preemption | None:
        """The victims that make room for the first starving gang that some can."""
        running = [
            Running(r.task_id, r.attempt_no, r.priority, r.start_time or r.submitted_at or now,
                    snapshot.held_on.get(r.ray_submission_id, {}), self.sched.cpus_per_gpu,
                    r.checkpointing)
            for r in active
            if r.state is TaskState.RUNNING and not r.cancel_requested
            and r.preempted_for is None
        ]
        for cand, gang in starving:
            victims = choose_victims(pool, gang, self.driver, eligible(
                running, cand.priority,
                without_checkpoint=self.sched.preempt_without_checkpoint), now)
            if not victims:
                continue
            names = ", ".join(f"{v.task_id} (priority {v.priority})" for v in victims)
            return Preemption(cand, tuple(victims), Reason(
                WaitKind.PREEMPTION, Preempting(names, self.sched.preemption_grace_s)))
        return None
