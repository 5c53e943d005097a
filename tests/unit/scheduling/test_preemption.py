"""Choosing preemption victims (pure, by table): per-node arithmetic, lowest priority and
most recent first, the fewest needed, nobody when it cannot help."""

from __future__ import annotations

import pytest

from service.cluster.boundary import ClusterSnapshot, NodeResources
from service.domain.resources import Driver
from service.scheduling.admission import FreePool, Gang
from service.scheduling.preemption import Running, choose_victims, eligible

DRIVER = Driver({"worker_node": 1.0}, 1.0)


def _pool(**free_gpus: float) -> FreePool:
    nodes = tuple(NodeResources(n, f"10.0.0.{i}", {"GPU": g, "CPU": 3 * g + 4,
                                                   "worker_node": 100.0} if g else
                                {"CPU": 4.0, "worker_node": 100.0})
                  for i, (n, g) in enumerate(free_gpus.items(), start=1))
    return FreePool.from_snapshot(ClusterSnapshot(nodes=nodes))


def R(task_id: str, priority: int, started: float, **held: float) -> Running:
    return Running(task_id, 1, priority, started, held)


def _ids(victims):
    return None if victims is None else [v.task_id for v in victims]


@pytest.mark.parametrize(("free", "gang", "running", "expected"), [
    # one low task holds the node the gang needs
    ({"n1": 0}, Gang(1, 4), [R("a", 0, 10, n1=4)], ["a"]),
    # lowest priority first, whatever the start time
    ({"n1": 0, "n2": 0}, Gang(1, 4), [R("a", 1, 10, n1=4), R("b", 0, 20, n2=4)], ["b"]),
    # equal priorities: the most recently started (least work lost)
    ({"n1": 0, "n2": 0}, Gang(1, 4), [R("a", 0, 10, n1=4), R("b", 0, 20, n2=4)], ["b"]),
    # ... counted in GPU-time: a young 2-node gang has more at stake than an older 1x4
    ({"n1": 0, "n2": 0, "n3": 0}, Gang(1, 4),
     [R("old", 0, 40, n1=4), R("big", 0, 60, n2=8, n3=8)], ["old"]),
    # per node: two 2-GPU tasks on one node, not one on each of two nodes
    ({"n1": 0, "n2": 0}, Gang(1, 4),
     [R("a", 0, 30, n1=2), R("b", 0, 20, n2=2), R("c", 0, 10, n1=2), R("d", 1, 5, n2=2)],
     ["a", "c"]),
    # a free node plus one victim for a 2-node gang
    ({"n1": 4, "n2": 0}, Gang(2, 4), [R("a", 0, 10, n2=4)], ["a"]),
    # greedy picks the low small task first; it turns out unneeded and is given back
    ({"n1": 2, "n2": 0}, Gang(1, 4), [R("small", 0, 50, n1=2), R("big", 1, 10, n2=4)],
     ["small"]),
    ({"n1": 0, "n2": 0}, Gang(1, 4), [R("small", 0, 50, n1=2), R("big", 1, 10, n2=4)],
     ["big"]),
    # nothing helps: too few GPUs even with every victim stopped
    ({"n1": 0}, Gang(1, 8), [R("a", 0, 10, n1=4)], None),
    ({"n1": 0}, Gang(1, 4), [], None),
])
def test_choose_victims(free, gang, running, expected) -> None:
    assert _ids(choose_victims(_pool(**free), gang, DRIVER, running, 100.0)) == expected


def test_the_pool_itself_is_not_changed() -> None:
    pool = _pool(n1=0)
    choose_victims(pool, Gang(1, 4), DRIVER, [R("a", 0, 10, n1=4)], 100.0)
    assert not pool.decide(Gang(1, 4), DRIVER).fits


@pytest.mark.parametrize(("task", "without_checkpoint", "ok"), [
    (Running("a", 1, 0, 1.0, {"n1": 4}), False, True),
    (Running("a", 1, 5, 1.0, {"n1": 4}), False, False),  # equal priority
    (Running("a", 1, 7, 1.0, {"n1": 4}), False, False),  # higher
    (Running("a", 1, 0, 1.0, {}), False, False),  # holds nothing yet
    (Running("a", 1, 0, 1.0, {"n1": 4}, checkpointing=False), False, False),
    (Running("a", 1, 0, 1.0, {"n1": 4}, checkpointing=False), True, True),
])
def test_eligible(task, without_checkpoint, ok) -> None:
    assert (eligible([task], 5, without_checkpoint=without_checkpoint) == [task]) is ok
