"""Admission passes: one walk over the runnable tasks in admission order per tick.

``BasePass`` holds what every pass shares: the pool as it fills, the owners' loads, the
per-user limits, ``max_running_tasks``, backfill off (first come, first served), the
reasons cached per gang shape (a tick's cost is bounded by shapes, not tasks), and
preemption at the end. ``GuardPass`` is EASY backfilling: the starvation guard keeps the
nodes of one gang that waited past ``starvation_guard_s`` while they drain, and a task whose
time limit ends before they surely drain (the shadow time) may use them meanwhile.
``service.scheduling.reservations.ReservationPass`` plans ahead instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from service.cluster.boundary import ClusterSnapshot
from service.domain.nodes import preemptor_task
from service.domain.reasons import BehindFifo, Guard, MaxRunning, Reason, WaitKind
from service.domain.resources import GPU
from service.domain.rows import ActiveRow, RunnableRow
from service.policy.quotas import Load, load_by_user
from service.scheduling.admission import Decision, FreePool, Gang, InFlight, never_fits
from service.scheduling.fairshare import FairOrder
from service.scheduling.plan import (
    Plan,
    PlanInput,
    Seen,
    Start,
    Wait,
    backoff,
    in_backoff,
)
from service.scheduling.rules import Rules
from service.scheduling.runtimes import held_for


def drained_by(kept: Iterable[str], active: list[ActiveRow], snapshot: ClusterSnapshot
               ) -> float | None:
    """The shadow time: when the ``kept`` nodes are surely free of every attempt now on
    them, the latest of those attempts' deadlines. Attempts whose gang is not placed
    yet may land there, so they count too. None when one of them has no deadline (no
    time limit, or not started), or when GPUs there are used by something that is not an
    Argus attempt (another submitter's job): then nobody can tell, and nothing may use
    the nodes; None too when no attempt of ours is there (the kept nodes wait for
    something else, CPUs used by another submitter say: no end is known)."""
    nodes = set(kept)
    ours: dict[str, float] = dict.fromkeys(nodes, 0.0)  # GPUs Argus attempts hold there
    latest: float | None = None  # none of ours there: what blocks them is unknown
    for row in active:
        held = snapshot.held_on.get(row.ray_submission_id, {})
        for node, gpus in held.items():
            if node in ours:
                ours[node] += gpus
        if sum(held.values()) >= row.total_gpus and nodes.isdisjoint(held):
            continue
        if row.deadline is None:
            return None
        latest = row.deadline if latest is None else max(latest, row.deadline)
    for node in snapshot.nodes:
        if node.node_id in nodes:
            if node.total is None:
                return None
            used = node.total.get(GPU, 0.0) - node.free.get(GPU, 0.0)
            if used > ours[node.node_id] + 1e-9:
                return None
    return latest


def ends_by(cand: RunnableRow, shadow: float | None, now: float) -> bool:
    """Whether ``cand``, started now, surely ends by ``shadow`` (its time limit, with
    ``LIMIT_SLACK_S`` for the stop); not a task in a retry backoff (it starts later)."""
    if shadow is None or cand.max_runtime_s is None:
        return False
    if in_backoff(cand, now):
        return False
    return now + held_for(cand.max_runtime_s) <= shadow


def with_shadow(keeper: Reason | None, shadow: float | None) -> Reason | None:
    """The guard's reason, saying until when at the latest its nodes are kept."""
    if keeper is None or shadow is None or not isinstance(keeper.details, Guard):
        return keeper
    return Reason(keeper.kind, replace(keeper.details, shadow=shadow))



class BasePass:
    """One admission pass over the runnable tasks in ``order`` (re-ranked as it admits)."""

    def __init__(self, rules: Rules, inp: PlanInput, capacity: FreePool | None,
                 order: FairOrder) -> None:
        self.rules = rules
        self.sched = rules.sched
        self.driver = rules.driver
        self.inp = inp
        self.now = inp.now
        self.capacity = capacity  # None: node capacity unknown
        self._never: dict[Gang, Reason | None] = {}  # never_fits, per shape
        # the owners' limits' answers per (owner, gang GPUs), until a start changes a load
        self._held: dict[tuple[str | None, int], Reason | None] = {}
        self.order = order
        self.pool = FreePool.from_snapshot(
            inp.snapshot, [InFlight(r.ray_submission_id, rules.gang(r)) for r in inp.active])
        self.running = len(inp.active)
        self.loads = load_by_user((r.user, r.total_gpus) for r in inp.active)
        # tasks whose lower-priority victims are being stopped for them (an attempt stopped
        # for a drained node's requeue makes room for no task)
        self.preempting = {t for r in inp.active
                           if (t := preemptor_task(r.preempted_for)) is not None}
        self.steps: list[Start | Wait] = []
        self.starving: list[tuple[RunnableRow, Gang]] = []  # may preempt (waited past grace)
        self.seen = Seen(self.sched.fair_share)
        self.blocked: Reason | None = None  # reason for everyone behind (backfill off)
        # shapes that did not fit: (reason, whether an idle cluster could take it, whether
        # it waits for room: what went first is then worth saying)
        self.no_fit: dict[tuple[int, int], tuple[Reason, bool, bool]] = {}

    def forget(self) -> None:
        """The pool changed: what did not fit may now."""
        self.no_fit.clear()

    def run(self) -> Plan:
        for cand in self.order:  # re-ranked as the pass admits
            if not self.prelude(cand):
                self.place(cand, self.rules.gang(cand))
        preemption = None
        if self.starving and not self.preempting:
            preemption = self.rules.preemption(self.starving, self.pool, self.inp.active,
                                               self.inp.snapshot, self.now)
            if preemption is not None:
                self.steps = [Wait(s.cand, preemption.why)
                              if isinstance(s, Wait) and s.cand.task_id == preemption.cand.task_id
                              else s for s in self.steps]
        return self.result(preemption)

    def result(self, preemption) -> Plan:
        return Plan(self.steps, preemption)

    def place(self, cand: RunnableRow, gang: Gang) -> None:
        raise NotImplementedError

    def wait(self, cand: RunnableRow, reason: Reason) -> None:
        self.steps.append(Wait(cand, reason))

    def prelude(self, cand: RunnableRow) -> bool:
        """The rules before any fit: the owner's limits (no guard, nobody blocked), backfill
        off, ``max_running_tasks``. True when ``cand`` waits for one of them."""
        key = (cand.user, cand.nnodes * cand.n_gpus_per_node)
        if key in self._held:
            held = self._held[key]
        else:
            held = self._held[key] = self.rules.held(cand, self.loads, self.inp.disabled)
        if held is not None:
            self.wait(cand, held)
            return True
        if self.blocked is not None:
            self.wait(cand, self.blocked)
            return True
        limit = self.sched.max_running_tasks
        if limit and self.running >= limit:
            self.wait(cand, Reason(WaitKind.MAX_RUNNING, MaxRunning(limit)))
            return True
        return False

    def weighted(self, cand: RunnableRow) -> float:
        return self.order.weighted(cand.user)

    def admit(self, cand: RunnableRow, gang: Gang, decision: Decision) -> bool:
        """Take ``cand``'s room; start it unless it waits out a retry backoff (its room is
        kept for it). True when it starts."""
        self.seen.add(cand, self.weighted(cand))
        self.pool.reserve(gang, self.driver, decision)
        self.forget()  # cached reasons list free resources: now stale
        if in_backoff(cand, self.now):
            self.wait(cand, backoff(cand))
            return False
        self.steps.append(Start(cand))
        self.running += 1
        gpus = gang.total_gpus
        self.order.admitted(cand.user, gpus)
        if cand.user is not None:
            self.loads.setdefault(cand.user, Load()).add(gpus)
            self._held.clear()
        return True

    def never_fits(self, gang: Gang) -> Reason | None:
        """Why ``gang`` can never fit the cluster as it is (node capacity), or None; once
        per shape a pass (the capacity does not change within one, and with 10k runnable
        tasks of a few shapes deciding it again for each was most of the plan's tick)."""
        try:
            return self._never[gang]
        except KeyError:  # once per shape
            pass
        why = None
        if self.capacity is not None and not self.capacity.decide(gang, self.driver).fits:
            why = never_fits(gang, self.capacity)
        self._never[gang] = why
        return why

    def waits_for_room(self, cand: RunnableRow, gang: Gang) -> None:
        """``cand`` could fit an idle cluster but waits: it blocks the queue behind it with
        backfill off, and may preempt once past the grace period."""
        if not self.sched.backfill:
            self.blocked = Reason(WaitKind.BACKFILL_OFF, BehindFifo(cand.task_id, cand.priority))
        if (self.sched.preemption
                and self.now - cand.runnable_since >= self.sched.preemption_grace_s):
            self.starving.append((cand, gang))


class GuardPass(BasePass):
    """EASY backfilling: one reservation, the starvation guard's kept nodes."""

    def __init__(self, rules: Rules, inp: PlanInput, capacity: FreePool | None,
                 order: FairOrder) -> None:
        super().__init__(rules, inp, capacity, order)
        self.kept_full: set[tuple[int, int]] = set()  # nor fit the kept nodes
        self.holder = rules.guard_holder(inp.candidates, self.now, capacity, self.preempting,
                                         self.loads, inp.disabled)
        self.kept: dict[str, str] = {}
        self.keeper: Reason | None = None  # why nodes are kept for a starving gang
        self.shadow: float | None = None  # the kept nodes are surely free by then
        self.held_nodes: dict[str, str] = {}
        self.guard_note: Reason | None = None
        if self.holder is not None:
            self._keep_for_holder(self.holder)

    def forget(self) -> None:
        super().forget()
        self.kept_full.clear()

    def result(self, preemption) -> Plan:
        return Plan(self.steps, preemption, frozenset(self.kept))

    def _keep_for_holder(self, holder: RunnableRow) -> None:
        """The guard: keep the nodes ``holder`` will use from the start of the pass, so
        nothing ahead of it in admission order fills them while they drain: its
        preemption victims' nodes first, then those kept last tick."""
        preempting = holder.task_id in self.preempting
        snapshot = self.inp.snapshot
        prefer = {node for r in self.inp.active if r.preempted_for == holder.task_id
                  for node in snapshot.held_on.get(r.ray_submission_id, {})}
        self.kept = self.pool.keep_for(self.rules.gang(holder), self.capacity,
                                       prefer=prefer | self.inp.reservation)
        if not self.kept:
            return
        kind = WaitKind.PREEMPTION if preempting else WaitKind.STARVATION_GUARD
        self.keeper = Reason(kind, Guard(
            holder.task_id, holder.priority, ", ".join(self.kept.values()),
            self.sched.starvation_guard_s, preempting))
        if not preempting:
            self.shadow = drained_by(self.kept, self.inp.active, snapshot)
            self.keeper = with_shadow(self.keeper, self.shadow)

    def place(self, cand: RunnableRow, gang: Gang) -> None:
        is_holder = (self.holder is not None and cand.task_id == self.holder.task_id
                     and bool(self.kept))
        if is_holder:  # the holder's turn: its nodes are its own
            self.pool.restore_kept()
            self.forget()
            self.held_nodes, self.guard_note = self.kept, self.keeper
            self.kept, self.keeper, self.shadow = {}, None, None
        decision, open_decision = self.fit(cand, gang)
        if decision is not None:
            self.admit(cand, gang, decision)
            return
        self.not_fitting(cand, gang, open_decision, is_holder)

    def fit(self, cand: RunnableRow, gang: Gang) -> tuple[Decision | None, Decision | None]:
        """Where ``cand`` fits now: outside the kept nodes, else on them when it surely
        ends before they drain or outranks their gang. ``(decision or None, the open
        pool's decision when it was asked)``."""
        shape = (cand.nnodes, cand.n_gpus_per_node)
        decision: Decision | None = None
        open_decision: Decision | None = None
        if shape not in self.no_fit:
            open_decision = self.pool.decide(gang, self.driver)
            decision = open_decision if open_decision.fits else None
        if (decision is None and (ends_by(cand, self.shadow, self.now) or self.outranks(cand))
                and shape not in self.kept_full):
            via_kept = self.pool.decide_with_kept(gang, self.driver)
            decision = via_kept if via_kept.fits else None
            if decision is None:
                self.kept_full.add(shape)
        return decision, open_decision

    def outranks(self, cand: RunnableRow) -> bool:
        """Whether ``cand`` has a higher priority than the gang the nodes are kept for:
        the guard bounds the wait of a gang against backfill of its own priority or lower,
        never against the priority order itself."""
        return (bool(self.kept) and self.holder is not None
                and cand.priority > self.holder.priority)

    def not_fitting(self, cand: RunnableRow, gang: Gang, open_decision: Decision | None,
                    is_holder: bool) -> None:
        shape = (cand.nnodes, cand.n_gpus_per_node)
        cached = self.no_fit.get(shape)
        if cached is None:
            never = self.never_fits(gang)
            if never is not None:
                cached = (never, False, False)
            elif (self.keeper is not None
                  and self.pool.decide_with_kept(gang, self.driver).fits):
                cached = (self.keeper, True, False)  # fits but for the guard
            else:
                assert open_decision is not None
                assert open_decision.why is not None
                cached = (open_decision.why, True, True)
            self.no_fit[shape] = cached
        reason, could_fit, for_room = cached
        share = self.weighted(cand)
        self.wait(cand, self.seen.behind(reason, cand, share) if for_room else reason)
        self.seen.add(cand, share)
        if is_holder:  # it does not fit yet: its nodes are kept again
            self.kept = self.pool.keep_for(gang, self.capacity, prefer=self.held_nodes)
            self.keeper = self.guard_note
            self.shadow = (drained_by(self.kept, self.inp.active, self.inp.snapshot)
                           if self.kept else None)
            self.forget()
        if could_fit:  # one that can never fit as it is holds no guard, preempts nobody
            self.waits_for_room(cand, gang)
