"""``drain --requeue``'s selection by table: which attempts a drained node's requeue stops
(values in, picks out), and what a drain's mark in ``preempted_for`` means."""

from __future__ import annotations

from dataclasses import replace

import pytest
from planner_cases import node, plan, running, task

from service.cluster.boundary import ClusterSnapshot
from service.domain.nodes import (
    NodeSource,
    NodeStateKind,
    NodeStateRow,
    drain_mark,
    drained_node,
    preemptor_task,
    stopped_for,
)
from service.scheduling.drain import requeuing, to_requeue


def _state(name: str, kind: NodeStateKind = NodeStateKind.DRAINED,
           requeue: bool = True) -> NodeStateRow:
    return NodeStateRow(name, kind, NodeSource.OPERATOR, "root", 0.0, f"why {name}", requeue)


def test_only_drains_with_requeue_requeue() -> None:
    states = [_state("w1"), _state("w2", requeue=False),
              _state("w3", NodeStateKind.CORDONED, requeue=False)]
    assert list(requeuing(states)) == ["w1"]


SNAP = ClusterSnapshot(
    (node("id1", 0), node("id2", 0), node("id3", 4)),
    held_on={"g1--a01": {"id1": 4}, "g2--a01": {"id2": 2, "id1": 2}, "d1--a01": {"id2": 4}})


@pytest.mark.parametrize(("drained", "drivers", "want"), [
    ({"id1"}, {}, [("g1", "id1"), ("g2", "id1")]),  # a gang, and one part of a gang
    ({"id2"}, {}, [("g2", "id2"), ("d1", "id2")]),
    ({"id3"}, {"d1--a01": "id3"}, [("d1", "id3")]),  # its driver is there, its gang not
    ({"id3"}, {}, []),  # nothing there
    ({"id2", "id3"}, {"d1--a01": "id3"}, [("g2", "id2"), ("d1", "id3")]),  # driver first
    (set(), {"d1--a01": "id3"}, []),
    ({"gone"}, {"g1--a01": "gone"}, []),  # a node Ray no longer lists: not ours to stop
], ids=["gangs", "gang parts", "driver", "empty node", "driver's node first", "no drain",
        "node gone"])
def test_the_attempts_on_a_drained_node(drained, drivers, want) -> None:
    active = [running("g1"), running("g2"), running("d1"), running("x1")]
    picks = to_requeue(active, SNAP, {n: _state(n) for n in drained}, drivers)
    assert [(p.row.task_id, p.node) for p in picks] == want
    assert all(p.state.name == p.node for p in picks)


def test_attempts_being_stopped_already_are_not_asked_again() -> None:
    active = [replace(running("g1"), cancel_requested=True),
              replace(running("g2"), preempted_for="t9"),
              replace(running("d1"), preempted_for=drain_mark("id2"))]
    assert to_requeue(active, SNAP, {"id1": _state("id1"), "id2": _state("id2")}, {}) == []


@pytest.mark.parametrize(("value", "node", "task", "words"), [
    ("t-1", None, "t-1", "preempted for t-1"),
    ("alice-ppo-20251223-143201-00a1", None, "alice-ppo-20251223-143201-00a1",
     "preempted for alice-ppo-20251223-143201-00a1"),
    ("node:gpu-07", "gpu-07", None, "node gpu-07 drained"),
])
def test_the_mark_in_preempted_for(value, node, task, words) -> None:
    assert (drained_node(value), preemptor_task(value), stopped_for(value)) == (
        node, task, words)
    assert drained_node(None) is None and preemptor_task(None) is None


def test_an_attempt_stopped_for_a_drain_does_not_hold_off_a_preemption() -> None:
    # w2 is drained: out of the planner's snapshot (service.scheduling.cordon)
    draining = replace(running("r2", priority=0), preempted_for=drain_mark("w2"))
    p = plan([node("w1", 0)], [task("t1", priority=5, waited=700)],
             [running("r1", priority=0), draining],
             held_on={"r1--a01": {"w1": 4}, "r2--a01": {"w2": 4}}, preemption=True,
             preemption_grace_s=600, starvation_guard_s=10_000)
    assert p.preemption is not None
    assert [v.task_id for v in p.preemption.victims] == ["r1"]
