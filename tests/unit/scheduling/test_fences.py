"""Which fences should exist (``service.scheduling.fences``), by table."""

from __future__ import annotations

import pytest

from service.cluster.boundary import FenceJob, NodeResources
from service.domain.states import RayStatus
from service.scheduling.fences import FencePlan, plan_fences

NODES = (NodeResources("id-a", "10.0.0.1", {}, name="a"),
         NodeResources("id-b", "10.0.0.2", {}, name="b"),
         NodeResources("id-c3f00000000000", "10.0.0.3", {}, name=""))  # no name: id prefix


def fence(sid: str, name: str, node_id: str) -> FenceJob:
    return FenceJob(sid, name, node_id, RayStatus.RUNNING)


@pytest.mark.parametrize(("out", "running", "last_start", "want"), [
    # nothing out, nothing running
    ((), (), {}, FencePlan()),
    # a node out gets one; a node Ray does not list gets none
    (("a", "gone"), (), {}, FencePlan(start=(("a", "id-a"),))),
    # a node without a name is out under its id prefix
    (("id-c3f000000",), (), {}, FencePlan(start=(("id-c3f000000", "id-c3f00000000000"),))),
    # the one it has is kept; a second is stopped (the first in id order is kept)
    (("a",), (fence("f2", "a", "id-a"), fence("f1", "a", "id-a")), {},
     FencePlan(stop=("f2",), keep=("f1",))),
    # resumed: stopped
    ((), (fence("f1", "b", "id-b"),), {}, FencePlan(stop=("f1",))),
    # the node came back under another id: the old one stopped, a new one started
    (("a",), (fence("f1", "a", "id-old"),), {},
     FencePlan(start=(("a", "id-a"),), stop=("f1",))),
    # ended soon after its last start: not again before 30 s ...
    (("a",), (), {("a", "id-a"): 990.0}, FencePlan()),
    # ... and again after
    (("a",), (), {("a", "id-a"): 970.0}, FencePlan(start=(("a", "id-a"),))),
    # the wait is per node id: the same name under a new id starts at once
    (("a",), (), {("a", "id-old"): 999.0}, FencePlan(start=(("a", "id-a"),))),
])
def test_plan_fences(out, running, last_start, want) -> None:
    assert plan_fences(out, NODES, running, last_start, 1000.0, 30.0) == want


def test_settling_names_the_nodes_a_new_fence_does_not_hold_yet() -> None:
    from service.scheduling.fences import settling

    nodes = (NodeResources("id-a", "", {"GPU": 4.0}, name="a"),
             NodeResources("id-b", "", {"memory": 9.0, "CPU": 0.001}, name="b"),
             NodeResources("id-c", "", {"worker_node": 1.0}, name="c"))
    started = {("a", "id-a"): 990.0, ("b", "id-b"): 990.0, ("c", "id-c"): 900.0,
               ("d", "id-d"): 999.0}  # c: too long ago; d: not alive
    assert settling(started, nodes, ("CPU", "GPU", "worker_node"), 1000.0) == ("a",)
    assert settling(started, nodes, ("CPU", "GPU", "worker_node"), 1050.0) == ()
    assert settling({}, nodes, ("GPU",), 1000.0) == ()
