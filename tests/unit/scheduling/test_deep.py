"""Start estimates past a tick's own (service.scheduling.deep): the plan hands over the
tasks it did not estimate with its timeline, and a few a tick are placed on it."""

from __future__ import annotations

import pytest
from planner_cases import DRIVER, NOW, node, plan, running, task

from service.cluster.boundary import ClusterSnapshot
from service.config import SchedulerSettings, UserSettings
from service.domain.reasons import RUN_HISTORY, TIME_LIMITS, Planned
from service.scheduling import estimates
from service.scheduling.deep import DeepEstimates, DeepQueue, DeepTask
from service.scheduling.plan import PlanInput
from service.scheduling.planner import Planner
from service.scheduling.runtimes import LIMIT_SLACK_S, EndedRun, RuntimeModel
from service.scheduling.timeline import Timeline

LIMIT = 3600.0
TURN = LIMIT + LIMIT_SLACK_S  # one task's run on w1, its stop's slack included
DRAINED = NOW - 60 + TURN  # r1 (started a minute ago) ends at its limit


@pytest.fixture
def two_a_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimates, "ESTIMATED", 2)


def one_node_queue(n: int):
    """A plan of ``n`` tasks of 4 GPUs waiting for the one node a run holds for an hour."""
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    return plan([node("w1", 0)], [task(f"t{i}", limit=LIMIT) for i in range(n)], [r1],
                held_on={"r1--a01": {"w1": 4}}, reservations=1)


def test_the_plan_hands_over_what_it_did_not_estimate_in_the_order_of_its_own(
        two_a_tick: None) -> None:
    p = one_node_queue(5)
    assert set(p.estimates) == {"t0", "t1"}
    assert p.deep is not None
    assert [t.task_id for t in p.deep.tasks] == ["t2", "t3", "t4"]
    assert p.deep.tasks[0] == DeepTask("t2", 1, 4.0, 12.0, TURN, None, "alice", LIMIT)
    assert p.deep.expected is None  # no run history: the limits' timeline alone


def test_nothing_is_handed_over_when_the_tick_estimated_every_task(two_a_tick: None) -> None:
    assert one_node_queue(2).deep is None


def test_deep_estimates_go_on_where_the_tick_stopped_a_few_a_tick(two_a_tick: None) -> None:
    p = one_node_queue(5)
    deep = DeepEstimates(per_tick=2)
    deep.advance(p.deep, NOW)
    assert deep.estimates == {"t2": Planned(DRAINED + 2 * TURN),
                              "t3": Planned(DRAINED + 3 * TURN)}
    deep.advance(one_node_queue(5).deep, NOW)  # the next tick: the sweep goes on
    assert deep.estimates["t4"] == Planned(DRAINED + 4 * TURN)
    shown = deep.merged(p.estimates)
    assert [shown[f"t{i}"].start for i in range(5)] == [DRAINED + i * TURN for i in range(5)]
    assert {e.basis for e in shown.values()} == {TIME_LIMITS}
    assert shown["t0"] is p.estimates["t0"]  # the tick's own are shown as they are


def test_with_run_history_deep_estimates_show_the_expected_start_beside_the_bound(
        two_a_tick: None) -> None:
    # the runs of alice's and bob's 1x4 gangs take a quarter of their limit: r1 (bob's,
    # started a minute ago) is expected to end at NOW - 60 + LIMIT / 4, each of alice's
    # tasks after it a quarter of LIMIT; the deep ones (t2.. past the tick's two) too
    history = [EndedRun(u, (1, 4), LIMIT / 4, LIMIT) for u in ("alice", "bob")
               for _ in range(3)]
    r1 = running("r1", started=NOW - 60, limit=LIMIT)
    snapshot = ClusterSnapshot((node("w1", 0),), {"r1--a01": 4}, {}, {"r1--a01": {"w1": 4}})
    planner = Planner(SchedulerSettings(reservations=1), UserSettings(), DRIVER)
    p = planner.plan(PlanInput(NOW, [task(f"t{i}", limit=LIMIT) for i in range(5)], [r1],
                               snapshot, {}, runtimes=RuntimeModel(history)))
    assert p.deep is not None and p.deep.expected is not None
    deep = DeepEstimates(per_tick=3)
    deep.advance(p.deep, NOW)
    shown = deep.merged(p.estimates)
    quarter = LIMIT / 4
    for i in range(5):
        assert shown[f"t{i}"].bound == DRAINED + i * TURN  # the limits' bound, as before
        assert shown[f"t{i}"].start == pytest.approx(NOW - 60 + quarter + i * quarter)
        assert shown[f"t{i}"].basis == RUN_HISTORY
    assert shown["t0"] is p.estimates["t0"]


def queue(*ids: str, start_free: float = NOW) -> DeepQueue:
    """One node, free from ``start_free`` on; one-hour tasks of its 4 GPUs."""
    line = Timeline(NOW, {"w1": (0.0, 12.0)})
    line.release("w1", start_free, 4.0, 12.0)
    return DeepQueue(line, [DeepTask(tid, 1, 4.0, 12.0, LIMIT, None) for tid in ids])


def test_a_newer_queue_is_taken_once_the_one_at_hand_is_placed() -> None:
    deep = DeepEstimates(per_tick=1)
    deep.advance(queue("a", "b"), NOW)
    assert deep.estimates == {"a": Planned(NOW)}
    deep.advance(queue("b", "c", start_free=NOW + 100), NOW)  # not yet: b is still to place
    assert deep.estimates == {"a": Planned(NOW), "b": Planned(NOW + LIMIT)}
    assert set(deep.merged({})) == {"b"}  # a is no longer left unestimated: not shown
    deep.advance(queue("c", start_free=NOW + 100), NOW)  # the sweep ended: this one is taken
    assert deep.estimates == {"c": Planned(NOW + 100)}  # a and b are gone from the queue


def test_an_estimate_kept_until_its_turn_comes_again() -> None:
    deep = DeepEstimates(per_tick=1)
    deep.advance(queue("a"), NOW)
    deep.advance(queue("b", "a", start_free=NOW + 50), NOW)  # a new sweep: b first
    assert deep.merged({}) == {"a": Planned(NOW), "b": Planned(NOW + 50)}
    deep.advance(queue("b", "a", start_free=NOW + 50), NOW)
    assert deep.merged({})["a"] == Planned(NOW + 50 + LIMIT)


def test_a_task_with_no_start_on_the_timeline_has_none_and_none_left_means_reset() -> None:
    line = Timeline(NOW, {"w1": (0.0, 12.0)})  # never freed: no time limit ends its run
    deep = DeepEstimates(per_tick=4)
    deep.advance(DeepQueue(line, [DeepTask("a", 1, 4.0, 12.0, LIMIT, None)]), NOW)
    assert deep.estimates == {}
    deep.advance(queue("b"), NOW)
    deep.advance(queue("b"), NOW)
    assert deep.merged({}) == {"b": Planned(NOW)}
    deep.advance(None, NOW)  # the plan left nothing unestimated (or made no plan)
    assert deep.estimates == {} and deep.merged({}) == {}


def test_a_start_an_older_plan_put_in_the_past_is_now() -> None:
    deep = DeepEstimates(per_tick=1)
    deep.advance(queue("a", "b"), NOW)
    deep.advance(queue("a", "b"), NOW + 2 * LIMIT)  # b's turn, on the plan of NOW
    assert deep.estimates["b"] == Planned(NOW + 2 * LIMIT)
