"""Conservative backfilling: a forward plan each tick (``scheduler.reservations`` > 0).

Running attempts end at their time limit (``max_runtime_s``; ``LIMIT_SLACK_S`` for the
stop); one being stopped (cancel, preemption) is about to; one without a limit never
ends within the plan. (Ending them earlier, at the median run time of their owner's
attempts of that size, was tried: fewer drains are wasted on the pessimistic limits but
backfill is cut more; on the trace bench's 12 variants it passed 30 of 48 floors against
36 with the limits alone.) The first ``reservations`` tasks in admission
order that cannot start now each get a reservation: the earliest time their gang fits
for their own limit, on the nodes it fits (``service.scheduling.timeline``), in that order, so fair
share and priorities decide the order of reservations, never whether a drain is wasted.
Any task starts now only where it delays no reservation made before it: it must fit now,
and the nodes Ray would place it on (best fit, as ``admission.FreePool`` predicts) must
stay free of every reservation until its own limit ends.

The planned start of each reserved task is its estimate; the timeline the walk writes on and
the estimates after it (the soft ones, the deep queue, the expected starts) are
``service.scheduling.estimates``' (``EstimatingPass``, this pass's base).

A task with no time limit reserves its nodes for good (nothing is known to end it), so
such tasks are planned as the guard plans them. Only the guard's holder
(``Rules.guard_holder``: the highest priority, the longest past ``starvation_guard_s``)
has nodes kept for it when no time is known for it (what it waits for has no limit), or
when it fits now or waits out a backoff (so nothing ahead of it in admission order takes
its room): the nodes the guard would keep (those kept last tick first: ``Plan.kept``),
taken out of the pool from the start of the pass, kept again when its turn does not start
it; a task of higher priority than the holder may use them. A task without a limit that
fits now starts anywhere but on the nodes held for gangs past the guard of its priority
or higher; younger reservations move. Where no task declares a limit the plan decides as
the guard (the Philly replay in docs/benchmarks.md). A starving gang preempts only when
its planned start is further than ``preemption_grace_s`` away, or unknown.

With ``unreserved_above_share`` set, a user whose share of the GPUs is at that multiple of
their fair part gets no firm reservation for a task of the default priority
(``ReservationPass.may_reserve``): its room goes to the others' reservations first, and the
task backfills until its user is back under the bar. A reservation once made is kept
(``PlanInput.reserved``, last tick's ``Plan.reserved``) whatever its user holds later: its
room has been draining, and taken back it would be drained again.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from functools import cached_property

from service.domain.reasons import (
    Guard,
    Planned,
    PlannedAhead,
    Reason,
    ReservedFor,
    WaitKind,
)
from service.domain.rows import RunnableRow
from service.scheduling.admission import Decision, FreePool, Gang
from service.scheduling.estimates import EstimatingPass
from service.scheduling.fairshare import FairOrder
from service.scheduling.plan import (
    Plan,
    PlanInput,
    Preemption,
    Start,
    in_backoff,
)
from service.scheduling.rules import Rules
from service.scheduling.timeline import INF


class ReservationPass(EstimatingPass):
    def __init__(self, rules: Rules, inp: PlanInput, capacity: FreePool | None,
                 order: FairOrder) -> None:
        super().__init__(rules, inp, capacity, order)
        self.budget = self.sched.reservations  # reservations left this tick
        # the nodes the guard's fallback keeps for the holder (kept next tick too:
        # Plan.kept), and why others wait for them; empty and None when none are kept
        self.fallback_nodes: frozenset[str] = frozenset()
        self.fallback_reason: Reason | None = None
        # reserved before the walk (past the guard, or outranking a task that is): task ->
        # its priority
        self.first: dict[str, int] = {}
        self._reserve_overdue()

    @cached_property
    def holder(self) -> RunnableRow | None:
        """The guard's holder (``Rules.guard_holder``: the task of the highest priority
        that waited the longest past the guard): the one gang the fallback may keep nodes
        for. Found when first asked: with every task under a limit it never is."""
        return self.rules.guard_holder(self.inp.candidates, self.now, self.capacity,
                                       self.preempting, self.loads, self.inp.disabled)

    @property
    def fallback_owner(self) -> str:
        """The task the fallback keeps nodes for (the holder), or "" when none are kept."""
        holder = self.holder if self.fallback_nodes else None
        return holder.task_id if holder is not None else ""

    def _reserve_overdue(self) -> None:
        """Tasks runnable for over ``starvation_guard_s`` are reserved first, in
        ``reserve_order`` (the longest waiting first within a priority, big gangs credited
        for their size when ``gang_size_credit_s`` is set; whatever fair share says: this
        bounds every task's wait, as the guard does), before the walk in admission order.
        So are the younger tasks of a higher priority than one of them, before it: a
        fresh priority-10 task never waits behind a priority-0 gang's reservation (it did
        until it was past the guard itself, then took the room drained for that gang).
        A task without a limit is held for good from its start, so its reservation would keep
        its nodes from everyone after it: only the guard's ``holder`` gets one, and when
        it fits now (or waits out a retry backoff) its room is kept as the guard keeps it,
        so nothing ahead of it in admission order takes it."""
        guard_s = self.sched.starvation_guard_s
        open_ended = any(c.max_runtime_s is None and self.now - c.runnable_since >= guard_s
                         for c in self.inp.candidates)
        holder = self.holder if open_ended else None
        if holder is not None and self.duration(holder) == INF:
            gang = self.rules.gang(holder)
            if in_backoff(holder, self.now) or self.pool.decide(gang, self.driver).fits:
                self._fallback(holder, gang)
            elif self._reserve(holder, gang) is not None:
                self.first[holder.task_id] = holder.priority
        # a heap, not a sort: with 10k tasks past the guard only the first few are reserved;
        # small gangs that may not be reserved yet are left out here, not popped one by one
        past, young = [], []
        filtered = self.sched.reserve_small_after_s > 0
        for c in self.inp.candidates:
            if in_backoff(c, self.now) or self.duration(c) == INF:
                continue
            if self.now - c.runnable_since < guard_s:
                young.append(c)
            elif not filtered or self.may_reserve(c, self.rules.gang(c)):
                past.append(c)
        if past and young:  # a task that outranks one past the guard is reserved before it
            lowest = min(c.priority for c in past)
            past += [c for c in young
                     if c.priority > lowest and self.may_reserve(c, self.rules.gang(c))]
        key = self.reserve_order
        due = [(key(c), c) for c in past]
        heapq.heapify(due)  # keys end in the task's seq: never equal
        while due and self.budget > 0:
            cand = heapq.heappop(due)[1]
            gang = self.rules.gang(cand)
            if (self.rules.held(cand, self.loads, self.inp.disabled) is not None
                    or self.never_fits(gang) is not None):
                continue
            if self._reserve(cand, gang) is not None:
                self.first[cand.task_id] = cand.priority

    @cached_property
    def reserve_order(self) -> Callable[[RunnableRow], tuple[int, float, int]]:
        """The sort key of the order tasks past the guard are reserved in: priority, then
        the longest waiting, each GPU the gang asks counting ``gang_size_credit_s`` more of
        waiting (300 by default; 0: by age). The big gangs are the hardest to fit:
        reserved in plain age order they wait behind the small tasks that came first,
        which could have started around them, and a busy spell can end with a big gang
        started last. (Alone, a credit of 300 s gained little on the trace bench; with
        small gangs reserved late, ``may_reserve``, it gave the plan ``backfill``'s
        utilization at full size: docs/benchmarks.md.) One function for the tick: with
        10k tasks past the guard it is called 10k times."""
        credit = self.sched.gang_size_credit_s

        def key(cand: RunnableRow) -> tuple[int, float, int]:
            return (-cand.priority,
                    cand.runnable_since - credit * cand.nnodes * cand.n_gpus_per_node,
                    cand.seq)
        return key

    def result(self, preemption: Preemption | None) -> Plan:
        return self.plan(preemption, self.fallback_nodes)

    def place(self, cand: RunnableRow, gang: Gang) -> None:
        if cand.task_id != self.fallback_owner:
            self._place(cand, gang)
            return
        # its turn: the kept nodes are its to take; when it does not start, they are kept
        # for it again (the budget of reservations aside, as the guard does)
        self.pool.restore_kept()
        self.forget()
        self.timeline.unhold(cand.task_id)
        self.fallback_nodes, self.fallback_reason = frozenset(), None
        steps = len(self.steps)
        self._place(cand, gang)
        if not self.fallback_nodes and not any(isinstance(step, Start)
                                               for step in self.steps[steps:]):
            self._fallback(cand, gang)

    def _place(self, cand: RunnableRow, gang: Gang) -> None:
        if cand.task_id in self.first:  # its turn: placed anew, its budget already spent
            self.timeline.unhold(cand.task_id)
            self.estimates.pop(cand.task_id, None)
            self.budget += 1
            self._record(cand, gang, ())
        shape = (cand.nnodes, cand.n_gpus_per_node)
        decision = self.pool.decide(gang, self.driver) if shape not in self.no_fit else None
        if (decision is None or not decision.fits) and self._outranks(cand):
            via_kept = self.pool.decide_with_kept(gang, self.driver)
            if via_kept.fits:
                self._take(cand, gang, via_kept, self.now + self.duration(cand))
                return
        if decision is not None and decision.fits:
            d = self.duration(cand)
            if in_backoff(cand, self.now):  # its room now is kept through the backoff
                self._take(cand, gang, decision, (cand.retry_not_before or self.now) + d,
                           not_before=cand.retry_not_before)
                return
            g, c = float(gang.gpus_per_node), gang.cpus_per_node
            start = decision if self.timeline.fits(decision.gang_nodes, g, c, d) else \
                self._outside_protected(cand, gang, decision) if d == INF else None
            if start is not None:
                self._take(cand, gang, start, self.now + d)
                return
            self._wait_planned(cand, gang, self._delays(cand, decision, d), for_room=False)
            return
        if decision is not None:
            assert decision.why is not None
            why = decision.why
            if self.fallback_reason is not None and \
                    self.pool.unkept().decide(gang, self.driver).fits:
                why = self.fallback_reason  # it would fit the nodes kept for that gang
            self.no_fit[shape] = (why, True, True)
        cached = self.no_fit.get(shape)
        never = self.never_fits(gang)
        if never is not None:
            self.wait(cand, never)
            return
        assert cached is not None
        self._wait_planned(cand, gang, cached[0], for_room=True)

    def protected(self, cand: RunnableRow) -> set[str]:
        """The gangs past the guard (reserved first, or held by the fallback) whose holds
        ``cand``, a task without a limit, must not take, as the guard's kept nodes: all
        but those of a lower priority than its own (it goes first, as with the guard)."""
        out = {owner for owner, priority in self.first.items() if priority >= cand.priority}
        if self.fallback_owner:
            out.add(self.fallback_owner)
        return out

    def _outranks(self, cand: RunnableRow) -> bool:
        """Whether ``cand`` may use the nodes kept by the fallback: a higher priority than
        the gang they are kept for (as with the guard: it bounds a gang's wait against
        backfill of its own priority or lower, never against the priority order)."""
        if not self.fallback_nodes:  # nothing kept: the holder need not be found
            return False
        holder = self.holder
        return holder is not None and cand.priority > holder.priority \
            and not in_backoff(cand, self.now)

    def _outside_protected(self, cand: RunnableRow, gang: Gang, decision: Decision
                           ) -> Decision | None:
        """Where a task without a limit may start now (it delays every hold on its nodes
        for good as far as the plan knows): anywhere but the nodes held for gangs past
        the guard (``protected``), as the guard admits a task on the pool without its kept
        nodes (Ray places it, best fit, as any task); None: nowhere. Younger reservations
        move, and once past the guard they are kept in turn."""
        protected = self.protected(cand)
        kept = {h.node for h in self.timeline.holds if h.owner in protected}
        if kept.isdisjoint(decision.gang_nodes):
            return decision
        found = self.pool.without(kept).decide(gang, self.driver)
        return found if found.fits else None

    def _take(self, cand: RunnableRow, gang: Gang, decision: Decision, end: float,
              not_before: float | None = None) -> None:
        """``cand`` takes the room of ``decision`` now, held until ``end``."""
        self._hold(decision.gang_nodes, gang, self.now, end, cand.task_id)
        self._record(cand, gang, tuple(decision.gang_nodes), not_before=not_before)
        self.admit(cand, gang, decision)

    def _hold(self, nodes: tuple[str, ...] | list[str], gang: Gang, start: float, end: float,
              owner: str) -> None:
        for node in nodes:
            self.timeline.hold(node, start, end, float(gang.gpus_per_node), gang.cpus_per_node,
                               owner)

    def _delays(self, cand: RunnableRow, decision: Decision, duration: float) -> Reason:
        """Why a task that fits now waits: it would run into a reservation (one of a
        gang past the guard, for a task without a limit)."""
        owners = self.protected(cand) if duration == INF else None
        hold = self.timeline.blocking(decision.gang_nodes, self.now + duration, owners)
        if hold is None:  # held from now on (the guard's fallback): the nodes are taken
            hold = next((h for h in self.timeline.holds if h.node in decision.gang_nodes
                         and h.end == INF and (owners is None or h.owner in owners)), None)
        if hold is None:
            return Reason(WaitKind.RESERVED,
                          PlannedAhead(self.pool.labels(decision.gang_nodes)))
        return Reason(WaitKind.RESERVED,
                      ReservedFor(hold.owner, self.pool.labels([hold.node]), hold.start))

    def _wait_planned(self, cand: RunnableRow, gang: Gang, reason: Reason,
                      for_room: bool) -> None:
        """``cand`` waits: reserve the earliest room the plan knows for it, say when."""
        share = self.weighted(cand)
        why = self.seen.behind(reason, cand, share) if for_room else reason
        self.seen.add(cand, share)
        planned = self._reserve(cand, gang)
        if planned is not None:
            why = why.planned_by(Planned(planned))
            self.planned_at[cand.task_id] = len(self.steps)
        elif self.budget <= 0 or not self.may_reserve(cand, gang):
            self.unplanned.append((cand, gang, len(self.steps)))
        self.wait(cand, why)
        if self.sched.preemption and planned is not None and \
                planned - self.now <= self.sched.preemption_grace_s:
            return  # it starts soon enough without throwing work away
        self.waits_for_room(cand, gang)

    @cached_property
    def small_gpus(self) -> float:
        """The most GPUs a one-node gang asks and is small (``reserve_small_after_s``):
        half of the largest node's; 0 when node capacity is unknown (none is small)."""
        if self.capacity is None:
            return 0.0
        return max((g for g, _ in self.capacity.free_by_node().values()), default=0.0) / 2

    def may_reserve(self, cand: RunnableRow, gang: Gang) -> bool:
        """Whether ``cand`` may get a firm reservation this tick: any task but a small
        gang with a time limit and the default priority (or lower) that has waited less
        than ``reserve_small_after_s``. Such a gang starts wherever it fits without
        delaying a reservation, as backfill: the runs that end on a node, as big as it or
        bigger, make room for it often, so reserving it drains GPUs for little and moves
        the reservations of big gangs, which only a drained node makes room for, later
        (the trace bench's full-size traces: docs/benchmarks.md). Past that wait it is
        reserved as any task, which bounds its wait. A task of a higher priority is
        reserved at once, as its priority asks (without it the trace bench's priority-10
        tasks waited 21 min on average against 8: docs/benchmarks.md).

        With ``unreserved_above_share`` set, no task of the default priority (or lower)
        with a time limit is reserved while its user's weighted share is at the
        ``fair_bar``: its reservation would drain room for a user who already holds more
        than their part while the others' tasks wait (on the trace bench one user's big
        gangs, credited for their size, started in batches that held two thirds of a 4-h
        window). It still backfills, and its user's share falls as their runs end (each
        under a limit), so its wait stays bounded. A task without a limit is planned as
        the guard plans it, whatever its user holds. Nor is a task reserved last tick
        (``PlanInput.reserved``): its user's own backfilled tasks may have put them at the
        bar since, and its room, drained so far, would go to others and be drained again
        (on the trace bench's 2x8 cluster that flip cost 1.2 points of utilization)."""
        if self.duration(cand) == INF or cand.priority > self.sched.default_priority:
            return True
        bar = self.fair_bar  # off: inf, and no share is looked up (10k tasks a tick)
        if bar != INF and self.weighted(cand) >= bar and cand.task_id not in self.inp.reserved:
            return False
        after = self.sched.reserve_small_after_s
        if after <= 0 or gang.nnodes > 1 or gang.gpus_per_node > self.small_gpus:
            return True
        return self.now - cand.runnable_since >= after

    @cached_property
    def fair_bar(self) -> float:
        """The weighted share at which a user's tasks go unreserved
        (``unreserved_above_share`` over the weights of the users with work); inf: never."""
        factor = self.sched.unreserved_above_share
        if factor <= 0 or not self.sched.fair_share:
            return INF
        users = {c.user for c in self.inp.candidates} | {r.user for r in self.inp.active}
        return factor / sum(self.rules.users.weight_for(u) for u in users)

    def _reserve(self, cand: RunnableRow, gang: Gang) -> float | None:
        if self.budget <= 0 or not self.may_reserve(cand, gang):
            return None
        start = self.timeline.place(gang.nnodes, float(gang.gpus_per_node),
                                    gang.cpus_per_node, self.duration(cand),
                                    cand.retry_not_before, cand.task_id)
        if start is None:
            self._fallback(cand, gang)
            return None
        self.budget -= 1
        self._record(cand, gang, None, not_before=cand.retry_not_before)
        self.estimates[cand.task_id] = start
        return start

    def _fallback(self, cand: RunnableRow, gang: Gang) -> None:
        """Keep the nodes ``cand`` will use from now on, as the starvation guard keeps
        them, when it is the guard's holder (no time is known for it, or its room now is
        kept for it) and no gang has them yet."""
        if self.fallback_nodes or not self.sched.backfill:
            return
        holder = self.holder
        if holder is None or cand.task_id != holder.task_id:
            return
        # the guard's choice: the nodes kept last tick first (nodes that followed the
        # freest would move whenever a job ended elsewhere), and out of the pool, so what
        # starts now is placed elsewhere
        kept = self.pool.keep_for(gang, self.capacity, prefer=self.inp.reservation)
        if len(kept) < gang.nnodes:
            self.pool.restore_kept()
            return
        self.fallback_nodes = frozenset(kept)
        self.fallback_reason = Reason(WaitKind.STARVATION_GUARD, Guard(
            cand.task_id, cand.priority, ", ".join(kept.values()),
            self.sched.starvation_guard_s))
        self.forget()  # the pool changed: cached reasons are stale
        self._hold(list(kept), gang, self.now, INF, cand.task_id)
        self._record(cand, gang, tuple(kept), forever=True)
