"""The fence job's request (``service.cluster.fence``) and its driver script, which runs
here against a stand-in of the few Ray calls it makes."""

from __future__ import annotations

import shlex
import sys
import types

import pytest

from service.cluster.fence import (
    FENCE_PREFIX,
    FENCE_SCRIPT,
    fence_holds,
    fence_of,
    fence_request,
    safe_name,
)
from service.domain.states import RayStatus


def test_the_request_asks_for_nothing_and_says_what_it_is() -> None:
    req = fence_request("gpu-07", "ab" * 28, ("worker_node", "GPU", "CPU", "GPU"), "1a2b")
    assert req.submission_id == f"{FENCE_PREFIX}gpu-07-1a2b"
    assert (req.entrypoint_num_cpus, dict(req.entrypoint_resources)) == (0.0, {})
    assert dict(req.metadata) == {"argus_fence": "gpu-07", "argus_fence_node_id": "ab" * 28,
                                  "argus_fence_holds": "CPU,GPU,worker_node"}
    argv = shlex.split(req.entrypoint)
    assert argv[:2] == ["python3", "-c"] and argv[2] == FENCE_SCRIPT
    assert argv[3:] == ["ab" * 28, "CPU,GPU,worker_node"]
    compile(argv[2], "<fence>", "exec")  # the script is valid Python as the shell hands it


def test_names_become_safe_ids_and_listed_jobs_are_told_apart() -> None:
    assert safe_name("127.0.0.1") == "127.0.0.1" and safe_name("a b/c") == "a_b_c"
    assert fence_holds({"worker_node": 1}) == ("CPU", "GPU", "worker_node")
    meta = {"argus_fence": "w1", "argus_fence_node_id": "ff"}
    assert fence_of("argus-fence-w1-00", meta, RayStatus.RUNNING).node_id == "ff"
    assert fence_of("t-alice-ppo-20251223-143201-0001--a01", meta, RayStatus.RUNNING) is None
    assert fence_of("argus-fence-w1-00", {"argus_task_id": "x"}, RayStatus.RUNNING) is None
    assert fence_of("argus-fence-w1-00", None, RayStatus.RUNNING) is None


class _StandInRay:
    """What the script calls of Ray: one node whose free GPUs come back over time."""

    def __init__(self, node: str, frees: list[dict[str, float]]) -> None:
        self.node, self.frees, self.rounds = node, frees, 0
        self.asked: list[dict] = []  # the options of every holder
        self.killed = 0

    def module(self) -> types.ModuleType:
        ray = types.ModuleType("ray")
        stand_in = self

        class Actor:
            def __init__(self, opts: dict) -> None:
                self.opts = opts
                self.ready = types.SimpleNamespace(remote=lambda: ("ref", opts))

        class Cls:
            def options(self, **opts):
                stand_in.asked.append(opts)
                return types.SimpleNamespace(remote=lambda: Actor(opts))

        def nodes():
            stand_in.rounds += 1
            alive = stand_in.rounds <= len(stand_in.frees)
            return [{"NodeID": stand_in.node, "Alive": alive}]

        def per_node():
            return {stand_in.node: stand_in.frees[stand_in.rounds - 1]}

        ray.init = lambda **_kw: None
        ray.remote = lambda **_kw: (lambda _cls: Cls())
        ray.nodes = nodes
        ray.wait = lambda refs, timeout: (refs, [])  # every grab is placed at once
        ray.kill = lambda _a: None
        ray._private = types.SimpleNamespace(
            state=types.SimpleNamespace(available_resources_per_node=per_node))
        util = types.ModuleType("ray.util")
        strategies = types.ModuleType("ray.util.scheduling_strategies")
        strategies.NodeAffinitySchedulingStrategy = lambda node_id, soft: (node_id, soft)
        return ray, util, strategies


def test_the_script_grabs_what_is_free_pinned_and_ends_with_its_node(monkeypatch,
                                                                      capsys) -> None:
    ray = _StandInRay("n1", [{"GPU": 2.0, "CPU": 4.5, "worker_node": 100.0, "memory": 9.0},
                             {}, {"GPU": 2.0, "CPU": 0.5}, {}])
    mod, util, strategies = ray.module()
    monkeypatch.setitem(sys.modules, "ray", mod)
    monkeypatch.setitem(sys.modules, "ray.util", util)
    monkeypatch.setitem(sys.modules, "ray.util.scheduling_strategies", strategies)
    monkeypatch.setattr(sys, "argv", ["-c", "n1", "CPU,GPU,worker_node"])
    monkeypatch.setattr("time.sleep", lambda _s: None)
    exec(compile(FENCE_SCRIPT, "<fence>", "exec"), {"__name__": "__main__"})
    pin = ("n1", False)
    # round 1: what was free (a quantity above 1 whole); 2: placed; 3: what freed since
    assert ray.asked == [
        {"num_cpus": 4.0, "scheduling_strategy": pin},
        {"num_gpus": 2.0, "scheduling_strategy": pin},
        {"resources": {"worker_node": 100.0}, "scheduling_strategy": pin},
        {"num_cpus": 0.5, "scheduling_strategy": pin},
        {"num_gpus": 2.0, "scheduling_strategy": pin},
    ]
    out = capsys.readouterr().out
    assert "argus fence holds CPU=4.5, GPU=4, worker_node=100" in out
    assert "node n1 left the cluster; the fence ends" in out


def test_the_script_is_self_contained() -> None:
    """It runs with ``python3 -c`` on the head: nothing of Argus may be imported."""
    imports = [line for line in FENCE_SCRIPT.splitlines()
               if line.startswith(("import ", "from "))]
    assert imports and all(" service" not in line and "raypool" not in line
                           for line in imports)
    with pytest.raises(SyntaxError):
        compile(FENCE_SCRIPT + "\n)", "<fence>", "exec")  # the compile check can fail


def test_the_fake_cluster_plays_a_fence() -> None:
    from service.cluster.fake import FakeCluster

    fake = FakeCluster()
    fake.add_node("a", gpus=4, cpus=16)
    fake.add_node("b", gpus=4, cpus=16)
    fake.occupy("a", GPU=1)
    fake.submit(fence_request("a", "a", ("CPU", "GPU", "worker_node"), "00"))
    (fence,) = fake.fences()
    assert fence.status is RayStatus.RUNNING and fake.submit_calls == []
    assert fake.fence_holds("a") == {"CPU": 16.0, "GPU": 3.0, "worker_node": 100.0}
    fake.release("a", GPU=1)
    snap = fake.snapshot([])  # the fence grows before the snapshot is read
    assert {n.node_id: n.free for n in snap.nodes}["a"] == {}
    assert fake.snapshot([]).held_gpus == {}  # a fence is no attempt's gang
    fake.stop(fence.submission_id)
    assert fake.fences() == [] and fake.fence_holds("a") == {}
    assert fake.snapshot([]).nodes[0].free["GPU"] == 4.0
