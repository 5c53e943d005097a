"""Admission planning: from a snapshot of the queue and the cluster to decisions.

Pure: the planner reads no store and calls no cluster. ``Planner.plan`` takes a
``PlanInput`` (the runnable tasks, the attempts on the cluster, the cluster's free and
total resources, the users' fair-share charges, the disabled users, the nodes the guard
kept last tick) and returns a ``Plan`` (``service.scheduling.plan``): which tasks start now, which
wait and why, the nodes kept for a waiting gang, at most one preemption. The scheduler
applies it (claims, Ray submits, pending reasons, stops) and owns what follows from I/O: a
submit Ray refuses leaves its room unused until the next tick.

The rules, each a small function tested by table (the queue policy itself is described in
``service.engine.scheduler``'s docstring): the order (``fairshare.FairOrder``: priority, the
smallest weighted share, FIFO); the owners' limits, ``max_running_tasks`` and backfill off
(``passes.BasePass.prelude``); gang fit (``admission.FreePool``); the starvation guard and
its shadow time (``passes.GuardPass``, ``rules.Rules.guard_holder``); a retry backoff's
kept room; preemption (``rules.Rules.preemption``).
"""

from __future__ import annotations

from service.scheduling.admission import FreePool
from service.scheduling.fairshare import FairOrder
from service.scheduling.passes import GuardPass
from service.scheduling.plan import Plan, PlanInput
from service.scheduling.reservations import ReservationPass
from service.scheduling.rules import Rules


class Planner(Rules):
    """The admission policy of one deployment (settings fixed); ``plan`` once a tick."""

    def plan(self, inp: PlanInput) -> Plan:
        capacity = FreePool.from_capacity(inp.snapshot)  # None: node capacity unknown
        total = (capacity or FreePool.from_snapshot(inp.snapshot)).total_gpus()
        order = FairOrder(inp.candidates, inp.charges, total, self.users.weight_for,
                          enabled=self.sched.fair_share)
        if not inp.candidates:
            return Plan(kept=inp.reservation, shares=order.shares())
        walk = ReservationPass if self.sched.reservations > 0 else GuardPass
        plan = walk(self, inp, capacity, order).run()
        plan.shares = order.shares()
        return plan

