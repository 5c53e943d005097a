"""``drain --requeue`` (issue 55): the attempts on the node are stopped and re-queued as
preemptions, tick after tick and across a restart, until the node is resumed."""

from __future__ import annotations

from pathlib import Path

import pytest
from scheduler_env import T0, Env, S, driver_holds_the_task_lock, sid

from service.domain.newtask import NewTask
from service.domain.nodes import NodeSource, drain_mark
from service.domain.states import RayStatus
from service.jobspec.model import JobSpec


class DrainEnv(Env):
    """head (no GPUs), w1 and w2 (4 GPUs each); the fake places a driver on the first
    node with a worker slot, w1."""

    def __init__(self, root: Path, **sched: object) -> None:
        super().__init__(root, **sched)
        self.cluster.add_node("w2", gpus=4, cpus=16)

    def add_task(self, save_freq: int | None = 5, max_attempts: int | None = None) -> str:
        self.n += 1
        task_id = f"alice-ppo-20251223-143201-{self.n:04x}"
        spec = JobSpec(workload="ppo", code_path=f"{self.root}/verl", model_id="org/model",
                       train_file=f"{self.root}/train.parquet",
                       val_file=f"{self.root}/val.parquet", nnodes=1, n_gpus_per_node=4,
                       save_freq=save_freq, max_attempts=max_attempts)
        self.store.tasks.create_task(NewTask(
            id_prefix="", workload="ppo", text="workload: ppo\n", spec=spec.to_dict(),
            nnodes=1, n_gpus_per_node=4, user="alice", created_at=T0, priority=0),
            task_id=task_id)
        return task_id

    def running_on(self, task_id: str, gang_node: str, now: float, n: int = 1) -> None:
        self.tick(now)
        self.cluster.start(sid(task_id, n), {gang_node: 4})
        self.tick(now + 1)
        assert self.state(task_id) is S.RUNNING

    def events(self, task_id: str, kind: str) -> list[dict]:
        return [e.payload for e in self.store.tasks.events(task_id) if e.event_type == kind]

    def reason(self, task_id: str) -> str:
        return self.store.tasks.get_task(task_id).pending_reason or ""


@pytest.fixture
def denv(tmp_path: Path) -> DrainEnv:
    e = DrainEnv(tmp_path, max_attempts=1)
    yield e
    e.store.close()


def test_the_gang_on_a_drained_node_is_stopped_and_requeued_as_a_preemption(
        denv: DrainEnv) -> None:
    t = denv.add_task(max_attempts=1)  # a failure would end it: a preemption does not
    denv.running_on(t, "w2", T0)  # driver on w1, gang on w2
    denv.store.nodes.drain("w2", "root", T0 + 5, "replacing GPU 3", requeue=True)
    report = denv.tick(T0 + 10)
    assert report.requeued == 1 and denv.cluster.stop_calls == [sid(t)]
    assert denv.store.tasks.active()[0].preempted_for == drain_mark("w2")
    assert denv.events(t, "PREEMPTION_REQUESTED") == [
        {"attempt_no": 1, "for": "node:w2", "node": "w2", "reason": "replacing GPU 3"}]
    denv.tick(T0 + 11)  # Ray says STOPPED: PREEMPTED, back in the queue, not counted
    attempt = denv.store.attempts.get_attempt(t, 1)
    assert (attempt.failure_kind, attempt.preempted_for) == ("PREEMPTED", "node:w2")
    task = denv.store.tasks.get_task(t)
    assert task.state in (S.PENDING_RESOURCES, S.SUBMITTED), task
    assert denv.events(t, "RETRY_SCHEDULED")[0]["failure_kind"] == "PREEMPTED"
    assert denv.cluster.submit_calls == [sid(t), sid(t, 2)]  # at once, w1 has room
    assert denv.store.tasks.active()[0].preemptions == 1
    denv.cluster.start(sid(t, 2), {"w1": 4})
    denv.tick(T0 + 12)
    assert denv.state(t) is S.RUNNING and sid(t, 2) not in denv.cluster.stop_calls


def test_with_no_other_room_the_task_waits_naming_the_drain(denv: DrainEnv) -> None:
    denv.cluster.occupy("w1", GPU=4)  # nowhere else to go: the task waits, says why
    t = denv.add_task()
    denv.running_on(t, "w2", T0)
    denv.store.nodes.drain("w2", "root", T0 + 5, "replacing GPU 3", requeue=True)
    denv.tick(T0 + 10)
    denv.tick(T0 + 11)
    assert denv.state(t) is S.PENDING_RESOURCES and denv.cluster.submit_calls == [sid(t)]
    assert denv.reason(t).endswith("; w2 is drained: replacing GPU 3"), denv.reason(t)
    assert denv.store.attempts.get_attempt(t, 1).failure_kind == "PREEMPTED"


def test_a_driver_on_the_drained_node_is_requeued_too(denv: DrainEnv) -> None:
    t = denv.add_task()
    denv.running_on(t, "w2", T0)  # its driver is on w1
    denv.store.nodes.drain("w1", "root", T0 + 5, "reboot", requeue=True)
    denv.tick(T0 + 10)
    assert denv.cluster.stop_calls == [sid(t)]
    assert denv.events(t, "PREEMPTION_REQUESTED")[0]["node"] == "w1"


def test_a_drain_without_requeue_or_of_another_node_stops_nothing(denv: DrainEnv) -> None:
    t = denv.add_task()
    denv.running_on(t, "w2", T0)
    denv.store.nodes.drain("w2", "root", T0 + 5, "let it finish")
    denv.cluster.add_node("w3", gpus=4, cpus=16)
    denv.store.nodes.drain("w3", "root", T0 + 5, "empty", requeue=True)
    for i in range(3):
        assert denv.tick(T0 + 10 + i).requeued == 0
    assert denv.cluster.stop_calls == [] and denv.state(t) is S.RUNNING


def test_an_upgraded_drain_and_a_restart_keep_stopping_what_is_found_there(
        tmp_path: Path) -> None:
    """Without the fence (``node_fence_every_s: 0``; or one not holding its node yet) Ray
    may place an attempt on the drained node: the drain stops it as soon as it is seen."""
    denv = DrainEnv(tmp_path, max_attempts=1, node_fence_every_s=0.0)
    a = denv.add_task()
    denv.running_on(a, "w2", T0)
    denv.store.nodes.drain("w2", "root", T0 + 2, "swap")  # a plain drain first
    denv.tick(T0 + 3)
    assert denv.cluster.stop_calls == []
    denv.store.nodes.drain("w2", "root", T0 + 4, "swap now", requeue=True)  # upgraded
    denv.reopen()  # the service restarts: the drain is the database's
    denv.tick(T0 + 5)
    assert denv.cluster.stop_calls == [sid(a)]
    denv.tick(T0 + 6)  # PREEMPTED, and attempt 2 submitted at once
    assert denv.cluster.submit_calls[-1] == sid(a, 2)
    # an attempt Ray places there anyway (its gang) is stopped as soon as it is seen
    denv.cluster.start(sid(a, 2), {"w2": 4})
    denv.tick(T0 + 7)
    assert denv.cluster.stop_calls[-1] == sid(a, 2)
    assert [e["attempt_no"] for e in denv.events(a, "PREEMPTION_REQUESTED")] == [1, 2]
    denv.store.close()


def test_a_resumed_node_keeps_its_attempts(denv: DrainEnv) -> None:
    denv.store.nodes.drain("w2", "root", T0, "x", requeue=True)
    denv.store.nodes.resume("w2", NodeSource.OPERATOR, "root", T0 + 1, "back")
    t = denv.add_task()
    denv.running_on(t, "w2", T0 + 2)
    denv.tick(T0 + 5)
    assert denv.cluster.stop_calls == [] and denv.state(t) is S.RUNNING


def test_a_stop_is_asked_once_and_sent_again_until_ray_ends_it(denv: DrainEnv) -> None:
    t = denv.add_task()
    denv.running_on(t, "w2", T0)
    job = denv.cluster.jobs[sid(t)]
    denv.cluster.stop = lambda submission_id: denv.cluster.stop_calls.append(submission_id)
    denv.store.nodes.drain("w2", "root", T0 + 5, "x", requeue=True)
    assert denv.tick(T0 + 10).requeued == 1
    assert denv.tick(T0 + 11).requeued == 0  # marked once; the reconcile stops it again
    assert denv.cluster.stop_calls.count(sid(t)) >= 2
    assert len(denv.events(t, "PREEMPTION_REQUESTED")) == 1
    assert job.status is RayStatus.RUNNING and denv.state(t) is S.RUNNING


def test_an_orphaned_driver_is_asked_through_its_watcher(denv: DrainEnv) -> None:
    t = denv.add_task()
    denv.running_on(t, "w2", T0)
    stop = denv.artifacts.task_lock(t, "alice").with_name(f"{t}.lock.stop")
    denv.store.nodes.drain("w2", "root", T0 + 5, "x", requeue=True)
    with driver_holds_the_task_lock(denv, t):
        denv.tick(T0 + 10)  # the stop: Ray says STOPPED, the driver runs on
        denv.tick(T0 + 11)
        assert stop.read_text() == "node w2 drained\n"
        assert denv.state(t) is S.RUNNING
    denv.tick(T0 + 12)
    assert denv.store.attempts.get_attempt(t, 1).failure_kind == "PREEMPTED"


def test_a_requeue_is_counted_as_a_preemption_in_metrics(denv: DrainEnv) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from service.web.metrics import MeteredScheduler, ServiceMetrics

    metrics = ServiceMetrics(denv.store.tasks.counts_by_state)
    denv.sched = MeteredScheduler(denv.sched, metrics)
    t = denv.add_task()
    denv.running_on(t, "w2", T0)
    denv.store.nodes.drain("w2", "root", T0 + 5, "x", requeue=True)
    denv.tick(T0 + 10)
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    assert families["argus_preemptions"].samples[0].value == 1
