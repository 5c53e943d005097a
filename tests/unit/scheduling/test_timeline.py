"""The forward plan's arithmetic (service.scheduling.timeline) and the reservation pass by table."""

from __future__ import annotations

import random

import pytest
from planner_cases import NOW, node, plan, reasons, running, started, starts, task

from service.cluster.boundary import NodeResources
from service.config import UserSettings
from service.domain.timefmt import iso
from service.scheduling.runtimes import LIMIT_SLACK_S, held_for
from service.scheduling.timeline import INF, Timeline


def line(**free: tuple[float, float]) -> Timeline:
    return Timeline(0.0, free)


def test_profile_steps_through_releases_and_holds() -> None:
    t = line(w1=(2, 6))
    t.release("w1", 100, 2, 6)
    t.hold("w1", 50, 150, 1, 3, "a")
    assert t.profile("w1") == [(0.0, 2, 6), (50, 1, 3), (100, 3, 9), (150, 4, 12)]
    assert t.free_at("w1", 120) == (3, 9)


@pytest.mark.parametrize(("gpus", "duration", "want"), [
    (2, 10, [(0.0, INF)]),  # fits now for ever
    (3, 10, [(100, INF)]),  # after the release
    (4, 10, []),  # never 4
    (3, INF, [(100, INF)]),  # no limit: from the release on, for good
])
def test_starts(gpus, duration, want) -> None:
    t = line(w1=(2, 100))
    t.release("w1", 100, 1, 0)
    assert t.starts("w1", gpus, 0, duration) == want


def test_a_window_too_short_is_no_start() -> None:
    t = line(w1=(4, 100))
    t.hold("w1", 50, 200, 4, 0, "gang")
    assert t.starts("w1", 4, 0, 60) == [(200, INF)]  # [0, 50) is too short for 60 s
    assert t.starts("w1", 4, 0, 50) == [(0.0, 0.0), (200, INF)]
    assert t.fits(["w1"], 4, 0, 50) and not t.fits(["w1"], 4, 0, 51)


def test_earliest_needs_distinct_nodes_at_one_time() -> None:
    t = line(w1=(8, 24), w2=(0, 0), w3=(0, 0))
    t.release("w2", 300, 8, 24)
    t.release("w3", 100, 8, 24)
    assert t.earliest(1, 8, 24, 1000) == (0.0, ["w1"])
    assert t.earliest(2, 8, 24, 1000) == (100, ["w1", "w3"]) or \
        t.earliest(2, 8, 24, 1000) == (100, ["w3", "w1"])
    assert t.earliest(3, 8, 24, 1000)[0] == 300
    assert t.earliest(4, 8, 24, 1000) is None
    assert t.earliest(1, 8, 24, 1000, not_before=50)[0] == 50


def test_earliest_prefers_the_fullest_node_that_fits() -> None:
    t = line(w1=(8, 24), w2=(2, 6))
    assert t.earliest(1, 2, 6, 100) == (0.0, ["w2"])


def test_place_holds_the_earliest_room_so_the_next_ask_goes_after_it() -> None:
    t = line(w1=(4, 12), w2=(0, 0))
    t.release("w2", 100, 4, 12)
    assert t.place(2, 4, 12, 50, None, "gang") == 100  # both nodes from w2's release
    assert {(h.node, h.start, h.end, h.owner) for h in t.holds} == {
        ("w1", 100, 150, "gang"), ("w2", 100, 150, "gang")}
    assert t.place(1, 4, 12, 100, None, "a") == 0  # w1 is free until the gang's turn
    assert t.place(1, 4, 12, 100, None, "b") == 150  # after the gang
    assert t.place(1, 8, 12, 10, None, "c") is None  # no node has 8 GPUs: nothing held
    assert "c" not in {h.owner for h in t.holds}


def test_unhold_gives_back_exactly_that_owners_holds() -> None:
    t = line(w1=(8, 24))
    t.hold("w1", 10, 20, 4, 12, "a")
    t.hold("w1", 10, 30, 4, 12, "b")
    t.unhold("a")
    assert t.profile("w1") == [(0.0, 8, 24), (10, 4, 12), (30, 8, 24)]
    assert [h.owner for h in t.holds] == ["b"]


def test_an_owner_holds_again_after_its_unhold_and_one_that_never_held_is_a_no_op() -> None:
    t = line(w1=(8, 24))
    t.hold("w1", 10, 20, 4, 12, "a")
    t.unhold("never-held")
    t.unhold("a")
    t.hold("w1", 5, 15, 2, 6, "a")  # placed anew: only the new hold counts
    assert t.profile("w1") == [(0.0, 8, 24), (5, 6, 18), (15, 8, 24)]
    t.unhold("a")
    assert t.profile("w1") == [(0.0, 8, 24)] and t.holds == []


def _folded(free: tuple[float, float], events: list[tuple[float, float, float, str]]
            ) -> list[tuple[float, float, float]]:
    """A node's profile folded from scratch: its events in time order, each within 1e-9 of
    a step's time merged into that step."""
    gpus, cpus = free
    out = [(0.0, gpus, cpus)]
    for at, dg, dc, _ in sorted(events):
        gpus, cpus = gpus + dg, cpus + dc
        if at <= out[-1][0] + 1e-9:
            out[-1] = (out[-1][0], gpus, cpus)
        else:
            out.append((at, gpus, cpus))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_a_profile_brought_up_to_date_equals_one_folded_from_scratch(seed: int) -> None:
    """Each change refolds a node's profile only from the first event it touched: after
    any mix of releases, holds and unholds (times repeated, and 1e-10 apart), the profile
    is the one folded anew."""
    rng = random.Random(seed)
    free = {"w1": (8.0, 24.0), "w2": (0.0, 0.0)}
    t = Timeline(0.0, free)
    events: dict[str, list[tuple[float, float, float, str]]] = {n: [] for n in free}
    times = [0.0, 10.0, 10.0 + 1e-10, 20.0, 35.0, 50.0]
    for step in range(30):
        n = rng.choice(list(free))
        op = rng.random()
        if op < 0.25:
            at, g = rng.choice(times), float(rng.randint(1, 4))
            t.release(n, at, g, 3 * g)
            events[n].append((at, g, 3 * g, ""))
        elif op < 0.8:
            start = rng.choice(times)
            end = rng.choice([INF] + [x for x in times if x > start] + [start + 7.5])
            g, owner = float(rng.randint(1, 4)), f"t{rng.randint(1, 5)}"
            t.hold(n, start, end, g, 3 * g, owner)
            events[n].append((start, -g, -3 * g, owner))
            if end != INF:
                events[n].append((end, g, 3 * g, owner))
        else:
            owner = f"t{rng.randint(1, 5)}"
            t.unhold(owner)
            events = {k: [e for e in v if e[3] != owner] for k, v in events.items()}
        if step % 3 == 0:  # read now and then: several changes between two folds, too
            for k in free:
                assert t.profile(k) == _folded(free[k], events[k]), (seed, step, k)
    for k in free:
        assert t.profile(k) == _folded(free[k], events[k])


def test_free_at_reads_the_step_in_force_at_that_time() -> None:
    t = line(w1=(8, 24))
    t.hold("w1", 10, 20, 4, 12, "a")
    assert [t.free_at("w1", at) for at in (0, 9.5, 10, 15, 20, 99)] == [
        (8, 24), (8, 24), (4, 12), (4, 12), (8, 24), (8, 24)]


def test_earliest_answers_again_only_until_the_timeline_changes() -> None:
    t = line(w1=(8, 24), w2=(0, 0))
    assert t.earliest(2, 8, 24, 100) is None
    t.release("w2", 50, 8, 24)  # a release, a hold, an unhold: each a new answer
    assert t.earliest(2, 8, 24, 100) == (50, ["w1", "w2"])
    t.hold("w1", 0, 500, 8, 24, "a")
    assert t.earliest(2, 8, 24, 100) == (500, ["w1", "w2"])
    got = t.earliest(2, 8, 24, 100)
    got[1].append("mutated")  # the caller's list is its own
    assert t.earliest(2, 8, 24, 100) == (500, ["w1", "w2"])
    t.unhold("a")
    assert t.earliest(2, 8, 24, 100) == (50, ["w1", "w2"])


def _earliest_by_trying_every_time(t: Timeline, gpus: float, duration: float,
                                   not_before: float) -> float | None:
    times = sorted({not_before} | {h.start for h in t.holds} | {h.end for h in t.holds})
    for at in (x for x in times if x >= not_before):
        if any(_room(t, node, at, gpus, duration) for node in t.nodes):
            return at
    return None


def _room(t: Timeline, node: str, at: float, gpus: float, duration: float) -> bool:
    inside = [g for x, g, _ in t.profile(node) if at < x < at + duration]
    return min([t.free_at(node, at)[0], *inside]) >= gpus


@pytest.mark.parametrize("seed", range(20))
def test_earliest_for_one_node_is_the_first_time_any_node_has_room(seed: int) -> None:
    rng = random.Random(seed)
    t = line(**{f"w{i}": (8, 24) for i in range(4)})
    for k in range(rng.randint(1, 12)):
        start = rng.choice((0.0, rng.uniform(0, 5000)))
        end = INF if rng.random() < 0.15 else start + rng.uniform(10, 3000)
        t.hold(f"w{rng.randrange(4)}", start, end, rng.choice((1, 4, 8)), 0, f"h{k}")
    for gpus in (1, 4, 8):
        for duration in (60.0, 1000.0, INF):
            for not_before in (0.0, 700.0):
                found = t.earliest(1, gpus, 0, duration, not_before)
                want = _earliest_by_trying_every_time(t, gpus, duration, not_before)
                assert (found[0] if found else None) == want


def test_blocking_names_the_first_future_hold() -> None:
    t = line(w1=(8, 24))
    t.hold("w1", 0, 100, 1, 3, "started-now")
    t.hold("w1", 500, 900, 8, 24, "gang")
    assert t.blocking(["w1"], 600).owner == "gang"
    assert t.blocking(["w1"], 400) is None


# -- the reservation pass ---------------------------------------------------------------------

LIMIT = 3600.0


def test_a_gang_is_reserved_and_a_short_task_backfills_before_it() -> None:
    # w2 drains at r1's limit; the 2x4 gang is planned then; a task ending before that
    # starts on w1 now, one that would run past it waits
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    gang = task("t1", nnodes=2)
    short = task("t2", gpus=1, limit=600)
    long_ = task("t3", gpus=1, limit=LIMIT * 2)
    p = plan([node("w1", 4), node("w2", 0)], [gang, short, long_], [r1],
             held_on={"r1--a01": {"w2": 4}}, reservations=8)
    assert started(p) == ["t2"]
    drained = NOW - 60 + LIMIT + LIMIT_SLACK_S
    assert p.estimates["t1"].start == drained
    assert "planned start by" in reasons(p)["t1"]
    assert reasons(p)["t3"].startswith("waiting behind t1: nodes 10.0.0.1 are reserved")


def test_the_plan_orders_reservations_by_priority() -> None:
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    p = plan([node("w1", 0)], [task("t2", priority=5), task("t1")], [r1],
             held_on={"r1--a01": {"w1": 4}}, reservations=8)
    first_free = NOW - 60 + LIMIT + LIMIT_SLACK_S
    assert p.estimates["t2"].start == first_free
    assert "t1" not in p.estimates  # after t2 on the only node: no limit, for good


@pytest.mark.parametrize(("gang_priority", "fresh_priority", "starts"), [
    (0, 10, True),  # a fresh task of a higher priority goes first: it starts now
    (0, 0, False),  # of the same priority: it waits behind the gang past the guard
    (-5, 0, True),  # the gang's owner stepped it back: a default task goes first
])
def test_a_fresh_task_of_a_higher_priority_is_not_held_behind_a_gang_past_the_guard(
        gang_priority: int, fresh_priority: int, starts: bool) -> None:
    # the 2x4 gang waited past the guard: w2 drains for it (r1's limit); the fresh 1x4
    # fits w1 now but would run past the gang's planned start
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    gang = task("t1", nnodes=2, limit=LIMIT, waited=400, priority=gang_priority)
    fresh = task("t2", limit=LIMIT * 2, waited=10, priority=fresh_priority)
    p = plan([node("w1", 4), node("w2", 0)], [gang, fresh], [r1],
             held_on={"r1--a01": {"w2": 4}}, reservations=8)
    if starts:
        assert started(p) == ["t2"]
        assert p.estimates["t1"].start == NOW + LIMIT * 2 + LIMIT_SLACK_S  # after t2, by limits
    else:
        assert started(p) == []
        assert reasons(p)["t2"].startswith("waiting behind t1: nodes 10.0.0.1 are reserved")
        assert p.estimates["t1"].start == NOW - 60 + LIMIT + LIMIT_SLACK_S


@pytest.mark.parametrize(("fresh_priority", "starts"), [(10, True), (0, False)])
def test_a_fresh_task_without_a_limit_of_a_higher_priority_takes_a_lower_gangs_nodes(
        fresh_priority: int, starts: bool) -> None:
    # the same, the fresh task without a limit: it holds w1 for good as far as the plan
    # knows, so the gang past the guard keeps w1 from it only when it is not outranked
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    gang = task("t1", nnodes=2, limit=LIMIT, waited=400)
    fresh = task("t2", waited=10, priority=fresh_priority)
    p = plan([node("w1", 4), node("w2", 0)], [gang, fresh], [r1],
             held_on={"r1--a01": {"w2": 4}}, reservations=8)
    assert started(p) == (["t2"] if starts else [])
    if not starts:
        assert reasons(p)["t2"].startswith("waiting behind t1: nodes 10.0.0.1 are reserved")


def test_a_running_attempt_without_a_limit_gives_no_time() -> None:
    p = plan([node("w1", 0)], [task("t1", waited=10)], [running("r1")],
             held_on={"r1--a01": {"w1": 4}}, reservations=8)
    assert p.estimates == {}
    assert "planned start" not in reasons(p)["t1"]


def test_past_the_guard_a_gang_without_a_known_time_holds_its_nodes() -> None:
    # nothing has a limit: the 2x4 gang that waited past the guard holds w1 (free) and the
    # draining w2, so the 1x4 behind it does not take w1
    p = plan([node("w1", 4), node("w2", 0)], [task("t1", nnodes=2, waited=400), task("t2")],
             [running("r1")], held_on={"r1--a01": {"w2": 4}}, reservations=8)
    assert started(p) == []
    assert reasons(p)["t2"].startswith("waiting behind t1")


@pytest.mark.parametrize(("gang_waited", "runs"), [
    (10.0, True),  # a young reservation: delayed, as the guard would (no gang kept yet)
    (400.0, False),  # past the guard: its nodes are kept from a task that may run for good
])
def test_a_task_without_a_limit_passes_only_reservations_not_past_the_guard(
        gang_waited: float, runs: bool) -> None:
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    gang = task("t1", nnodes=2, limit=LIMIT, waited=gang_waited)
    open_ended = task("t2")
    p = plan([node("w1", 4), node("w2", 0)], [gang, open_ended], [r1],
             held_on={"r1--a01": {"w2": 4}}, reservations=8)
    assert started(p) == (["t2"] if runs else [])
    if not runs:
        assert reasons(p)["t2"].startswith("waiting behind t1: nodes 10.0.0.1 are reserved")
    # a task with a limit past the gang's planned start waits either way
    long_ = task("t3", gpus=4, limit=LIMIT * 2)
    p = plan([node("w1", 4), node("w2", 0)], [gang, long_], [r1],
             held_on={"r1--a01": {"w2": 4}}, reservations=8)
    assert started(p) == []


def test_a_task_without_a_limit_starts_beside_the_nodes_kept_for_an_overdue_gang() -> None:
    # w1 and w2 each have 2 GPUs free; the overdue 1x4 gang is reserved on w1 (it drains
    # first); a 1x2 task without a limit fits both, w1 best: it takes w2 instead, as the
    # guard would admit it outside its kept nodes
    r1 = running("r1", started=NOW - 60, limit=LIMIT, gpus=2)
    r2 = running("r2", started=NOW - 60, limit=LIMIT * 2, gpus=2)
    held = {"r1--a01": {"w1": 2}, "r2--a01": {"w2": 2}}
    gang = task("t1", limit=LIMIT, waited=400)
    p = plan([node("w1", 2), node("w2", 2)], [gang, task("t2", gpus=2)], [r1, r2],
             held_on=held, reservations=8)
    assert started(p) == ["t2"]
    assert p.estimates["t1"].start == NOW - 60 + LIMIT + LIMIT_SLACK_S
    # with w2 full too, it waits behind the gang
    p = plan([node("w1", 2), node("w2", 0)], [gang, task("t2", gpus=2)], [r1, r2],
             held_on={"r1--a01": {"w1": 2}, "r2--a01": {"w2": 4}}, reservations=8)
    assert started(p) == []
    assert reasons(p)["t2"].startswith("waiting behind t1")


@pytest.mark.parametrize(("last_tick", "kept"), [(frozenset(), "w1"), (frozenset({"w3"}), "w3")])
def test_without_limits_the_plan_keeps_the_guards_nodes(last_tick: frozenset[str],
                                                        kept: str) -> None:
    # nothing has a limit: the oldest task past the guard has one node kept for it, the
    # one kept last tick first (as the guard), out of the pool, and a task without a
    # limit behind it starts on another node
    active = [running(f"r{i}", gpus=2) for i in (1, 2, 3)]
    held = {f"r{i}--a01": {f"w{i}": 2} for i in (1, 2, 3)}
    p = plan([node("w1", 2), node("w2", 2), node("w3", 2)],
             [task("t1", waited=400), task("t2", gpus=2)], active, held_on=held,
             reservation=last_tick, reservations=8)
    assert p.kept == frozenset({kept})
    assert started(p) == ["t2"] and p.estimates == {}
    assert reasons(p)["t1"].startswith("needs 1x4 GPUs")


@pytest.mark.parametrize("reservations", [8, 0])  # the plan decides as the guard
def test_without_limits_only_the_guards_holder_has_nodes_kept(reservations: int) -> None:
    # nothing has a limit: t1 (the longest past the guard) fits now and starts; t2, also
    # past the guard but younger, does not get nodes kept (the guard keeps for one gang,
    # the oldest), so t3 behind it takes the free node
    active = [running("r1", gpus=2), running("r2", gpus=4)]
    held = {"r1--a01": {"w1": 2}, "r2--a01": {"w2": 4}}
    p = plan([node("w1", 2), node("w2", 0), node("w3", 4)],
             [task("t1", waited=900), task("t2", nnodes=2, waited=400), task("t3", gpus=2)],
             active, held_on=held, reservations=reservations)
    assert started(p) == ["t1", "t3"] and p.kept == frozenset()


@pytest.mark.parametrize("reservations", [8, 0])
def test_a_higher_priority_task_may_use_the_nodes_kept_without_limits(reservations: int
                                                                      ) -> None:
    # as with the guard: the kept nodes bound a gang's wait against backfill of its own
    # priority or lower, never against the priority order
    p = plan([node("w1", 4), node("w2", 0)],
             [task("t1", nnodes=2, waited=400), task("t2", priority=5)], [running("r1")],
             held_on={"r1--a01": {"w2": 4}}, reservations=reservations)
    assert started(p) == ["t2"] and p.kept == frozenset({"w1", "w2"})


def test_the_overdue_gang_is_reserved_before_fair_share_reorders() -> None:
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    gang = task("t1", nnodes=2, user="carol", waited=400)
    small = task("t2", user="alice", limit=LIMIT * 3)
    p = plan([node("w1", 4), node("w2", 0)], [gang, small], [r1],
             held_on={"r1--a01": {"w2": 4}}, charges={"carol": 32.0, "alice": 0.0},
             reservations=8)
    assert started(p) == []  # alice's task would run past the gang's planned start
    assert "t1" in p.estimates


@pytest.mark.parametrize(("factor", "priority", "fair_share", "carol_weight", "deferred"), [
    (0.0, 0, True, 1.0, False),  # off: the gang past the guard is reserved, as ever
    (1.0, 0, True, 1.0, True),  # carol holds half of 8 GPUs, her part of two users: at the bar
    (1.5, 0, True, 1.0, False),  # under 1.5 times her part
    (1.0, 0, True, 2.0, False),  # of weight 2 her part is two thirds: under it
    (1.0, 10, True, 1.0, False),  # a priority above the default is reserved whatever she holds
    (1.0, 0, False, 1.0, False),  # fair share off: no shares to compare
])
def test_a_user_at_the_bar_of_their_share_gets_no_reservation(
        factor: float, priority: int, fair_share: bool, carol_weight: float,
        deferred: bool) -> None:
    # carol's r1 holds w2 until its limit; her 2x4 gang waited past the guard; alice's
    # task fits w1 now and would run past the gang's planned start
    r1 = running("r1", user="carol", started=NOW - 60, limit=LIMIT)
    gang = task("t1", nnodes=2, user="carol", waited=400, limit=LIMIT, priority=priority)
    small = task("t2", user="alice", limit=LIMIT * 3)
    p = plan([node("w1", 4), node("w2", 0)], [gang, small], [r1],
             held_on={"r1--a01": {"w2": 4}}, charges={"carol": 4.0},
             users=UserSettings(weights={"carol": carol_weight}), reservations=8,
             fair_share=fair_share, unreserved_above_share=factor)
    drained = NOW - 60 + held_for(LIMIT)
    assert "planned start by" in reasons(p)["t1"]  # reserved or not, it shows a start
    if deferred:  # alice's task takes w1; the gang's estimate comes after it
        assert started(p) == ["t2"]
        assert starts(p)["t1"] == NOW + held_for(LIMIT * 3)
        assert "t1" not in p.reserved
    else:
        assert started(p) == []
        assert starts(p)["t1"] == drained
        assert "t1" in p.reserved


def test_a_reservation_made_is_kept_when_its_user_goes_over_the_bar() -> None:
    # the gang was reserved last tick, under the bar; carol's r1 now puts her at it. Its
    # room has been draining: taken back, it would go to alice's task and drain again
    # once carol falls under the bar (on the trace bench's 2x8 cluster that cost 1.2
    # points of utilization)
    r1 = running("r1", user="carol", started=NOW - 60, limit=LIMIT)
    gang = task("t1", nnodes=2, user="carol", waited=400, limit=LIMIT)
    small = task("t2", user="alice", limit=LIMIT * 3)
    args = ([node("w1", 4), node("w2", 0)], [gang, small], [r1])
    kw: dict = dict(held_on={"r1--a01": {"w2": 4}}, charges={"carol": 4.0},
                    reservations=8, fair_share=True, unreserved_above_share=1.0)
    assert started(plan(*args, **kw)) == ["t2"]  # not reserved before: it is deferred
    p = plan(*args, reserved=frozenset({"t1"}), **kw)
    assert started(p) == []
    assert starts(p)["t1"] == NOW - 60 + held_for(LIMIT)
    assert "t1" in p.reserved


def test_without_a_limit_a_user_over_their_share_is_planned_as_the_guard_plans() -> None:
    # no time is known for the gang: the guard's nodes are kept for it, whatever carol holds
    cands = [task("t1", nnodes=2, user="carol", waited=400), task("t2", user="alice")]
    nodes = [node("w1", 4), node("w2", 0)]
    held, charges = {"r1--a01": {"w2": 4}}, {"carol": 4.0}
    r1 = running("r1", user="carol")
    before = plan(nodes, cands, [r1], held_on=held, charges=charges, reservations=8)
    after = plan(nodes, cands, [r1], held_on=held, charges=charges, reservations=8,
                 unreserved_above_share=1.0)
    assert (started(after), reasons(after), after.kept) == \
        (started(before), reasons(before), before.kept)
    assert after.kept == frozenset({"w1", "w2"})


def test_reservations_off_is_the_guard() -> None:
    p = plan([node("w1", 4)], [task("t1")], reservations=0)
    assert started(p) == ["t1"] and p.estimates == {}



def test_past_the_budget_tasks_get_an_estimate_that_protects_nothing() -> None:
    # w1 drains first (r1), w2 later (r2, 1 GPU free now); t1 (1x4) reserves w1. With one
    # reservation, t2 (1x4) only gets an estimate, so t3 (1x1, a long limit) starts now on
    # w2; with two, t2 reserves w2 when r2 ends and t3 waits (it would run into it).
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    r2 = running("r2", gpus=3, started=NOW - 60, limit=LIMIT * 1.5)
    tasks = [task("t1", limit=LIMIT), task("t2", limit=LIMIT), task("t3", gpus=1,
                                                                    limit=LIMIT * 3)]
    held = {"r1--a01": {"w1": 4}, "r2--a01": {"w2": 3}}
    drained = NOW - 60 + LIMIT + LIMIT_SLACK_S
    firm = plan([node("w1", 0), node("w2", 1)], tasks, [r1, r2], held_on=held,
                reservations=2)
    assert started(firm) == [] and firm.estimates["t2"].start == NOW - 60 + LIMIT * 1.5 + 30
    soft = plan([node("w1", 0), node("w2", 1)], tasks, [r1, r2], held_on=held,
                reservations=1)
    assert started(soft) == ["t3"]
    assert soft.estimates["t1"].start == drained
    assert soft.estimates["t2"].start == drained + LIMIT + LIMIT_SLACK_S  # after t1 (t3 on w2)
    assert reasons(soft)["t2"].endswith(f"; planned start by {iso(soft.estimates['t2'].start)} "
                                        "(from time limits)")


def test_soft_estimates_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.scheduling import estimates

    monkeypatch.setattr(estimates, "ESTIMATED", 2)
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    p = plan([node("w1", 0)], [task(f"t{i}", limit=LIMIT) for i in range(4)], [r1],
             held_on={"r1--a01": {"w1": 4}}, reservations=1)
    assert set(p.estimates) == {"t0", "t1"}
    assert "planned start" not in reasons(p)["t3"]


def test_the_guards_holder_is_not_looked_for_when_every_task_has_a_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # finding the holder sorts every task past the guard: with 10k runnable under limits
    # the plan's tick must not pay for it
    from service.scheduling.rules import Rules

    calls: list[int] = []
    holder = Rules.guard_holder
    monkeypatch.setattr(Rules, "guard_holder",
                        lambda self, *args: calls.append(1) or holder(self, *args))
    r1 = running("r1", limit=LIMIT)
    plan([node("w1", 0)], [task(f"t{i}", limit=LIMIT, waited=400) for i in range(1, 9)],
         [r1], held_on={"r1--a01": {"w1": 4}}, reservations=8)
    assert calls == []
    plan([node("w1", 0)], [task(f"t{i}", waited=400) for i in range(1, 9)], [running("r2")],
         held_on={"r2--a01": {"w1": 4}}, reservations=8)
    assert calls == [1]


def test_past_the_budget_estimates_follow_the_order_of_the_guard_not_fair_share() -> None:
    # carol's older tasks come after alice's in fair-share order, but by the time any of
    # them is reserved it has waited past the guard, where the plan reserves by age: the
    # soft estimates take the timeline in that order (t3 keeps the one firm reservation)
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    tasks = [task("t1", user="carol", waited=100, limit=LIMIT),
             task("t2", user="carol", waited=90, limit=LIMIT),
             task("t3", user="alice", waited=20, limit=LIMIT),
             task("t4", user="alice", waited=10, limit=LIMIT)]
    p = plan([node("w1", 0)], tasks, [r1], held_on={"r1--a01": {"w1": 4}},
             charges={"carol": 8.0, "alice": 0.0}, reservations=1)
    turn = LIMIT + LIMIT_SLACK_S
    drained = NOW - 60 + turn
    assert starts(p) == {"t3": drained, "t1": drained + turn, "t2": drained + 2 * turn,
                           "t4": drained + 3 * turn}


@pytest.mark.parametrize(("credit", "t1_waited", "gang_first"), [
    (300.0, 1000.0, True),  # 8 GPUs against 4: the gang counts 1,200 s older, first
    (0.0, 1000.0, False),  # by age alone
    (300.0, 4000.0, False),  # the credit is bounded: t1 waited 3,600 s longer than it
])
def test_past_the_guard_big_gangs_are_credited_for_their_size(
        credit: float, t1_waited: float, gang_first: bool) -> None:
    # w1 drains at e1, w2 at e2; t1 (1x4, a long limit) on w1 from e1 would hold it when
    # the gang t2 (2x4) could take both nodes at e2: whichever is reserved first has its
    # room, the other comes after it
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    r2 = running("r2", started=NOW - 60, limit=2 * LIMIT)
    t1 = task("t1", waited=t1_waited, limit=2 * LIMIT)
    t2 = task("t2", nnodes=2, waited=400, limit=LIMIT)
    p = plan([node("w1", 0), node("w2", 0)], [t1, t2], [r1, r2],
             held_on={"r1--a01": {"w1": 4}, "r2--a01": {"w2": 4}},
             reservations=8, gang_size_credit_s=credit)
    e1 = NOW - 60 + LIMIT + LIMIT_SLACK_S
    e2 = NOW - 60 + 2 * LIMIT + LIMIT_SLACK_S
    if gang_first:
        assert starts(p) == {"t2": e2, "t1": e2 + LIMIT + LIMIT_SLACK_S}
    else:
        assert starts(p) == {"t1": e1, "t2": e1 + 2 * LIMIT + LIMIT_SLACK_S}


def node8(name: str, free_gpus: float) -> NodeResources:
    """A worker of 8 GPUs (a small gang asks at most 4 of them) and enough CPUs."""
    return node(name, free_gpus, total_gpus=8.0, total_cpus=40.0)


@pytest.mark.parametrize(("after", "gpus", "t1_waited", "t1_priority", "t2_starts"), [
    (0.0, 4, 600.0, 0, False),  # every task reserved alike: t2 would delay t1's room
    (1800.0, 4, 600.0, 0, True),  # a small gang waiting under 30 min is not reserved
    (1800.0, 4, 2000.0, 0, False),  # past it, it is: its wait is bounded
    (1800.0, 8, 600.0, 0, False),  # a gang of more than half a node is reserved at once
    (1800.0, 4, 600.0, 10, False),  # so is a small gang of a priority above the default
])
def test_a_small_gang_is_reserved_only_once_it_has_waited(
        after: float, gpus: int, t1_waited: float, t1_priority: int, t2_starts: bool
) -> None:
    # w1 has 1 of 8 GPUs free; r1's 3 come back at e1, r2's 4 at e2; t1 waits for room;
    # t2 fits now, and its limit runs past both
    r1 = running("r1", gpus=3, started=NOW - 60, limit=LIMIT)
    r2 = running("r2", gpus=4, started=NOW - 60, limit=3 * LIMIT)
    t1 = task("t1", gpus=gpus, waited=t1_waited, priority=t1_priority, limit=LIMIT)
    t2 = task("t2", gpus=1, limit=4 * LIMIT)
    p = plan([node8("w1", 1)], [t1, t2], [r1, r2],
             held_on={"r1--a01": {"w1": 3}, "r2--a01": {"w1": 4}},
             reservations=8, reserve_small_after_s=after)
    e1 = NOW - 60 + LIMIT + LIMIT_SLACK_S
    e2 = NOW - 60 + 3 * LIMIT + LIMIT_SLACK_S
    assert "planned start by" in reasons(p)["t1"]  # reserved or not, it shows a start
    if t2_starts:
        assert started(p) == ["t2"]
        assert p.estimates["t1"].start == e2  # after t2: 3 GPUs free at e1, 7 at e2
    else:
        assert started(p) == []
        assert p.estimates["t1"].start == (e1 if gpus == 4 else e2)
        assert reasons(p)["t2"].startswith("waiting behind t1: nodes 10.0.0.1 are reserved")


def test_without_limits_the_small_gangs_setting_changes_nothing() -> None:
    # no time is known: tasks are planned as the guard plans them, whatever their size
    r1 = running("r1", gpus=6, started=NOW - 60)
    cands = [task("t1", waited=600), task("t2", gpus=2)]
    nodes = [node8("w1", 2), node8("w2", 1)]
    held = {"r1--a01": {"w1": 6}}
    before = plan(nodes, cands, [r1], held_on=held, reservations=8, reserve_small_after_s=0)
    after = plan(nodes, cands, [r1], held_on=held, reservations=8,
                 reserve_small_after_s=1800)
    assert (started(after), reasons(after), after.kept) == \
        (started(before), reasons(before), before.kept)


def test_soft_estimates_go_by_age_not_by_the_big_gangs_credit() -> None:
    # w1: r1's 5 GPUs come back at e1, r2's 3 later; two young small gangs wait, not
    # reserved yet: t2, the older, takes the room at e1 in the estimates though t1 asks
    # more GPUs (the credit orders reservations, not estimates: small tasks start around
    # the big gangs)
    r1 = running("r1", gpus=5, started=NOW - 60, limit=LIMIT)
    r2 = running("r2", gpus=3, started=NOW - 60, limit=3 * LIMIT)
    t1 = task("t1", gpus=4, waited=600, limit=LIMIT)
    t2 = task("t2", gpus=2, waited=1000, limit=LIMIT)
    p = plan([node8("w1", 0)], [t1, t2], [r1, r2],
             held_on={"r1--a01": {"w1": 5}, "r2--a01": {"w1": 3}}, reservations=8,
             reserve_small_after_s=1800, gang_size_credit_s=300)
    e1 = NOW - 60 + LIMIT + LIMIT_SLACK_S
    assert starts(p) == {"t2": e1, "t1": e1 + LIMIT + LIMIT_SLACK_S}
