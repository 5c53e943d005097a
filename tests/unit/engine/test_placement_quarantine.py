"""Where attempts ran (recorded once per node and role) and the quarantine on evidence
(issue 55): the scheduler's tick on the fake cluster, with the injected clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from scheduler_env import T0, Env, S, sid

from service.domain.nodes import NodeEventKind, NodeSource
from service.domain.rows import AttemptNode
from service.domain.states import RayStatus
from service.store.nodes import NodeStateConflict
from service.store.placement import PLACED

CUDA_LOG = ("step:3 - train/loss:1.2\nTraceback (most recent call last):\n"
            "  File \"trainer.py\", line 9, in step\n"
            "RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
FAILED_MSG = "Job entrypoint command failed with exit code 1"


def _two_nodes(root: Path, **sched: object) -> Env:
    env = Env(root, **sched)
    env.cluster.nodes["w1"].name = "gpu-bad"
    env.cluster.add_node("w2", gpus=4, cpus=16, name="gpu-good")
    return env


def _placed_events(env: Env, task_id: str) -> list[dict]:
    return [e.payload for e in env.store.tasks.events(task_id) if e.event_type == PLACED]


def _run_on(env: Env, task_id: str, node: str, now: float, n: int = 1) -> None:
    """The attempt ``n`` of ``task_id`` (submitted) starts with its gang on ``node``; the
    tick sees it."""
    env.cluster.start(sid(task_id, n), {node: 4})
    env.tick(now)


def _fail(env: Env, task_id: str, now: float, n: int = 1, log: str = CUDA_LOG) -> None:
    env.cluster.finish(sid(task_id, n), RayStatus.FAILED, message=FAILED_MSG, log=log)
    env.tick(now)


def test_an_attempts_driver_and_gang_nodes_are_recorded_once_by_name(tmp_path: Path) -> None:
    env = _two_nodes(tmp_path)
    t = env.add()
    assert env.tick(T0).submitted == 1
    _run_on(env, t, "w2", T0 + 1)
    for i in range(2, 6):  # later ticks see the same: nothing more is written
        env.tick(T0 + i)
    nodes = env.store.attempts.list_attempts(t)[0].nodes
    assert nodes is not None
    assert sorted(nodes, key=lambda n: n.role) == [
        AttemptNode("gpu-bad", "driver", 0.0, T0 + 1),  # the fake's driver slot: first node
        AttemptNode("gpu-good", "gang", 4.0, T0 + 1)]
    # one write for the tick that saw both, none after
    (placed,) = _placed_events(env, t)
    assert placed == {"attempt_no": 1, "nodes": [
        {"name": "gpu-bad", "role": "driver", "gpus": 0.0},
        {"name": "gpu-good", "role": "gang", "gpus": 4.0}]}
    latest = env.store.tasks.get_task(t).latest_attempt
    assert latest is not None and latest.nodes == env.store.attempts.get_attempt(t).nodes
    # history is never rewritten: the same rows again add nothing
    assert env.store.placement.record(t, 1, [("gpu-good", "gang", 2.0)], T0 + 9) == []
    assert env.store.placement.of_attempt(t, 1) == tuple(
        sorted(nodes, key=lambda n: (n.role, n.name)))
    # an attempt that does not exist gets no row
    assert env.store.placement.record(t, 7, [("gpu-good", "gang", 2.0)], T0 + 9) == []


def test_a_task_list_leaves_the_nodes_unread(tmp_path: Path) -> None:
    env = _two_nodes(tmp_path)
    t = env.add()
    env.tick(T0)
    _run_on(env, t, "w1", T0 + 1)
    (row,), _ = env.store.tasks.list_tasks()
    assert row.task_id == t and row.latest_attempt is not None
    assert row.latest_attempt.nodes is None


def test_two_tasks_failing_with_a_hardware_error_quarantine_the_node(tmp_path: Path) -> None:
    env = _two_nodes(tmp_path, quarantine_retry_delay_s=60.0)
    env.cluster.nodes["w2"].used["GPU"] = 4.0  # w2 busy: both tasks land on the bad node
    a, b = env.add(), env.add()
    env.tick(T0)
    _run_on(env, a, "w1", T0 + 1)
    _fail(env, a, T0 + 2)
    # the first evidence: no quarantine yet; A goes back, out of the scan for the delay
    assert env.store.nodes.state("gpu-bad") is None
    task_a = env.store.tasks.get_task(a)
    assert task_a.state is S.PENDING_RESOURCES
    assert "with a hardware error on gpu-bad" in task_a.pending_reason
    assert task_a.next_run_at == T0 + 2 + 60.0
    assert env.state(b) is S.SUBMITTED  # B takes the node meanwhile
    _run_on(env, b, "w1", T0 + 3)
    _fail(env, b, T0 + 4)
    state = env.store.nodes.state("gpu-bad")
    assert state is not None and state.source is NodeSource.QUARANTINE, state
    assert f"{a}#1" in state.reason and f"{b}#1" in state.reason
    assert "CUDA error: uncorrectable ECC error encountered" in state.reason
    assert len(state.reason) <= 200 and state.reason.isprintable()
    (event,) = env.store.nodes.events("gpu-bad")
    assert event.kind is NodeEventKind.QUARANTINED and event.source is NodeSource.QUARANTINE
    # B goes back at once, not counted against its attempts (as a preemption)
    task_b = env.store.tasks.get_task(b)
    assert task_b.state is S.PENDING_RESOURCES, task_b
    assert task_b.next_run_at == T0 + 4
    assert any("on gpu-bad, now quarantined" in (e.payload.get("reason") or "")
               and "not counted against max_attempts" in e.payload["reason"]
               for e in env.store.tasks.events(b)), env.store.tasks.events(b)
    # the quarantined node is out of admission: with w2 busy, nothing starts
    assert env.tick(T0 + 100).submitted == 0
    assert "gpu-bad is cordoned: quarantine:" in env.store.tasks.get_task(b).pending_reason


def test_the_quarantine_requeue_is_not_charged_to_max_attempts(tmp_path: Path) -> None:
    env = _two_nodes(tmp_path)
    env.cluster.nodes["w2"].used["GPU"] = 4.0
    a, b = env.add(max_attempts=1), env.add(max_attempts=1)
    env.tick(T0)
    _run_on(env, a, "w1", T0 + 1)
    _fail(env, a, T0 + 2)
    assert env.state(a) is S.FAILED  # its one attempt used: the delayed retry is counted
    _run_on(env, b, "w1", T0 + 3)
    _fail(env, b, T0 + 4)
    assert env.store.nodes.state("gpu-bad").source is NodeSource.QUARANTINE
    assert env.state(b) is S.PENDING_RESOURCES  # not counted: back despite max_attempts=1
    env.cluster.nodes["w2"].used["GPU"] = 0.0
    assert env.tick(T0 + 5).submitted == 1 and env.state(b) is S.SUBMITTED


def test_one_task_alone_never_quarantines_and_is_retried_once(tmp_path: Path) -> None:
    env = _two_nodes(tmp_path, quarantine_retry_delay_s=10.0)
    env.cluster.nodes["w2"].used["GPU"] = 4.0
    t = env.add()
    env.tick(T0)
    _run_on(env, t, "w1", T0 + 1)
    _fail(env, t, T0 + 2)
    assert env.state(t) is S.PENDING_RESOURCES
    assert env.tick(T0 + 12).submitted == 1
    _run_on(env, t, "w1", T0 + 13, n=2)
    _fail(env, t, T0 + 14, n=2)
    assert env.state(t) is S.FAILED  # its second hardware error: a task's own bug, maybe
    assert env.store.nodes.state("gpu-bad") is None  # one task is no evidence against it


def test_user_errors_and_self_made_cuda_errors_are_no_evidence(tmp_path: Path) -> None:
    env = _two_nodes(tmp_path)
    env.cluster.nodes["w2"].used["GPU"] = 4.0
    a, b = env.add(), env.add()
    env.tick(T0)
    _run_on(env, a, "w1", T0 + 1)
    _fail(env, a, T0 + 2, log=CUDA_LOG + "FileNotFoundError: [Errno 2] /data/x.parquet\n")
    assert env.state(a) is S.FAILED  # USER_ERROR: never re-queued
    env.tick(T0 + 3)
    _run_on(env, b, "w1", T0 + 4)
    _fail(env, b, T0 + 5, log="Traceback (most recent call last):\n"
                               "RuntimeError: CUDA error: out of memory\n")
    assert env.state(b) is S.FAILED
    assert env.store.nodes.state("gpu-bad") is None


def test_evidence_older_than_the_window_does_not_count(tmp_path: Path) -> None:
    env = _two_nodes(tmp_path, quarantine_window_s=100.0, quarantine_requeue=False)
    env.cluster.nodes["w2"].used["GPU"] = 4.0
    a, b, c = env.add(), env.add(), env.add()
    env.tick(T0)
    _run_on(env, a, "w1", T0 + 1)
    _fail(env, a, T0 + 2)
    assert env.state(a) is S.FAILED  # quarantine_requeue off: FAILED as before
    _run_on(env, b, "w1", T0 + 200)
    _fail(env, b, T0 + 201)  # A's evidence is 199 s old: outside the window
    assert env.store.nodes.state("gpu-bad") is None
    _run_on(env, c, "w1", T0 + 250)
    _fail(env, c, T0 + 251)
    state = env.store.nodes.state("gpu-bad")
    assert state is not None and state.source is NodeSource.QUARANTINE
    assert f"{b}#1" in state.reason and f"{c}#1" in state.reason and a not in state.reason
    assert env.state(c) is S.FAILED


def test_quarantine_off_changes_nothing(tmp_path: Path) -> None:
    env = _two_nodes(tmp_path, quarantine=False)
    env.cluster.nodes["w2"].used["GPU"] = 4.0
    a, b = env.add(), env.add()
    env.tick(T0)
    _run_on(env, a, "w1", T0 + 1)
    _fail(env, a, T0 + 2)
    _run_on(env, b, "w1", T0 + 3)
    _fail(env, b, T0 + 4)
    assert (env.state(a), env.state(b)) == (S.FAILED, S.FAILED)
    assert env.store.nodes.state("gpu-bad") is None


def test_a_quarantine_takes_over_a_health_cordon_and_only_an_operator_lifts_it(
        tmp_path: Path) -> None:
    env = _two_nodes(tmp_path)
    nodes = env.store.nodes
    nodes.cordon("gpu-bad", NodeSource.HEALTH, None, T0, "health: Xid 79")
    row = nodes.quarantine("gpu-bad", T0 + 1, "quarantine: evidence")
    assert nodes.state("gpu-bad").source is NodeSource.QUARANTINE and row.by is None
    # the health check's resume lifts its own cordons only
    with pytest.raises(NodeStateConflict, match=r"by quarantine \(the quarantine\)"):
        nodes.resume("gpu-bad", NodeSource.HEALTH, None, T0 + 2, "healthy")
    lifted = nodes.resume("gpu-bad", None, "root", T0 + 3, "GPU replaced")
    assert lifted.source is NodeSource.QUARANTINE and nodes.state("gpu-bad") is None
    nodes.cordon("gpu-good", NodeSource.OPERATOR, "root", T0, "fan")
    with pytest.raises(NodeStateConflict, match=r"already cordoned \(by root: fan\)"):
        nodes.quarantine("gpu-good", T0 + 4, "quarantine: evidence")
    assert nodes.state("gpu-good").source is NodeSource.OPERATOR
    with pytest.raises(NodeStateConflict):  # quarantined twice: the first reason stays
        nodes.quarantine("gpu-bad", T0 + 5, "one")
        nodes.quarantine("gpu-bad", T0 + 6, "two")
    assert nodes.state("gpu-bad").reason == "one"


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgresql",
                                                           marks=pytest.mark.postgres)])
def test_the_evidence_outlives_a_restart_of_the_service(tmp_path: Path, engine: str,
                                                        request: pytest.FixtureRequest
                                                        ) -> None:
    """The first task's evidence is the store's, not the scheduler's memory: after the
    service starts again (or another instance takes the lead) the second task's failure
    still completes the quarantine."""
    url = (request.getfixturevalue("pg_server").store_database() if engine == "postgresql"
           else None)
    env = _two_nodes(tmp_path, store_url=url, quarantine_requeue=False)
    env.cluster.nodes["w2"].used["GPU"] = 4.0
    a, b = env.add(), env.add()
    env.tick(T0)
    _run_on(env, a, "w1", T0 + 1)
    _fail(env, a, T0 + 2)
    assert env.store.nodes.state("gpu-bad") is None
    env.reopen()
    _run_on(env, b, "w1", T0 + 3)
    _fail(env, b, T0 + 4)
    state = env.store.nodes.state("gpu-bad")
    assert state is not None and state.source is NodeSource.QUARANTINE, state
    assert f"{a}#1" in state.reason and f"{b}#1" in state.reason
    assert [(n, e.task_id) for n, e in env.store.nodes.evidence_since(T0)] == [
        ("gpu-bad", a), ("gpu-bad", b)]
    assert env.store.nodes.evidence_since(T0 + 3) == env.store.nodes.evidence_since(T0)[1:]
