"""The admission planner by table: values in, decisions out (no SQLite, no Ray, no clock).

Each case is a cluster (free GPUs per node), the attempts on it and the runnable tasks in
index order; the expectation is what starts, what waits (and a fragment of why), which
nodes the guard keeps and whom a preemption stops.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from planner_cases import CASES, NOW, node, plan, reasons, running, started, task

from service.cluster.boundary import ClusterSnapshot, NodeResources
from service.config import UserSettings
from service.domain.reasons import Guard, Reason, WaitKind
from service.policy.quotas import Limits
from service.scheduling.passes import drained_by, ends_by, with_shadow
from service.scheduling.runtimes import LIMIT_SLACK_S


@pytest.mark.parametrize(("name", "nodes", "candidates", "sched", "want_started", "want_waits"),
                         CASES, ids=[c[0] for c in CASES])
def test_admission_table(name, nodes, candidates, sched, want_started, want_waits) -> None:
    p = plan(nodes, candidates, **sched)
    assert started(p) == want_started
    got = reasons(p)
    assert set(got) == set(want_waits)
    for task_id, fragment in want_waits.items():
        assert fragment in got[task_id], got[task_id]


def test_fair_share_puts_the_user_with_less_first() -> None:
    p = plan([node("w1", 4)], [task("t1", user="alice"), task("t2", user="carol")],
             charges={"alice": 8.0, "carol": 0.0})
    assert started(p) == ["t2"]
    assert "after users carol (smaller fair share)" in reasons(p)["t1"]


def test_a_users_limit_holds_only_that_users_task() -> None:
    users = UserSettings(limits=Limits(max_running_tasks=1))
    p = plan([node("w1", 4), node("w2", 4)], [task("t1", user="bob"), task("t2")],
             [running("r1", user="bob")], users=users)
    assert started(p) == ["t2"]
    assert "bob" in reasons(p)["t1"]


def test_a_disabled_users_task_waits() -> None:
    p = plan([node("w1", 4)], [task("t1", user="mallory")], disabled=frozenset({"mallory"}))
    assert started(p) == []
    assert "disabled" in reasons(p)["t1"]


def test_the_guard_keeps_draining_nodes_for_a_starving_gang() -> None:
    # w1 is free, w2 drains: t1 (2x4) waited past the guard; t2 (1x4) may not take w1
    p = plan([node("w1", 4), node("w2", 0)],
             [task("t1", nnodes=2, waited=400), task("t2")], [running("r1")],
             held_on={"r1--a01": {"w2": 4}}, reservations=0)  # the guard alone
    assert started(p) == []
    assert "starvation guard" in reasons(p)["t2"]
    assert p.kept == frozenset({"w1", "w2"})


@pytest.mark.parametrize("reservations", [0, 32])  # the guard's shadow; the plan's time
def test_a_task_that_ends_before_the_kept_nodes_drain_may_use_them(reservations: int) -> None:
    limit = 3600.0
    r1 = running("r1", started=NOW - 60, limit=limit)
    quick = task("t2", limit=limit - 60 - 2 * LIMIT_SLACK_S)
    p = plan([node("w1", 4), node("w2", 0)], [task("t1", nnodes=2, waited=400), quick],
             [r1], held_on={"r1--a01": {"w2": 4}}, reservations=reservations)
    assert started(p) == ["t2"]
    assert "free by" in reasons(p)["t1"] or "needs" in reasons(p)["t1"]


def test_preemption_stops_the_lower_priority_task_for_a_starving_gang() -> None:
    victim = running("r1", priority=0)
    p = plan([node("w1", 0)], [task("t1", priority=5, waited=700)], [victim],
             held_on={"r1--a01": {"w1": 4}}, preemption=True, preemption_grace_s=600,
             starvation_guard_s=10_000)
    assert p.preemption is not None
    assert [v.task_id for v in p.preemption.victims] == ["r1"]
    assert reasons(p)["t1"].startswith("preempting r1 (priority 0)")


def test_no_preemption_before_the_grace_period() -> None:
    p = plan([node("w1", 0)], [task("t1", priority=5, waited=10)], [running("r1")],
             held_on={"r1--a01": {"w1": 4}}, preemption=True, preemption_grace_s=600)
    assert p.preemption is None


def test_no_candidates_keeps_last_ticks_reservation() -> None:
    p = plan([node("w1", 4)], [], reservation=frozenset({"w1"}))
    assert p.steps == [] and p.kept == frozenset({"w1"})


# -- the shadow time ------------------------------------------------------------------------

def _snapshot(nodes: list[NodeResources], held_on: dict[str, dict[str, float]]
              ) -> ClusterSnapshot:
    return ClusterSnapshot(tuple(nodes), {k: sum(v.values()) for k, v in held_on.items()},
                           {}, held_on)


@pytest.mark.parametrize(("active", "nodes", "held_on", "want"), [
    ([running("r1", limit=100)], [node("w2", 0)], {"r1--a01": {"w2": 4}}, NOW - 60 + 100),
    ([running("r1")], [node("w2", 0)], {"r1--a01": {"w2": 4}}, None),  # no limit: unknown
    ([running("r1", limit=100), running("r2", limit=500)], [node("w2", 0)],
     {"r1--a01": {"w2": 2}, "r2--a01": {"w2": 2}}, NOW - 60 + 500),  # the latest
    ([], [node("w2", 2)], {}, None),  # 2 GPUs used by something that is not ours
    ([running("r1", limit=100)], [node("w2", 4), node("w3", 0)], {"r1--a01": {"w3": 4}},
     None),  # elsewhere: nothing of ours on w2, so no known end (never 1970-01-01)
], ids=["one limit", "no limit", "latest of two", "foreign use", "attempt elsewhere"])
def test_drained_by(active, nodes, held_on, want) -> None:
    assert drained_by({"w2"}, active, _snapshot(nodes, held_on)) == want


@pytest.mark.parametrize(("cand", "shadow", "want"), [
    (task("t1", limit=100), NOW + 100 + LIMIT_SLACK_S, True),
    (task("t1", limit=100), NOW + 100, False),  # no slack for the stop
    (task("t1"), NOW + 10_000, False),  # no limit
    (task("t1", limit=100), None, False),  # nodes with no known end
    (task("t1", limit=10, backoff_until=NOW + 5), NOW + 10_000, False),  # starts later
])
def test_ends_by(cand, shadow, want) -> None:
    assert ends_by(cand, shadow, NOW) is want


def test_with_shadow_says_until_when() -> None:
    kept = Reason(WaitKind.STARVATION_GUARD, Guard("t1", 0, "10.0.0.1", 600.0))
    assert with_shadow(None, NOW) is None
    assert with_shadow(kept, None) == kept
    shadowed = with_shadow(kept, NOW)
    assert shadowed is not None and shadowed.kind is WaitKind.STARVATION_GUARD
    assert shadowed.text.startswith(kept.text + "; they are free by")


def test_plan_is_pure_same_input_same_plan() -> None:
    args = ([node("w1", 4), node("w2", 2)], [task("t1"), task("t2", gpus=2), task("t3")])
    first, second = plan(*args), plan(*args)
    assert first.steps == second.steps and first.kept == second.kept
    assert [replace(s.cand) for s in first.steps] == [s.cand for s in second.steps]


# -- defects found on real workloads (each failed before its fix) ---------------------------

def test_kept_nodes_blocked_by_something_else_name_no_date() -> None:
    """CPUs of w1 are used by another submitter: the gang kept there waits with no known
    end. The reason said 'they are free by 1970-01-01T00:00:00.000Z'."""
    cpu_starved = NodeResources("w1", "10.0.0.1",
                                {"GPU": 4.0, "CPU": 6.0, "worker_node": 100.0},
                                {"GPU": 4.0, "CPU": 16.0, "worker_node": 100.0})
    p = plan([cpu_starved], [task("t1", waited=400), task("t2", gpus=1)],
             reservations=0)
    assert started(p) == []
    assert p.kept == frozenset({"w1"})
    assert "starvation guard" in reasons(p)["t2"]  # it would fit w1 but for the guard
    for reason in reasons(p).values():
        assert "1970" not in reason and "free by" not in reason, reason


def test_a_higher_priority_task_is_not_held_back_by_a_lower_priority_guard() -> None:
    """A fresh priority-10 task waited 'behind t1 (priority 0) ... nodes kept' until it had
    itself waited past the guard."""
    p = plan([node("w1", 4), node("w2", 0)],
             [task("t2", priority=10), task("t1", nnodes=2, waited=400)], [running("r1")],
             held_on={"r1--a01": {"w2": 4}}, reservations=0)  # the guard alone
    assert started(p) == ["t2"]
    assert "needs 2x4 GPUs" in reasons(p)["t1"]


def test_an_equal_priority_task_still_waits_for_the_guard() -> None:
    p = plan([node("w1", 4), node("w2", 0)],
             [task("t1", nnodes=2, waited=400), task("t2")], [running("r1")],
             held_on={"r1--a01": {"w2": 4}}, reservations=0)  # the guard alone
    assert started(p) == []
    assert "starvation guard" in reasons(p)["t2"]


@pytest.mark.parametrize(("charges", "says"), [
    ({"alice": 0.0, "bob": 0.0}, None),  # a tie: alice came first by FIFO only
    ({"alice": 0.0, "bob": 4.0}, "; after users alice (smaller fair share)"),
])
def test_smaller_fair_share_is_said_only_when_it_was_smaller(charges, says) -> None:
    """On a tie the reason said 'after users alice (smaller fair share)'."""
    p = plan([node("w1", 4)], [task("t1", user="alice"), task("t2", user="bob")],
             charges=charges)
    assert started(p) == ["t1"]
    if says is None:
        assert "fair share" not in reasons(p)["t2"], reasons(p)["t2"]
    else:
        assert reasons(p)["t2"].endswith(says)
