"""Expected starts: run times learned from history (service.scheduling.runtimes) and the reservation
plan replayed with them (service.scheduling.forecast), by table."""

from __future__ import annotations

import math

import pytest
from planner_cases import DRIVER, NOW, node, running, task

from service.cluster.boundary import ClusterSnapshot
from service.config import SchedulerSettings, UserSettings
from service.domain.reasons import RUN_HISTORY, TIME_LIMITS, Planned
from service.scheduling.forecast import Placed, Releasing, expected_starts
from service.scheduling.plan import PlanInput, Wait
from service.scheduling.planner import Planner
from service.scheduling.runtimes import (
    LIMIT_SLACK_S,
    MIN_SHARE,
    EndedRun,
    RuntimeModel,
    held_for,
)

ALICE_1x4 = [EndedRun("alice", (1, 4), r, 1000.0) for r in (200.0, 300.0, 400.0)]
BOB_ANY = [EndedRun("bob", (2, 8), r, 1000.0) for r in (800.0, 900.0, 1000.0)]


@pytest.mark.parametrize(("runs", "user", "shape", "want"), [
    (ALICE_1x4, "alice", (1, 4), 0.3),  # the same user and shape
    (ALICE_1x4, "alice", (2, 8), 0.3),  # another shape: the user's own runs
    (ALICE_1x4 + BOB_ANY, "carol", (1, 4), 0.6),  # a stranger: everyone's runs
    (ALICE_1x4[:2], "alice", (1, 4), None),  # two runs are no basis
    ([EndedRun("a", (1, 1), 0.0, 100.0)] * 3, "a", (1, 1), MIN_SHARE),  # not believed
    ([EndedRun("a", (1, 1), 500.0, 100.0)] * 3, "a", (1, 1), 1.0),  # overran: the limit
    ([EndedRun("a", (1, 1), 5.0, 0.0)] * 3, "a", (1, 1), None),  # no limit: ignored
])
def test_share_of_the_limit(runs, user, shape, want) -> None:
    got = RuntimeModel(runs).share(user, shape)
    assert got is None if want is None else got == pytest.approx(want)


def test_duration_and_end() -> None:
    model = RuntimeModel(ALICE_1x4)
    assert model.duration("alice", (1, 4), 2000.0) == pytest.approx(600.0)
    assert RuntimeModel([]).duration("alice", (1, 4), 2000.0) is None  # no basis
    assert RuntimeModel([]).end("alice", (1, 4), 2000.0, start=0.0, now=10.0) is None
    # started 100 s ago, expected 600 s: ends at start + 600
    assert model.end("alice", (1, 4), 2000.0, start=0.0, now=100.0) == pytest.approx(600.0)
    # longer than any run so far: halfway from where it is to its limit
    assert model.end("alice", (1, 4), 2000.0, start=0.0, now=1000.0) == pytest.approx(1500.0)
    # past some runs' length: the mean of the runs that were longer
    assert model.end("alice", (1, 4), 1000.0, start=0.0, now=250.0) == pytest.approx(350.0)
    assert model.share("alice", (1, 4), elapsed=0.25) == pytest.approx(0.35)


def test_length_a_new_run_holds_its_gang() -> None:
    model = RuntimeModel(ALICE_1x4)
    assert model.length("alice", (1, 4), 2000.0) == pytest.approx(600.0)  # 30% of it
    # no basis: the limit and the stop's slack, as the plan counts it; no limit: for good
    assert RuntimeModel([]).length("alice", (1, 4), 2000.0) == 2000.0 + LIMIT_SLACK_S
    assert model.length("alice", (1, 4), None) == math.inf
    assert held_for(2000.0) == 2000.0 + LIMIT_SLACK_S and held_for(None) == math.inf


def test_replay_with_expected_lengths() -> None:
    # w1 is taken by an attempt expected to end at 600 (its limit: 2000); t1 (1x4, limit
    # 1000, alice's runs take 30%) is reserved there, t2 after it
    model = RuntimeModel(ALICE_1x4)
    running_ = [Releasing({"w1": (4.0, 12.0)}, 600.0)]
    placed = [Placed("t1", "alice", (1, 4), 12.0, 1000.0),
              Placed("t2", "alice", (1, 4), 12.0, 1000.0)]
    got = expected_starts(0.0, {"w1": (0.0, 4.0)}, running_, placed, model).starts
    assert got == {"t1": pytest.approx(600.0), "t2": pytest.approx(600.0 + 300.0)}


def test_replay_started_now_holds_and_replacement() -> None:
    model = RuntimeModel(ALICE_1x4)
    placed = [Placed("s", "alice", (1, 4), 12.0, 1000.0, nodes=("w1",)),  # started now
              Placed("t1", "alice", (1, 4), 12.0, 1000.0),
              Placed("t1", "alice", (1, 4), 12.0, 1000.0, nodes=()),  # its turn: placed anew
              Placed("t2", "alice", (1, 4), 12.0, None),  # no limit: runs for good
              Placed("t3", "bob", (1, 4), 12.0, 600.0)]  # after it: never
    got = expected_starts(0.0, {"w1": (4.0, 12.0)}, [], placed, model).starts
    assert got == {"t2": pytest.approx(300.0)}
    # no basis for bob: his task holds its limit and the stop's slack, as planned
    placed = [Placed("b", "bob", (1, 4), 12.0, 600.0, nodes=("w1",)),
              Placed("t1", "alice", (1, 4), 12.0, 1000.0)]
    got = expected_starts(0.0, {"w1": (4.0, 12.0)}, [], placed,
                          RuntimeModel(ALICE_1x4[:2])).starts
    assert got == {"t1": pytest.approx(600.0 + LIMIT_SLACK_S)}


def test_the_plan_shows_the_expected_start_beside_the_limits_bound() -> None:
    # bob's attempt on the only node has a 2 h limit; bob's runs take about half of theirs
    history = [EndedRun("bob", (1, 4), r, 7200.0) for r in (3000.0, 3600.0, 4200.0)]
    r1 = running("r1", started=NOW - 600, limit=7200.0)
    cand = task("t1", limit=3600.0)
    snapshot = ClusterSnapshot((node("w1", 0),), {"r1--a01": 4}, {}, {"r1--a01": {"w1": 4}})
    planner = Planner(SchedulerSettings(reservations=8), UserSettings(), DRIVER)
    plain = planner.plan(PlanInput(NOW, [cand], [r1], snapshot, {}))
    with_history = planner.plan(PlanInput(NOW, [cand], [r1], snapshot, {},
                                          runtimes=RuntimeModel(history)))
    bound = NOW - 600 + 7200 + LIMIT_SLACK_S
    assert plain.estimates == {"t1": Planned(bound)}
    assert plain.estimates["t1"].basis == TIME_LIMITS
    assert with_history.estimates["t1"].start == pytest.approx(NOW - 600 + 3600)
    assert with_history.estimates["t1"].bound == bound
    assert with_history.estimates["t1"].basis == RUN_HISTORY
    [step] = with_history.steps
    assert isinstance(step, Wait)
    assert "expected start about" in step.reason and "(from run history)" in step.reason
    assert "at the latest (from time limits)" in step.reason
    [plain_step] = plain.steps
    assert "planned start by" in plain_step.reason and "expected" not in plain_step.reason


def test_a_task_past_the_reservations_shows_its_expected_start_too() -> None:
    # one reservation: t1 gets it, t2 only a start estimate after it; both show the
    # expected start beside the bound (the plan rewrites just the steps it estimated)
    history = [EndedRun("bob", (1, 4), r, 7200.0) for r in (3000.0, 3600.0, 4200.0)]
    r1 = running("r1", started=NOW - 600, limit=7200.0)
    first, second = task("t1", limit=3600.0), task("t2", limit=3600.0)
    snapshot = ClusterSnapshot((node("w1", 0),), {"r1--a01": 4}, {}, {"r1--a01": {"w1": 4}})
    planner = Planner(SchedulerSettings(reservations=1), UserSettings(), DRIVER)
    plan = planner.plan(PlanInput(NOW, [first, second], [r1], snapshot, {},
                                  runtimes=RuntimeModel(history)))
    assert set(plan.estimates) == {"t1", "t2"}
    assert plan.estimates["t2"].start > plan.estimates["t1"].start
    for step in plan.steps:
        assert isinstance(step, Wait)
        assert "expected start about" in step.reason, step.reason
        assert "at the latest (from time limits)" in step.reason, step.reason
