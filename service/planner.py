"""Admission planning: from a snapshot of the queue and the cluster to decisions.

Pure: the planner reads no store and calls no cluster. ``Planner.plan`` takes the runnable
tasks in admission order's input, the attempts on the cluster, the cluster's free and total
resources, the users' fair-share charges, the disabled users and the nodes the guard kept
last tick, and returns a ``Plan``: which tasks start now (``Start``), which wait and why
(``Wait``), which nodes the starvation guard keeps for whom, and at most one preemption.
The scheduler applies it (claims, Ray submits, pending reasons, stops) and owns what
follows from I/O: a submit Ray refuses leaves its room unused until the next tick.

The rules, each a small function or method below (the queue policy itself is described in
``service.scheduler``'s docstring):

* order: ``fairshare.FairOrder`` (priority, then the smallest weighted share, then FIFO);
* per-user limits first: ``quotas.hold_reason`` (no guard, blocks nobody);
* ``max_running_tasks``; backfill off: first come, first served;
* gang fit: ``admission.FreePool.decide`` on what is free outside the kept nodes, then on
  the kept nodes for a task whose time limit ends before they surely drain
  (``ends_by`` / ``drained_by``: the shadow time);
* the guard: ``guard_holder`` picks whom nodes are kept for, ``Pass._keep_for_holder``
  which nodes;
* a task in retry backoff that fits keeps its room (``backoff_reason``);
* preemption: the first gang past ``preemption_grace_s`` that ``preemption.choose_victims``
  can make room for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from service.admission import GPU, Decision, Driver, FreePool, Gang, InFlight, never_fits_reason
from service.cluster import ClusterSnapshot
from service.fairshare import FairOrder, Share
from service.preemption import Running, choose_victims, eligible
from service.quotas import Load, hold_reason, load_by_user
from service.rows import ActiveRow, RunnableRow
from service.states import TaskState
from service.timefmt import iso

if TYPE_CHECKING:
    from service.config import SchedulerSettings, UserSettings

# A task may use kept nodes when its limit ends this long before they surely drain: the
# stop of an attempt past its limit takes a tick to send and Ray a few seconds to do.
LIMIT_SLACK_S = 30.0


@dataclass(frozen=True)
class Start:
    """Submit this task now: its gang fits."""

    cand: RunnableRow


@dataclass(frozen=True)
class Wait:
    """This task keeps waiting, for this reason."""

    cand: RunnableRow
    reason: str


@dataclass(frozen=True)
class Preemption:
    """Stop ``victims`` to make room for ``cand``, whose reason becomes ``reason``."""

    cand: RunnableRow
    victims: tuple[Running, ...]
    reason: str


@dataclass(frozen=True)
class PlanInput:
    now: float
    candidates: list[RunnableRow]  # runnable tasks, the backfill window, in index order
    active: list[ActiveRow]  # attempts SUBMITTING, SUBMITTED or RUNNING
    snapshot: ClusterSnapshot
    charges: dict[str | None, float]  # each user's fair-share charge now
    disabled: frozenset[str] = frozenset()  # users whose tasks may not start
    reservation: frozenset[str] = frozenset()  # the nodes the guard kept last tick


@dataclass
class Plan:
    steps: list[Start | Wait] = field(default_factory=list)  # in admission order
    preemption: Preemption | None = None
    kept: frozenset[str] = frozenset()  # node ids the guard keeps after this tick
    shares: dict[str | None, Share] = field(default_factory=dict)


class Seen:
    """What admission examined so far this tick, to say what a waiting task is behind."""

    def __init__(self, fair: bool) -> None:
        self.fair = fair
        self.top_priority: int | None = None
        # per priority: each user's smallest weighted share when one of their tasks came up
        self.users_at: dict[int, dict[str | None, float]] = {}

    def add(self, cand: RunnableRow, weighted_share: float = 0.0) -> None:
        if self.top_priority is None or cand.priority > self.top_priority:
            self.top_priority = cand.priority
        users = self.users_at.setdefault(cand.priority, {})
        users[cand.user] = min(users.get(cand.user, weighted_share), weighted_share)

    def ahead_of(self, cand: RunnableRow, weighted_share: float = 0.0) -> str:
        """``"; after tasks of higher priority"`` or ``"; after users bob, carol (smaller
        fair share)"`` when such tasks came first in admission order: users whose weighted
        share was smaller than ``weighted_share`` (``cand``'s user's), not those that only
        came first on a tie (FIFO); else ``""``."""
        if self.top_priority is not None and self.top_priority > cand.priority:
            return "; after tasks of higher priority"
        if not self.fair:
            return ""
        others = sorted(u or "-" for u, share in self.users_at.get(cand.priority, {}).items()
                        if u != cand.user and share < weighted_share - 1e-12)
        if not others:
            return ""
        shown = ", ".join(others[:3]) + (" ..." if len(others) > 3 else "")
        return f"; after users {shown} (smaller fair share)"


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
    return now + cand.max_runtime_s + LIMIT_SLACK_S <= shadow


def in_backoff(cand: RunnableRow, now: float) -> bool:
    return cand.retry_not_before is not None and cand.retry_not_before > now


def with_shadow(keeper: str | None, shadow: float | None) -> str | None:
    """The guard's reason, saying until when at the latest its nodes are kept."""
    if keeper is None or shadow is None:
        return keeper
    return (f"{keeper}; they are free by {iso(shadow)} at the latest: a task whose "
            "max_runtime_s ends by then may run there meanwhile")


def backoff_reason(cand: RunnableRow) -> str:
    return (f"retry backoff: attempt {cand.attempt_no + 1} not before "
            f"{iso(cand.retry_not_before)}; the room it needs is kept for it")


class Planner:
    """The admission policy of one deployment (settings fixed); ``plan`` once a tick."""

    def __init__(self, sched: SchedulerSettings, users: UserSettings, driver: Driver) -> None:
        self.sched = sched
        self.users = users
        self.driver = driver

    def gang(self, cand: RunnableRow) -> Gang:
        return Gang(cand.nnodes, cand.n_gpus_per_node, self.sched.cpus_per_gpu)

    def held(self, cand: RunnableRow, loads: dict[str, Load], disabled: frozenset[str]
             ) -> str | None:
        """Why the owner's limits hold ``cand`` back, or None."""
        owner = cand.user
        if owner is None:
            return None
        return hold_reason(owner, loads.get(owner), self.users.limits_for(owner),
                           cand.nnodes * cand.n_gpus_per_node, enabled=owner not in disabled)

    def plan(self, inp: PlanInput) -> Plan:
        capacity = FreePool.from_capacity(inp.snapshot)  # None: node capacity unknown
        total = (capacity or FreePool.from_snapshot(inp.snapshot)).total_gpus()
        order = FairOrder(inp.candidates, inp.charges, total, self.users.weight_for,
                          enabled=self.sched.fair_share)
        if not inp.candidates:
            return Plan(kept=inp.reservation, shares=order.shares())
        plan = _Pass(self, inp, capacity, order).run()
        plan.shares = order.shares()
        return plan

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
            return Preemption(cand, tuple(victims), (
                f"preempting {names} to make room (waited past "
                f"preemption_grace_s={self.sched.preemption_grace_s:g})"))
        return None


class _Pass:
    """One admission pass over the runnable tasks in order: the pool as it fills, the
    guard's kept nodes, and the reasons cached per gang shape (a tick's cost is bounded
    by shapes, not tasks)."""

    def __init__(self, planner: Planner, inp: PlanInput, capacity: FreePool | None,
                 order: FairOrder) -> None:
        self.p = planner
        self.order = order
        self.sched = planner.sched
        self.inp = inp
        self.now = inp.now
        self.capacity = capacity
        self.pool = FreePool.from_snapshot(
            inp.snapshot, [InFlight(r.ray_submission_id, planner.gang(r)) for r in inp.active])
        self.running = len(inp.active)
        self.loads = load_by_user((r.user, r.total_gpus) for r in inp.active)
        # tasks whose lower-priority victims are being stopped for them
        self.preempting = {r.preempted_for for r in inp.active if r.preempted_for is not None}
        self.steps: list[Start | Wait] = []
        self.starving: list[tuple[RunnableRow, Gang]] = []  # may preempt (waited past grace)
        self.seen = Seen(self.sched.fair_share)
        self.blocked: str | None = None  # reason for everyone behind (backfill off)
        # shapes that did not fit: (reason, whether an idle cluster could take it, whether
        # it waits for room: what went first is then worth saying)
        self.no_fit: dict[tuple[int, int], tuple[str, bool, bool]] = {}
        self.kept_full: set[tuple[int, int]] = set()  # nor fit the kept nodes
        self.holder = planner.guard_holder(inp.candidates, self.now, capacity, self.preempting,
                                           self.loads, inp.disabled)
        self.kept: dict[str, str] = {}
        self.keeper: str | None = None  # why nodes are kept for a starving gang
        self.shadow: float | None = None  # the kept nodes are surely free by then
        self.held_nodes: dict[str, str] = {}
        self.guard_note: str | None = None
        if self.holder is not None:
            self._keep_for_holder(self.holder)

    def forget(self) -> None:
        """The pool changed: what did not fit may now."""
        self.no_fit.clear()
        self.kept_full.clear()

    def _keep_for_holder(self, holder: RunnableRow) -> None:
        """The guard: keep the nodes ``holder`` will use from the start of the pass, so
        nothing ahead of it in admission order fills them while they drain: its
        preemption victims' nodes first, then those kept last tick."""
        preempting = holder.task_id in self.preempting
        snapshot = self.inp.snapshot
        prefer = {node for r in self.inp.active if r.preempted_for == holder.task_id
                  for node in snapshot.held_on.get(r.ray_submission_id, {})}
        self.kept = self.pool.keep_for(self.p.gang(holder), self.capacity,
                                       prefer=prefer | self.inp.reservation)
        if not self.kept:
            return
        why = ("lower-priority tasks are being preempted for it" if preempting else
               f"runnable for over {self.sched.starvation_guard_s:g}s")
        self.keeper = (f"waiting behind {holder.task_id} (priority {holder.priority}), {why}: "
                       f"nodes {', '.join(self.kept.values())} are kept for it (starvation guard)")
        if not preempting:
            self.shadow = drained_by(self.kept, self.inp.active, snapshot)
            self.keeper = with_shadow(self.keeper, self.shadow)

    def run(self) -> Plan:
        for cand in self.order:  # re-ranked as the pass admits
            self.step(cand)
        preemption = None
        if self.starving and not self.preempting:
            preemption = self.p.preemption(self.starving, self.pool, self.inp.active,
                                           self.inp.snapshot, self.now)
            if preemption is not None:
                self.steps = [Wait(s.cand, preemption.reason)
                              if isinstance(s, Wait) and s.cand.task_id == preemption.cand.task_id
                              else s for s in self.steps]
        return Plan(self.steps, preemption, frozenset(self.kept))

    def wait(self, cand: RunnableRow, reason: str) -> None:
        self.steps.append(Wait(cand, reason))

    def step(self, cand: RunnableRow) -> None:
        held = self.p.held(cand, self.loads, self.inp.disabled)
        if held is not None:
            return self.wait(cand, held)  # the owner's limit: no guard, nobody blocked
        if self.blocked is not None:
            return self.wait(cand, self.blocked)
        limit = self.sched.max_running_tasks
        if limit and self.running >= limit:
            return self.wait(cand, f"max_running_tasks ({limit}) reached")
        gang = self.p.gang(cand)
        is_holder = (self.holder is not None and cand.task_id == self.holder.task_id
                     and bool(self.kept))
        if is_holder:  # the holder's turn: its nodes are its own
            self.pool.restore_kept()
            self.forget()
            self.held_nodes, self.guard_note = self.kept, self.keeper
            self.kept, self.keeper, self.shadow = {}, None, None
        decision, open_decision = self.fit(cand, gang)
        if decision is not None:
            return self.admit(cand, gang, decision)
        self.not_fitting(cand, gang, open_decision, is_holder)

    def fit(self, cand: RunnableRow, gang: Gang) -> tuple[Decision | None, Decision | None]:
        """Where ``cand`` fits now: outside the kept nodes, else on them when it surely
        ends before they drain. ``(decision or None, the open pool's decision when it was
        asked)``."""
        shape = (cand.nnodes, cand.n_gpus_per_node)
        decision: Decision | None = None
        open_decision: Decision | None = None
        if shape not in self.no_fit:
            open_decision = self.pool.decide(gang, self.p.driver)
            decision = open_decision if open_decision.fits else None
        if (decision is None and (ends_by(cand, self.shadow, self.now) or self.outranks(cand))
                and shape not in self.kept_full):
            via_kept = self.pool.decide_with_kept(gang, self.p.driver)
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

    def weighted(self, cand: RunnableRow) -> float:
        return self.order.share(cand.user).weighted

    def admit(self, cand: RunnableRow, gang: Gang, decision: Decision) -> None:
        self.seen.add(cand, self.weighted(cand))
        self.pool.reserve(gang, self.p.driver, decision)
        self.forget()  # cached reasons list free resources: now stale
        if in_backoff(cand, self.now):  # waits out its retry backoff; its room is kept
            return self.wait(cand, backoff_reason(cand))
        self.steps.append(Start(cand))
        self.running += 1
        gpus = gang.total_gpus
        self.order.admitted(cand.user, gpus)
        if cand.user is not None:
            self.loads.setdefault(cand.user, Load()).add(gpus)

    def not_fitting(self, cand: RunnableRow, gang: Gang, open_decision: Decision | None,
                    is_holder: bool) -> None:
        shape = (cand.nnodes, cand.n_gpus_per_node)
        cached = self.no_fit.get(shape)
        if cached is None:
            if self.capacity is not None and not self.capacity.decide(gang, self.p.driver).fits:
                cached = (never_fits_reason(gang, self.capacity), False, False)
            elif (self.keeper is not None
                  and self.pool.decide_with_kept(gang, self.p.driver).fits):
                cached = (self.keeper, True, False)  # fits but for the guard
            else:
                assert open_decision is not None
                cached = (open_decision.reason, True, True)
            self.no_fit[shape] = cached
        reason, could_fit, for_room = cached
        share = self.weighted(cand)
        self.wait(cand, reason + self.seen.ahead_of(cand, share) if for_room else reason)
        self.seen.add(cand, share)
        if is_holder:  # it does not fit yet: its nodes are kept again
            self.kept = self.pool.keep_for(gang, self.capacity, prefer=self.held_nodes)
            self.keeper = self.guard_note
            self.shadow = (drained_by(self.kept, self.inp.active, self.inp.snapshot)
                           if self.kept else None)
            self.forget()
        if not could_fit:
            return  # can never fit as it is: holds no guard, preempts nobody
        if not self.sched.backfill:
            self.blocked = (f"waiting behind {cand.task_id} (priority {cand.priority}): "
                            "first come, first served (backfill off)")
        if (self.sched.preemption
                and self.now - cand.runnable_since >= self.sched.preemption_grace_s):
            self.starving.append((cand, gang))
