"""The cordon on Ray's side (issue 55): the tick keeps a fence job on each node out of
admission, which holds the node's free resources (the fake cluster plays its driver), so
no driver or gang of a new attempt can be placed there; a resume stops it."""

from __future__ import annotations

import logging

import pytest
from scheduler_env import T0, Env, S, sid

from service.cluster.boundary import ClusterUnavailable
from service.cluster.fence import FENCE_PREFIX
from service.domain.nodes import NodeSource
from service.domain.states import RayStatus


@pytest.fixture
def env2(env: Env) -> Env:
    env.cluster.add_node("w2", gpus=4, cpus=16)
    return env


def _live_fences(env: Env) -> list[str]:
    return sorted(f.submission_id for f in env.cluster.fences())


def test_a_cordoned_node_is_fenced_and_new_attempts_land_elsewhere(env2: Env) -> None:
    env2.tick(T0)
    env2.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")
    env2.tick(T0 + 1)
    (fence,) = env2.cluster.fences()
    assert fence.submission_id.startswith(f"{FENCE_PREFIX}w1-")
    assert (fence.node_name, fence.node_id, fence.status) == ("w1", "w1", RayStatus.RUNNING)
    assert env2.cluster.fence_holds("w1") == {"GPU": 4.0, "CPU": 16.0, "worker_node": 100.0}
    assert env2.cluster.fence_holds("w2") == {}
    tasks = [env2.add(g=2) for _ in range(3)]
    env2.tick(T0 + 2)
    started = [t for t in tasks if env2.state(t) is S.SUBMITTED]
    assert started, "nothing started on w2"
    for t in started:  # the fake places a driver on the first node with room
        assert env2.cluster.jobs[sid(t)].driver_node == "w2"
    assert env2.cluster.fence_calls == [fence.submission_id]  # one fence, not one per tick


def test_a_resume_stops_the_fence_and_frees_the_node_in_the_same_tick(env: Env) -> None:
    env.tick(T0)
    env.store.nodes.drain("w1", "root", T0, "maintenance")
    env.tick(T0 + 1)
    (fence,) = _live_fences(env)
    t = env.add()
    assert env.tick(T0 + 2).submitted == 0
    env.store.nodes.resume("w1", None, "root", T0 + 2.5, "done")
    assert env.tick(T0 + 3).submitted == 1  # before the fence's period is over
    assert fence in env.cluster.stop_calls and _live_fences(env) == []
    assert env.state(t) is S.SUBMITTED


def test_a_drained_node_is_fenced_as_its_attempts_end(env: Env) -> None:
    t = env.add(g=2)
    env.tick(T0)
    sub = sid(t)
    env.cluster.start(sub, {"w1": 2})
    env.store.nodes.drain("w1", "root", T0, "maintenance")
    env.tick(T0 + 1)
    assert env.cluster.fence_holds("w1")["GPU"] == 2.0  # what was free
    env.cluster.finish(sub)
    env.tick(T0 + 2)
    assert env.cluster.fence_holds("w1")["GPU"] == 4.0  # and what the attempt gave back
    assert env.state(t) is S.SUCCEEDED


def test_a_new_service_keeps_the_fence_it_finds_and_stops_a_stale_one(env2: Env) -> None:
    env2.tick(T0)
    env2.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")
    env2.store.nodes.cordon("w2", NodeSource.OPERATOR, "root", T0, "bad fan")
    env2.tick(T0 + 1)
    f1, f2 = _live_fences(env2)
    env2.store.nodes.resume("w2", None, "root", T0 + 2, "fixed")  # while no service runs
    env2.reopen()
    env2.tick(T0 + 3)
    env2.tick(T0 + 4)
    assert _live_fences(env2) == [f1] and env2.cluster.stop_calls == [f2]
    assert len(env2.cluster.fence_calls) == 2  # nothing started anew


def test_a_head_restart_loses_the_fence_and_it_comes_back(env: Env) -> None:
    env.tick(T0)
    env.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")
    env.tick(T0 + 1)
    (old,) = _live_fences(env)
    env.cluster.forget_all_jobs()
    env.tick(T0 + 60)  # the fence is asked about, and is gone: it ran long, so at once
    (new,) = _live_fences(env)
    assert new != old and env.cluster.fence_holds("w1")["GPU"] == 4.0


def test_a_fence_that_keeps_ending_is_started_again_at_most_every_30s(env: Env) -> None:
    env.tick(T0)
    env.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")
    env.tick(T0 + 1)
    for now in (T0 + 3, T0 + 5, T0 + 20):
        for f in env.cluster.fences():
            env.cluster.finish(f.submission_id, RayStatus.FAILED, message="python3: not found")
        env.tick(now)
    assert len(env.cluster.fence_calls) == 1
    env.tick(T0 + 31)
    assert len(env.cluster.fence_calls) == 2 and len(_live_fences(env)) == 1


def test_a_node_back_under_a_new_ray_id_gets_a_new_fence(env: Env) -> None:
    env.tick(T0)
    env.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")
    env.tick(T0 + 1)
    (old,) = _live_fences(env)
    env.cluster.remove_node("w1")
    env.cluster.add_node("w1-new-id", gpus=4, cpus=16, name="w1")  # the raylet restarted
    env.tick(T0 + 3)
    env.tick(T0 + 5)
    (fence,) = env.cluster.fences()
    assert old in env.cluster.stop_calls and fence.node_id == "w1-new-id"
    assert env.cluster.fence_holds("w1-new-id")["GPU"] == 4.0


def test_ray_not_answering_the_fence_step_is_tried_again_next_tick(env: Env, caplog,
                                                                   monkeypatch) -> None:
    env.tick(T0)
    env.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")

    def down(*_args):
        raise ClusterUnavailable("job server down")

    monkeypatch.setattr(env.cluster, "submit", down)
    with caplog.at_level(logging.INFO, logger="service.engine.fences"):
        assert env.tick(T0 + 1) is not None  # nothing raised out of the tick
    assert "Ray did not answer (job server down)" in caplog.text
    assert env.cluster.fence_calls == []
    monkeypatch.undo()
    env.tick(T0 + 1.5)  # the next tick, not a period later
    assert len(_live_fences(env)) == 1


def test_a_submit_that_may_have_reached_ray_is_asked_about_not_doubled(env: Env,
                                                                        monkeypatch) -> None:
    env.tick(T0)
    env.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")
    real = env.cluster.submit

    def lost_answer(req):
        real(req)
        raise ClusterUnavailable("timed out")

    monkeypatch.setattr(env.cluster, "submit", lost_answer)
    env.tick(T0 + 1)
    monkeypatch.undo()
    env.tick(T0 + 3)
    assert len(env.cluster.fence_calls) == 1 and len(_live_fences(env)) == 1


def test_fences_off_start_nothing(tmp_path) -> None:
    e = Env(tmp_path, node_fence_every_s=0)
    try:
        e.tick(T0)
        e.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")
        e.tick(T0 + 1)
        assert e.cluster.fence_calls == []
    finally:
        e.store.close()


def test_admission_waits_until_a_new_fence_holds_its_node(env2: Env, monkeypatch) -> None:
    env2.tick(T0)
    env2.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")
    t = env2.add(g=2)
    slow = env2.cluster._grow_fences  # the fence's driver and actors take a while to start
    monkeypatch.setattr(env2.cluster, "_grow_fences", lambda: None)
    assert env2.tick(T0 + 1).submitted == 0  # the fence started; w1 still has room
    assert env2.tick(T0 + 2).submitted == 0
    task = env2.store.tasks.get_task(t)
    assert task.state is S.PENDING_RESOURCES
    assert task.pending_reason == ("waiting for Ray-side fence to hold node(s) w1 "
                                   "(just taken out of admission)")
    monkeypatch.setattr(env2.cluster, "_grow_fences", slow)
    assert env2.tick(T0 + 3).submitted == 1  # it holds w1: w2 takes the gang
    assert env2.cluster.jobs[sid(t)].driver_node == "w2"


def test_a_fence_that_never_holds_stops_admission_for_60s_at_most(env2: Env,
                                                                  monkeypatch) -> None:
    env2.tick(T0)
    env2.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad fan")
    env2.add(g=2)
    monkeypatch.setattr(env2.cluster, "_grow_fences", lambda: None)
    assert env2.tick(T0 + 1).submitted == 0
    assert env2.tick(T0 + 60.5).submitted == 0
    assert env2.tick(T0 + 61).submitted == 1
