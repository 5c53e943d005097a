"""Scheduler ticks against FakeCluster with an injected clock (no sleeps)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from scheduler_env import T0, VERL_GPU_ERROR, Env, S, driver_holds_the_task_lock, sid

from service.cluster.boundary import ClusterUnavailable
from service.config import UserSettings
from service.domain.layout import LOCK_BUSY_EXIT, LOCK_BUSY_LINE
from service.domain.reasons import as_text
from service.domain.states import RayStatus
from service.domain.users import Role
from service.engine import applier
from service.engine.scheduler import (
    DRIVER_NODE_GONE_S,
    Scheduler,
    SchedulerLoop,
    TickReport,
    open_outage_since,
)
from service.jobspec.model import JobSpec
from service.policy.quotas import Limits
from service.store.writer import EventRow


def test_happy_path_with_artifacts_and_log_archive(env: Env) -> None:
    t = env.add()
    report = env.tick(T0)
    assert (report.submitted, env.state(t)) == (1, S.SUBMITTED)
    assert env.cluster.submit_calls == [sid(t)]
    files = env.root / "users" / "alice" / "jobs" / sid(t)
    submit = json.loads((files / "submit.json").read_text())
    assert submit["submission_id"] == sid(t)
    assert submit["argv"][:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert submit["entrypoint_resources"]["worker_node"] == 1.0
    assert submit["metadata"]["argus_task_id"] == t
    assert (files / "jobspec.yaml").read_text() == "workload: ppo\n"
    env.cluster.start(sid(t), {"w1": 4})
    env.tick(T0 + 1)
    view = env.store.tasks.get_task(t)
    assert view.state is S.RUNNING and view.latest_attempt.ray_status == "RUNNING"
    env.cluster.finish(sid(t), log="step 1\ndone\n", exit_code=0)
    report = env.tick(T0 + 2)
    assert (report.finished, env.state(t)) == (1, S.SUCCEEDED)
    assert env.artifacts.read_log(sid(t), "alice") == "step 1\ndone\n"
    assert env.store.attempts.get_attempt(t).exit_code == 0


def test_fifo_and_a_freed_slot_is_used_in_the_same_tick(env: Env) -> None:
    a, b, c = env.add(), env.add(), env.add()
    env.tick(T0)
    assert [env.state(x) for x in (a, b, c)] == [S.SUBMITTED, S.PENDING_RESOURCES,
                                                  S.PENDING_RESOURCES]
    reason = env.store.tasks.get_task(b).pending_reason
    assert reason.startswith("needs 1x4 GPUs (+12 CPUs per node); free:")
    env.cluster.start(sid(a), {"w1": 4})
    env.tick(T0 + 1)
    env.cluster.finish(sid(a))
    report = env.tick(T0 + 2)  # reconcile frees the node, admission uses it at once
    assert (report.finished, report.submitted) == (1, 1)
    assert [env.state(x) for x in (a, b, c)] == [S.SUCCEEDED, S.SUBMITTED,
                                                  S.PENDING_RESOURCES]
    assert env.store.tasks.get_task(c).queue_position == 1


def test_in_flight_task_keeps_its_gpus_reserved_until_it_holds_them(env: Env) -> None:
    a = env.add()
    env.tick(T0)
    b = env.add(now=T0 + 1)
    env.tick(T0 + 1)  # a submitted but not started: the 4 free GPUs are a's
    assert env.state(b) is S.PENDING_RESOURCES
    assert "10.0.0.2 0 GPU/" in env.store.tasks.get_task(b).pending_reason
    assert env.cluster.submit_calls == [sid(a)]


def test_backfill_then_starvation_guard(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, starvation_guard_s=100.0, reservations=0)
    env.cluster.occupy("w1", GPU=2, CPU=6)  # another user's job: 2 of the 4 GPUs
    big = env.add(nnodes=1, g=4)  # fits an idle w1, not now
    small = env.add(nnodes=1, g=1)
    env.tick(T0)
    assert env.state(big) is S.PENDING_RESOURCES and env.state(small) is S.SUBMITTED
    late = env.add(nnodes=1, g=1, now=T0 + 100)
    env.tick(T0 + 100)  # big has waited 100 s: w1 is kept for it, late would fit there
    assert env.state(late) is S.PENDING_RESOURCES
    assert env.store.tasks.get_task(late).pending_reason == (
        f"waiting behind {big} (priority 0), runnable for over 100s: nodes 10.0.0.2 are "
        "kept for it (starvation guard)")
    env.cluster.release("w1", GPU=2, CPU=6)
    env.cluster.start(sid(small), {"w1": 1})
    env.cluster.finish(sid(small))
    env.tick(T0 + 101)  # room for big at last: it starts; late waits for room, not the guard
    assert env.state(big) is S.SUBMITTED and env.state(late) is S.PENDING_RESOURCES
    assert env.store.tasks.get_task(late).pending_reason.startswith("needs 1x1 GPUs")


def test_the_guard_keeps_only_the_nodes_the_gang_needs(tmp_path: Path, store_url: str) -> None:
    """Backfill goes on where the starving gang cannot or will not run."""
    env = Env(tmp_path, store_url=store_url, starvation_guard_s=100.0)
    env.cluster.add_node("w2", gpus=4, cpus=16)
    env.cluster.add_node("small", gpus=2, cpus=8)  # too small for a 1x4 gang
    env.cluster.occupy("w1", GPU=1, CPU=3)
    env.cluster.occupy("w2", GPU=2, CPU=6)
    big = env.add(nnodes=1, g=4)
    env.tick(T0)
    late = [env.add(nnodes=1, g=1, now=T0 + 100) for _ in range(4)]
    env.tick(T0 + 100)  # w1 (3 free, the closest to fit) is kept; w2 and small are not
    assert env.state(big) is S.PENDING_RESOURCES
    assert [env.state(t) for t in late] == [S.SUBMITTED] * 4  # 2 on w2, 2 on small


def test_the_guard_keeps_the_same_nodes_while_they_drain(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, starvation_guard_s=0.0, reservations=0)
    env.cluster.add_node("w2", gpus=4, cpus=16)
    env.cluster.occupy("w1", GPU=2, CPU=6)
    env.cluster.occupy("w2", GPU=3, CPU=9)
    big = env.add(nnodes=1, g=4)
    env.tick(T0)  # w1 (2 free) is the closest to fitting: kept
    assert env.sched.applier.reservation == frozenset({"w1"})
    env.cluster.release("w2", GPU=2, CPU=6)  # now w2 has 3 free, more than w1's 2
    env.tick(T0 + 1)  # the reservation stays where it has been draining
    assert env.sched.applier.reservation == frozenset({"w1"})
    env.cluster.release("w1", GPU=2, CPU=6)
    env.tick(T0 + 2)
    assert env.state(big) is S.SUBMITTED


def test_backfill_off_is_first_come_first_served(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, backfill=False)
    env.cluster.occupy("w1", GPU=2, CPU=6)
    big = env.add(nnodes=1, g=4)
    small = env.add(nnodes=1, g=1)
    env.tick(T0)
    assert env.state(big) is S.PENDING_RESOURCES and env.state(small) is S.PENDING_RESOURCES
    assert env.store.tasks.get_task(small).pending_reason == (
        f"waiting behind {big} (priority 0): first come, first served (backfill off)")


def test_a_gang_that_can_never_fit_says_so_and_does_not_hold_the_guard(tmp_path: Path,
                                                                        store_url: str
                                                                        ) -> None:
    env = Env(tmp_path, store_url=store_url, starvation_guard_s=100.0)
    huge = env.add(nnodes=1, g=8)  # w1 has 4 GPUs in all
    env.tick(T0)
    reason = env.store.tasks.get_task(huge).pending_reason
    assert reason.startswith("can never fit this cluster as it is: needs 1x8 GPUs"), reason
    assert "node capacity: 10.0.0.1 0 GPU/0 CPU, 10.0.0.2 4 GPU/16 CPU" in reason
    late = env.add(nnodes=1, g=4, now=T0 + 200)
    env.tick(T0 + 200)  # huge is far past the guard, yet it cannot block the queue
    assert env.state(late) is S.SUBMITTED and env.state(huge) is S.PENDING_RESOURCES
    env.cluster.add_node("w8", gpus=8, cpus=32)  # an 8-GPU node joins: huge starts
    env.tick(T0 + 201)
    assert env.state(huge) is S.SUBMITTED


def test_guard_not_yet_reached_allows_backfill(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, starvation_guard_s=100.0)
    big = env.add(nnodes=2, g=4)
    env.tick(T0)
    late = env.add(nnodes=1, g=1, now=T0 + 99)
    env.tick(T0 + 99.9)
    assert env.state(big) is S.PENDING_RESOURCES and env.state(late) is S.SUBMITTED


def test_insufficient_resources_retries_after_the_delay_and_not_before(tmp_path: Path,
                                                                       store_url: str) -> None:
    """``timer`` mode (the seeds'): out of the scan for retry_interval_s."""
    env = Env(tmp_path, store_url=store_url, retry_mode="timer")
    t = env.add()
    env.tick(T0)
    env.cluster.start(sid(t))
    env.cluster.finish(sid(t), RayStatus.FAILED, message="exit code 1",
                       log="Traceback (most recent call last):\n" + VERL_GPU_ERROR + "\n")
    report = env.tick(T0 + 10)
    assert report.retried == 1
    view = env.store.tasks.get_task(t)
    assert view.state is S.PENDING_RESOURCES and view.next_run_at == T0 + 10 + 60
    assert "attempt 1 failed (INSUFFICIENT_RESOURCES)" in view.pending_reason
    assert env.store.attempts.get_attempt(t, 1).failure_kind == "INSUFFICIENT_RESOURCES"
    env.tick(T0 + 70 - 0.001)
    assert env.cluster.submit_calls == [sid(t)]
    env.tick(T0 + 70)
    assert env.cluster.submit_calls == [sid(t), sid(t, 2)]
    assert env.state(t) is S.SUBMITTED
    assert env.store.tasks.get_task(t).latest_attempt.ray_submission_id == sid(t, 2)


def _fail_insufficient(env: Env, t: str, n: int, now: float) -> None:
    env.cluster.clock = now
    env.cluster.finish(sid(t, n), RayStatus.FAILED, message=VERL_GPU_ERROR)
    env.tick(now)


def test_exponential_backoff_with_cap(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, retry_mode="timer", retry_backoff="exponential",
              retry_interval_s=10.0, retry_max_interval_s=25.0)
    t = env.add()
    env.tick(T0)
    now, delays = T0, []
    for n in (1, 2, 3):
        _fail_insufficient(env, t, n, now)
        delays.append(env.store.tasks.get_task(t).next_run_at - now)
        now = env.store.tasks.get_task(t).next_run_at
        env.tick(now)
        assert env.cluster.submit_calls[-1] == sid(t, n + 1)
    assert delays == [10.0, 20.0, 25.0]


def test_max_attempts(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, max_attempts=2, retry_interval_s=5.0)
    t = env.add()
    env.tick(T0)
    _fail_insufficient(env, t, 1, T0 + 1)
    env.tick(T0 + 6)
    _fail_insufficient(env, t, 2, T0 + 7)
    view = env.store.tasks.get_task(t)
    assert view.state is S.FAILED
    assert view.error_summary.startswith("gave up after 2 attempts (max_attempts=2); last "
                                         "failure INSUFFICIENT_RESOURCES: Total available")
    env.tick(T0 + 1000)
    assert env.cluster.submit_calls == [sid(t), sid(t, 2)]


def test_a_task_s_own_max_attempts(tmp_path: Path, store_url: str) -> None:
    """A task with max_attempts=1 gives up after its first retryable failure; another,
    with none of its own, keeps the configured budget (3)."""
    env = Env(tmp_path, store_url=store_url, max_attempts=3, retry_interval_s=5.0)
    own = env.add(g=2, max_attempts=1)
    default = env.add(g=2)
    env.tick(T0)
    _fail_insufficient(env, own, 1, T0 + 1)
    _fail_insufficient(env, default, 1, T0 + 1)
    assert env.store.tasks.get_task(own).state is S.FAILED
    assert env.store.tasks.get_task(own).error_summary.startswith(
        "gave up after 1 attempts (max_attempts=1); last failure INSUFFICIENT_RESOURCES")
    assert env.store.tasks.get_task(own).spec["max_attempts"] == 1
    view = env.store.tasks.get_task(default)
    assert view.state is not S.FAILED and view.spec.get("max_attempts") is None
    env.tick(T0 + 6)
    assert env.cluster.submit_calls[-1] == sid(default, 2)
    assert sid(own, 2) not in env.cluster.submit_calls


def test_non_retryable_failure_stays_failed(env: Env) -> None:
    t = env.add()
    env.tick(T0)
    env.cluster.finish(sid(t), RayStatus.FAILED, message="exit code 1",
                       log="Traceback (most recent call last):\nKeyError: 'actor'\n")
    env.tick(T0 + 1)
    view = env.store.tasks.get_task(t)
    assert view.state is S.FAILED and view.error_summary == "RUNTIME_ERROR: KeyError: 'actor'"
    env.tick(T0 + 10_000)
    assert env.cluster.submit_calls == [sid(t)]


def test_cluster_lost_requeues_and_resubmits(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, retry_mode="timer")
    t = env.add()
    env.tick(T0)
    env.cluster.start(sid(t), {"w1": 4})
    env.tick(T0 + 1)
    env.cluster.forget_all_jobs()
    env.tick(T0 + 2)
    assert env.state(t) is S.PENDING_RESOURCES
    assert env.store.attempts.get_attempt(t, 1).failure_kind == "CLUSTER_LOST"
    env.tick(T0 + 62)
    assert env.cluster.submit_calls == [sid(t), sid(t, 2)]


def running_attempt(tmp_path: Path) -> tuple[Env, str]:
    """A task whose attempt 1 runs on the cluster at T0 + 1 (retries on a timer)."""
    env = Env(tmp_path, retry_mode="timer")
    t = env.add()
    env.tick(T0)
    env.cluster.start(sid(t), {"w1": 4})
    env.tick(T0 + 1)
    return env, t


def test_a_running_attempt_stays_running_through_a_head_outage(tmp_path: Path) -> None:
    env, t = running_attempt(tmp_path)
    env.cluster.unreachable = True  # the head restarts: no Ray answer
    for second in range(2, 92, 5):  # 90 s without an answer from Ray
        report = env.tick(T0 + second)
        assert report.unreachable and env.state(t) is S.RUNNING
    env.cluster.unreachable = False  # the head is back on its store: Ray knows the job
    env.tick(T0 + 95)
    assert env.state(t) is S.RUNNING
    env.cluster.finish(sid(t), RayStatus.SUCCEEDED)
    env.tick(T0 + 100)
    assert env.state(t) is S.SUCCEEDED
    assert [a.attempt_no for a in env.store.attempts.list_attempts(t)] == [1]
    outage = [(e.event_type, e.ts) for e in env.store.tasks.events(t)
              if e.event_type.startswith("CLUSTER_")]
    assert outage == [("CLUSTER_UNREACHABLE", T0 + 2), ("CLUSTER_BACK", T0 + 95)]
    back = next(e for e in env.store.tasks.events(t) if e.event_type == "CLUSTER_BACK")
    assert back.payload == {"after_s": 93.0}


def test_a_service_restarted_in_an_outage_keeps_the_attempt_and_notes_its_end(
        tmp_path: Path) -> None:
    """The service in the head container dies with the head: the run it starts again
    keeps the RUNNING attempt and closes the outage the previous run saw begin."""
    env, t = running_attempt(tmp_path)
    env.cluster.unreachable = True  # the head container stops: Ray goes first
    env.tick(T0 + 2)
    env.reopen()  # then the service dies with the container and starts again
    env.sched.startup(T0 + 20)
    env.tick(T0 + 21)  # Ray not back yet: nothing new
    env.cluster.unreachable = False
    env.tick(T0 + 30)
    assert env.state(t) is S.RUNNING
    outage = [(e.event_type, e.ts, e.payload.get("after_s")) for e in env.store.tasks.events(t)
              if e.event_type.startswith("CLUSTER_")]
    assert outage == [("CLUSTER_UNREACHABLE", T0 + 2, None), ("CLUSTER_BACK", T0 + 30, 28.0)]
    env.reopen()  # a restart with the outage closed opens none
    env.sched.startup(T0 + 40)
    env.tick(T0 + 41)
    assert len([e for e in env.store.tasks.events(t) if e.event_type.startswith("CLUSTER_")]) == 2
    env.cluster.finish(sid(t), RayStatus.SUCCEEDED)
    env.tick(T0 + 42)
    assert env.state(t) is S.SUCCEEDED
    assert [a.attempt_no for a in env.store.attempts.list_attempts(t)] == [1]


@pytest.mark.parametrize(("events", "since"), [
    ([], None),
    ([("CLUSTER_UNREACHABLE", 5.0)], 5.0),
    ([("CLUSTER_UNREACHABLE", 5.0), ("CLUSTER_BACK", 9.0)], None),
    ([("CLUSTER_BACK", 9.0), ("CLUSTER_UNREACHABLE", 12.0), ("SUBMITTED", 13.0)], 12.0),
])
def test_open_outage_since(events: list[tuple[str, float]], since: float | None) -> None:
    rows = [EventRow(id=i, task_id="t", ts=ts, event_type=kind, payload={})
            for i, (kind, ts) in enumerate(events)]
    assert open_outage_since([rows, []]) == since


SUPERVISOR_LOST = [
    "Unexpected error occurred: failed to get job supervisor.",
    "Job supervisor actor died: The actor died unexpectedly before finishing this task.",
]


@pytest.mark.parametrize("message", SUPERVISOR_LOST)
def test_ray_lost_the_supervisor_but_the_driver_exited_0(tmp_path: Path, message: str) -> None:
    env, t = running_attempt(tmp_path)
    (env.artifacts.attempt_dir(sid(t), "alice") / "exit_code").write_text("0\n")
    env.cluster.finish(sid(t), RayStatus.FAILED, message=message)
    env.tick(T0 + 2)
    task = env.store.tasks.get_task(t)
    assert task.state is S.SUCCEEDED and "exited 0" in task.error_summary
    attempt = env.store.attempts.get_attempt(t, 1)
    assert (attempt.ray_status, attempt.exit_code, attempt.failure_kind) == ("FAILED", 0, None)
    assert env.cluster.submit_calls == [sid(t)]


@pytest.mark.parametrize("message", SUPERVISOR_LOST)
def test_ray_lost_the_supervisor_and_the_driver_left_no_marker(tmp_path: Path,
                                                              message: str) -> None:
    env, t = running_attempt(tmp_path)
    env.cluster.finish(sid(t), RayStatus.FAILED, message=message)
    env.tick(T0 + 2)
    assert env.state(t) is S.PENDING_RESOURCES  # resumed from its checkpoint as attempt 2
    attempt = env.store.attempts.get_attempt(t, 1)
    assert attempt.failure_kind == "CLUSTER_LOST" and "no exit marker" in attempt.message
    env.tick(T0 + 62)
    assert env.cluster.submit_calls == [sid(t), sid(t, 2)]


def test_ray_lost_the_supervisor_and_the_driver_failed(tmp_path: Path) -> None:
    env, t = running_attempt(tmp_path)
    (env.artifacts.attempt_dir(sid(t), "alice") / "exit_code").write_text("1\n")
    env.cluster.finish(sid(t), RayStatus.FAILED, message=SUPERVISOR_LOST[0],
                       log="Traceback (most recent call last):\nKeyError: 'x'\n")
    env.tick(T0 + 2)
    assert env.state(t) is S.FAILED
    attempt = env.store.attempts.get_attempt(t, 1)
    assert (attempt.failure_kind, attempt.exit_code) == ("RUNTIME_ERROR", 1)


def test_a_plain_driver_failure_is_not_second_guessed(tmp_path: Path) -> None:
    env, t = running_attempt(tmp_path)
    (env.artifacts.attempt_dir(sid(t), "alice") / "exit_code").write_text("0\n")
    env.cluster.finish(sid(t), RayStatus.FAILED,
                       message="Job entrypoint command failed with exit code 1")
    env.tick(T0 + 2)
    assert env.state(t) is S.FAILED


def test_an_orphaned_driver_keeps_its_attempt_until_it_ends(tmp_path: Path) -> None:
    """Seen on compose after a head fault: Ray failed the job ("Unexpected error
    occurred: RPC error: CANCELLED") with no exit marker while its driver ran on, orphaned,
    and Argus started attempt 2 beside it. While the task's lock is held the attempt is
    not over: no second attempt, the attempt says why, once."""
    env, t = running_attempt(tmp_path)
    with driver_holds_the_task_lock(env, t):
        env.cluster.finish(sid(t), RayStatus.FAILED, message=SUPERVISOR_LOST[0])
        for second in (2, 7, 70, 700):
            env.tick(T0 + second)
            assert env.state(t) is S.RUNNING
        attempt = env.store.attempts.get_attempt(t, 1)
        assert attempt.ray_status == "FAILED" and attempt.failure_kind is None
        assert "its driver still runs" in attempt.message
        assert f"{sid(t)} on w1 pid 4242" in attempt.message
        assert str(env.artifacts.task_lock(t, "alice")) in attempt.message
        syncs = [e for e in env.store.tasks.events(t) if e.event_type == "RAY_STATUS_SYNC"]
        assert [e.payload["ray_status"] for e in syncs] == ["RUNNING", "FAILED"]
        assert env.cluster.submit_calls == [sid(t)]
    env.tick(T0 + 701)  # the driver ended: no marker, so lost, and resumed as attempt 2
    attempt = env.store.attempts.get_attempt(t, 1)
    assert attempt.failure_kind == "CLUSTER_LOST" and "no exit marker" in attempt.message
    env.tick(T0 + 800)
    assert env.cluster.submit_calls == [sid(t), sid(t, 2)]


def test_an_orphaned_driver_that_finished_succeeds_on_its_first_attempt(tmp_path: Path
                                                                       ) -> None:
    """The driver's parent (a subshell that outlives Ray's shell) wrote its exit code when
    it ended: the run is not lost, and nothing runs twice."""
    env, t = running_attempt(tmp_path)
    with driver_holds_the_task_lock(env, t):
        env.cluster.finish(sid(t), RayStatus.FAILED, message=SUPERVISOR_LOST[0])
        env.tick(T0 + 2)
        (env.artifacts.attempt_dir(sid(t), "alice") / "exit_code").write_text("0\n")
    env.tick(T0 + 600)
    task = env.store.tasks.get_task(t)
    assert task.state is S.SUCCEEDED and "exited 0" in task.error_summary
    assert env.store.attempts.get_attempt(t, 1).end_time == T0 + 600
    assert env.cluster.submit_calls == [sid(t)]


def test_an_orphaned_driver_of_a_job_ray_forgot_keeps_its_attempt(tmp_path: Path) -> None:
    env, t = running_attempt(tmp_path)
    with driver_holds_the_task_lock(env, t):
        env.cluster.forget_all_jobs()
        env.tick(T0 + 2)
        assert env.state(t) is S.RUNNING
        assert "no longer knows" in env.store.attempts.get_attempt(t, 1).message
    env.tick(T0 + 3)
    assert env.store.attempts.get_attempt(t, 1).failure_kind == "CLUSTER_LOST"


def test_a_cancel_stops_an_orphaned_driver_through_its_watcher(tmp_path: Path) -> None:
    """Ray cannot stop a driver it lost: the cancel asks the driver's watcher (a stop
    file beside the lock) and the task is CANCELED once the driver is gone."""
    env, t = running_attempt(tmp_path)
    stop = env.artifacts.task_lock(t, "alice").with_name(f"{t}.lock.stop")
    with driver_holds_the_task_lock(env, t):
        env.cluster.finish(sid(t), RayStatus.FAILED, message=SUPERVISOR_LOST[0])
        env.tick(T0 + 2)
        assert not stop.exists()  # followed, not stopped
        env.store.tasks.cancel(t, T0 + 3)
        env.tick(T0 + 4)
        assert env.state(t) is S.RUNNING and stop.read_text() == "canceled\n"
        assert "asked its watcher to stop it (canceled)" in env.store.attempts.get_attempt(
            t, 1).message
    env.tick(T0 + 5)
    assert env.state(t) is S.CANCELED
    assert env.store.attempts.get_attempt(t, 1).end_time == T0 + 5  # the driver's end, not Ray's
    assert env.cluster.submit_calls == [sid(t)]


def test_an_attempt_that_found_the_task_lock_held_is_retried(tmp_path: Path) -> None:
    """The entrypoint's own backstop: the driver was not started (exit 75, its line)."""
    env, t = running_attempt(tmp_path)
    line = f"{LOCK_BUSY_LINE} (it holds /x/locks/{t}.lock: w1 pid 7 since 2026-11-27T03:00:00Z)"
    (env.artifacts.attempt_dir(sid(t), "alice") / "exit_code").write_text("75\n")
    env.cluster.finish(sid(t), RayStatus.FAILED, exit_code=LOCK_BUSY_EXIT, log=line + "\n",
                       message=f"Job entrypoint command failed with exit code 75, last "
                               f"available logs:\n{line}")
    env.tick(T0 + 2)
    assert env.state(t) is S.PENDING_RESOURCES
    attempt = env.store.attempts.get_attempt(t, 1)
    assert (attempt.failure_kind, attempt.exit_code) == ("CLUSTER_LOST", LOCK_BUSY_EXIT)
    assert LOCK_BUSY_LINE in attempt.message


def test_a_running_job_whose_driver_node_left_is_lost_after_the_grace(tmp_path: Path) -> None:
    """Ray may keep a job RUNNING after a failover though its supervisor died with its
    node (ray#65037): the driver's node, gone from the cluster, is the evidence."""
    env, t = running_attempt(tmp_path)
    env.cluster.remove_node("w1")
    env.tick(T0 + 2)
    env.tick(T0 + 2 + DRIVER_NODE_GONE_S - 1)
    assert env.state(t) is S.RUNNING and env.cluster.stop_calls == []
    env.tick(T0 + 2 + DRIVER_NODE_GONE_S)
    assert env.state(t) is S.PENDING_RESOURCES
    attempt = env.store.attempts.get_attempt(t, 1)
    assert attempt.failure_kind == "CLUSTER_LOST" and "driver's node" in attempt.message
    assert env.cluster.stop_calls == [sid(t)]


def test_a_driver_whose_node_left_ray_but_still_runs_keeps_its_attempt(tmp_path: Path
                                                                       ) -> None:
    """The node's raylet left the cluster, its driver did not: no second driver."""
    env, t = running_attempt(tmp_path)
    env.cluster.remove_node("w1")
    env.tick(T0 + 2)
    with driver_holds_the_task_lock(env, t):
        env.tick(T0 + 2 + DRIVER_NODE_GONE_S)
        env.tick(T0 + 3 + DRIVER_NODE_GONE_S)
        assert env.state(t) is S.RUNNING and env.cluster.stop_calls == []
    env.tick(T0 + 4 + DRIVER_NODE_GONE_S)
    assert env.state(t) is S.PENDING_RESOURCES
    assert env.store.attempts.get_attempt(t, 1).failure_kind == "CLUSTER_LOST"


def test_a_driver_node_back_within_the_grace_keeps_the_attempt(tmp_path: Path) -> None:
    env, t = running_attempt(tmp_path)
    node = env.cluster.nodes.pop("w1")  # missing from the alive nodes for a while
    env.tick(T0 + 2)
    env.cluster.nodes["w1"] = node
    env.tick(T0 + 2 + DRIVER_NODE_GONE_S)
    env.tick(T0 + 3 + DRIVER_NODE_GONE_S)
    assert env.state(t) is S.RUNNING and env.cluster.stop_calls == []


def test_cancel_queued_and_pending_at_once(env: Env) -> None:
    a, b, c = env.add(), env.add(), env.add()
    env.tick(T0)  # a submitted, b and c pending
    assert env.store.tasks.cancel(c, T0 + 1).kind == "canceled"
    assert env.state(c) is S.CANCELED
    assert env.store.tasks.cancel(a, T0 + 1).kind == "stopping"
    assert env.store.tasks.cancel(b, T0 + 1).kind == "canceled"
    env.tick(T0 + 2)
    assert env.state(a) is S.CANCELED
    assert env.cluster.stop_calls == [sid(a)]
    assert env.store.attempts.get_attempt(a).stop_requested
    assert env.store.tasks.cancel(a, T0 + 3).kind == "terminal"
    assert env.cluster.submit_calls == [sid(a)]  # nothing else was started


def test_cancel_running_stops_every_tick_until_ray_confirms(env: Env,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    t = env.add()
    env.tick(T0)
    env.cluster.start(sid(t), {"w1": 4})
    env.tick(T0 + 1)
    env.store.tasks.cancel(t, T0 + 2)
    calls: list[str] = []
    monkeypatch.setattr(env.cluster, "stop", calls.append)  # Ray is slow to stop
    env.tick(T0 + 3)
    env.tick(T0 + 4)
    assert calls == [sid(t), sid(t)] and env.state(t) is S.RUNNING
    env.cluster.finish(sid(t), RayStatus.STOPPED)
    env.tick(T0 + 5)
    view = env.store.tasks.get_task(t)
    assert view.state is S.CANCELED and view.error_summary.startswith("canceled by request")


def test_one_read_of_every_attempt_a_tick_after_the_stops_asked_for(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.cluster.add_node("w2", gpus=4, cpus=16)
    env.cluster.add_node("w3", gpus=4, cpus=16)
    a, b, c = env.add(), env.add(), env.add()
    env.tick(T0)
    for task, node in ((a, "w1"), (b, "w2"), (c, "w3")):
        env.cluster.start(sid(task), {node: 4})
    env.tick(T0 + 1)
    env.store.tasks.cancel(b, T0 + 2)
    del env.cluster.jobs[sid(c)]  # Ray forgot this one
    calls: list[object] = []
    stop, job_infos = env.cluster.stop, env.cluster.job_infos

    def logged_stop(submission_id: str) -> None:
        calls.append(("stop", submission_id))
        stop(submission_id)

    def logged_job_infos(submission_ids):
        calls.append(("job_infos", sorted(submission_ids)))
        return job_infos(submission_ids)

    monkeypatch.setattr(env.cluster, "stop", logged_stop)
    monkeypatch.setattr(env.cluster, "job_infos", logged_job_infos)
    report = env.tick(T0 + 3)
    assert calls[:2] == [("stop", sid(b)), ("job_infos", sorted(map(sid, (a, b, c))))]
    assert report.reconciled == 3
    assert env.state(a) is S.RUNNING
    assert env.state(b) is S.CANCELED, "the stop came first: its end was read this tick"
    assert env.store.attempts.get_attempt(c, 1).failure_kind == "CLUSTER_LOST"


def test_cancel_that_loses_the_race_to_success_reports_success(env: Env,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    t = env.add()
    env.tick(T0)
    env.cluster.start(sid(t), {"w1": 4})
    env.tick(T0 + 1)
    env.store.tasks.cancel(t, T0 + 2)
    monkeypatch.setattr(env.cluster, "stop", lambda _sid: None)  # the stop arrives too late
    env.cluster.finish(sid(t), RayStatus.SUCCEEDED)
    env.tick(T0 + 3)
    view = env.store.tasks.get_task(t)
    assert view.state is S.SUCCEEDED
    assert view.error_summary == "finished before the cancel took effect"


def test_a_cancel_that_lands_during_the_tick_is_a_cancel_not_a_failure(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # The tick read the running task before the user's cancel committed; the cancel's own
    # stop then ended the job, and the tick polled Ray after that: STOPPED, "no cancel".
    t = env.add()
    env.tick(T0)
    env.cluster.start(sid(t), {"w1": 4})
    env.tick(T0 + 1)
    job_info = env.cluster.job_info

    def cancel_lands_first(submission_id: str):
        if env.store.tasks.get_task(t).cancel_requested_at is None:
            env.store.tasks.cancel(t, T0 + 2, by="alice")  # commits, then the API stops the job
            env.cluster.stop(submission_id)
        return job_info(submission_id)

    monkeypatch.setattr(env.cluster, "job_info", cancel_lands_first)
    env.tick(T0 + 2)
    view = env.store.tasks.get_task(t)
    assert view.state is S.CANCELED, view.error_summary
    assert view.error_summary.startswith("canceled by request")


def test_cancel_while_submitting_completes_after_restart(env: Env) -> None:
    t = env.add()
    env.store.attempts.claim_for_submit(t, S.QUEUED, T0)  # crash right after the claim
    env.store.tasks.cancel(t, T0 + 1)
    env.reopen()
    env.sched.startup(T0 + 2)  # Ray never saw it: back to runnable -> cancel completes
    assert env.state(t) is S.CANCELED
    assert env.cluster.submit_calls == []


def test_restart_after_claim_before_submit_submits_once(env: Env) -> None:
    t = env.add()
    env.store.attempts.claim_for_submit(t, S.QUEUED, T0)  # claim committed, then kill -9
    env.reopen()
    env.sched.startup(T0 + 1)
    assert env.state(t) is S.PENDING_RESOURCES
    assert "never reached Ray" in env.store.tasks.get_task(t).pending_reason
    env.tick(T0 + 1)
    assert env.cluster.submit_calls == [sid(t)]
    assert env.state(t) is S.SUBMITTED


def test_restart_after_submit_before_record_does_not_resubmit(env: Env) -> None:
    t = env.add()
    claim = env.store.attempts.claim_for_submit(t, S.QUEUED, T0)
    from service.jobspec.submission import build_submit_request

    req = build_submit_request(JobSpec.from_dict(claim.spec), task_id=t, attempt_no=1,
                               user="alice", settings=env.settings)
    env.cluster.submit(req)  # Ray accepted it; the service died before mark_submitted
    env.reopen()
    env.sched.startup(T0 + 1)
    assert env.state(t) is S.SUBMITTED
    env.tick(T0 + 2)
    assert env.cluster.submit_calls == [sid(t)]  # exactly one submit, ever
    assert [e.payload.get("already_existed") for e in env.store.tasks.events(t)
            if e.event_type == "SUBMIT"] == [True]


def test_leftover_submitting_rows_are_read_with_one_call(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.jobspec.submission import build_submit_request

    reached, lost = env.add(), env.add()
    for t in (reached, lost):
        claim = env.store.attempts.claim_for_submit(t, S.QUEUED, T0)
        if t == reached:  # Ray accepted it; the service died before mark_submitted
            env.cluster.submit(build_submit_request(
                JobSpec.from_dict(claim.spec), task_id=t, attempt_no=1, user="alice",
                settings=env.settings))
    env.reopen()
    calls: list[list[str]] = []
    job_infos = env.cluster.job_infos

    def logged(submission_ids):
        calls.append(sorted(submission_ids))
        return job_infos(submission_ids)

    monkeypatch.setattr(env.cluster, "job_infos", logged)
    env.sched.startup(T0 + 1)
    assert calls == [sorted([sid(reached), sid(lost)])]
    assert env.state(reached) is S.SUBMITTED
    assert env.state(lost) is S.PENDING_RESOURCES
    assert "never reached Ray" in env.store.tasks.get_task(lost).pending_reason


def test_startup_with_ray_down_keeps_submitting_then_tick_resolves(env: Env) -> None:
    t = env.add()
    env.store.attempts.claim_for_submit(t, S.QUEUED, T0)
    env.reopen()
    env.cluster.unreachable = True
    env.sched.startup(T0 + 1)
    assert env.state(t) is S.SUBMITTING
    env.cluster.unreachable = False
    env.tick(T0 + 2)
    assert env.state(t) is S.SUBMITTED and env.cluster.submit_calls == [sid(t)]


def test_ray_unreachable_tasks_wait_and_nothing_is_lost(env: Env) -> None:
    running = env.add()
    env.tick(T0)
    env.cluster.start(sid(running), {"w1": 4})
    env.tick(T0 + 1)
    queued = [env.add(g=1) for _ in range(3)]
    env.cluster.unreachable = True
    report = env.tick(T0 + 2)
    assert report.unreachable == "fake cluster is unreachable"
    assert env.state(running) is S.RUNNING
    for q in queued:
        view = env.store.tasks.get_task(q)
        assert view.state is S.PENDING_RESOURCES
        assert view.pending_reason == "Ray cluster unreachable: fake cluster is unreachable"
    env.cluster.unreachable = False
    env.cluster.finish(sid(running))
    env.tick(T0 + 3)
    assert env.state(running) is S.SUCCEEDED
    assert all(env.state(q) is S.SUBMITTED for q in queued)


def test_unreachable_during_submit_keeps_the_attempt_number(env: Env,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    t = env.add()

    def down(req: object) -> None:
        raise ClusterUnavailable("connection refused")

    monkeypatch.setattr(env.cluster, "submit", down)
    report = env.tick(T0)
    assert report.unreachable == "connection refused" and report.submitted == 0
    assert (env.store.tasks.get_task(t).pending_reason
            == "Ray cluster unreachable: connection refused")
    monkeypatch.undo()
    env.tick(T0 + 1)
    assert env.cluster.submit_calls == [sid(t)]
    assert [a.attempt_no for a in env.store.attempts.list_attempts(t)] == [1]


def test_submit_rejected_fails_and_already_exists_counts_as_submitted(env: Env) -> None:
    a, b = env.add(g=1), env.add(g=1)
    env.cluster.reject_next = "runtime_env: bad pip spec"
    env.tick(T0)
    assert env.state(a) is S.FAILED and env.state(b) is S.SUBMITTED
    assert env.store.tasks.get_task(a).error_summary == (
        "USER_ERROR: Ray rejected the submission: runtime_env: bad pip spec")
    # A job with c's id already exists on Ray: that is the attempt, submitted.
    c = env.add(g=1)
    claim = env.store.attempts.claim_for_submit(c, S.QUEUED, T0)
    from service.jobspec.submission import build_submit_request

    env.cluster.submit(build_submit_request(JobSpec.from_dict(claim.spec), task_id=c,
                                            attempt_no=1, user=None, settings=env.settings))
    env.store.attempts.release_claim(c, 1, as_text("test: pretend the first answer was lost"), T0)
    env.tick(T0 + 1)
    assert env.state(c) is S.SUBMITTED
    assert env.cluster.submit_calls.count(sid(c)) == 2  # the second got "already exists"


def test_hung_attempt_is_stopped_and_retried(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, stuck_timeout_s=300.0, retry_mode="timer")
    t = env.add()
    env.tick(T0)
    env.cluster.hang(sid(t), since=T0 + 1)
    env.tick(T0 + 300)
    assert env.state(t) is S.RUNNING and env.cluster.stop_calls == []
    report = env.tick(T0 + 301)
    assert report.retried == 1 and env.cluster.stop_calls == [sid(t)]
    attempt = env.store.attempts.get_attempt(t, 1)
    assert attempt.failure_kind == "INSUFFICIENT_RESOURCES" and attempt.ray_status == "STOPPED"
    assert "placement groups unplaceable for 300s" in attempt.message
    assert env.state(t) is S.PENDING_RESOURCES


def test_max_running_tasks(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, max_running_tasks=1)
    a, b = env.add(g=1), env.add(g=1)
    env.tick(T0)
    assert env.state(a) is S.SUBMITTED and env.state(b) is S.PENDING_RESOURCES
    assert env.store.tasks.get_task(b).pending_reason == "max_running_tasks (1) reached"
    env.cluster.finish(sid(a))
    env.tick(T0 + 1)
    assert env.state(b) is S.SUBMITTED


def test_unchanged_waits_are_not_rewritten(env: Env) -> None:
    env.add()
    t = env.add()
    env.tick(T0)
    before = (env.store.tasks.get_task(t).updated_at, len(env.store.tasks.events(t)))
    env.tick(T0 + 1)
    env.tick(T0 + 2)
    assert (env.store.tasks.get_task(t).updated_at, len(env.store.tasks.events(t))) == before


def test_backfill_window_bounds_the_work(tmp_path: Path, store_url: str) -> None:
    """Without fair share the window bounds the whole scan (with it, each user's share
    of the window, at least ``store_tasks.MIN_PER_USER``: test_store)."""
    env = Env(tmp_path, store_url=store_url, fair_share=False)
    env.sched = Scheduler(env.store, env.cluster, env.settings, env.artifacts,
                          backfill_window=2)
    ids = [env.add(nnodes=2) for _ in range(3)]
    report = env.tick(T0)
    assert report.pending == 2
    assert [env.state(x) for x in ids] == [S.PENDING_RESOURCES, S.PENDING_RESOURCES, S.QUEUED]
    with pytest.raises(ValueError, match="backfill_window"):
        Scheduler(env.store, env.cluster, env.settings, env.artifacts, backfill_window=0)


class _StubScheduler:
    """Counts calls; the first tick raises, to show the loop survives it."""

    def __init__(self) -> None:
        self.startups = 0
        self.ticks = 0
        self.third_tick = threading.Event()

    def startup(self, now: float) -> TickReport:
        self.startups += 1
        return TickReport()

    def tick(self, now: float) -> TickReport:
        self.ticks += 1
        if self.ticks == 1:
            raise RuntimeError("boom")
        if self.ticks == 3:
            self.third_tick.set()
        return replace(TickReport(), duration_s=0.25)


def test_loop_survives_errors_and_wakes_early() -> None:
    stub = _StubScheduler()
    loop = SchedulerLoop(stub, tick_s=3600.0, clock=lambda: T0)  # type: ignore[arg-type]
    loop.start()
    try:
        for _ in range(3):  # with a one-hour tick only wake() can drive it
            loop.wake()
            if stub.third_tick.wait(0.2):
                break
        assert stub.third_tick.wait(10), "the loop did not tick after wake()"
    finally:
        loop.stop()
    assert not loop.alive
    assert stub.startups == 1
    assert loop.errors == 1 and loop.last_error is None  # the ticks after it succeeded
    assert loop.ticks >= 2 and loop.last_tick_duration_s == 0.25
    with pytest.raises(ValueError, match="tick_s"):
        SchedulerLoop(stub, tick_s=0)  # type: ignore[arg-type]


class _Fatal(BaseException):
    """Something a tick's ``except Exception`` does not catch (the thread dies)."""


def test_loop_reports_failed_when_its_thread_dies_and_not_when_stopped() -> None:
    class Dying:
        def startup(self, now: float) -> None:
            raise _Fatal("gone")

    loop = SchedulerLoop(Dying(), tick_s=3600.0)  # type: ignore[arg-type]
    assert not loop.failed  # not started yet
    previous_hook = threading.excepthook
    threading.excepthook = lambda args: None  # the death is expected: keep the output clean
    try:
        loop.start()
        loop._thread.join(10)  # type: ignore[union-attr]
    finally:
        threading.excepthook = previous_hook
    assert loop.failed and not loop.alive
    stopped = SchedulerLoop(_StubScheduler(), tick_s=3600.0)  # type: ignore[arg-type]
    stopped.start()
    stopped.stop()
    assert not stopped.alive and not stopped.failed


def test_pending_recheck_defers_the_next_look(tmp_path: Path, store_url: str) -> None:
    env = Env(tmp_path, store_url=store_url, pending_recheck_s=30.0)
    t = env.add(nnodes=2)  # cannot fit
    env.tick(T0)
    assert env.store.tasks.get_task(t).next_run_at == T0 + 30
    env.cluster.add_node("w2", gpus=4, cpus=16)
    env.tick(T0 + 29)
    assert env.state(t) is S.PENDING_RESOURCES
    env.tick(T0 + 30)
    assert env.state(t) is S.SUBMITTED


def test_a_tick_writes_a_bounded_number_of_reasons_the_head_of_the_queue_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_url: str) -> None:
    monkeypatch.setattr(applier, "REASON_WRITES", 3)
    env = Env(tmp_path, store_url=store_url)
    tasks = [env.add(nnodes=2) for _ in range(7)]  # none fits
    for i, want in enumerate((3, 6, 7)):
        report = env.tick(T0 + i)
        assert report.pending == 7
        assert [env.state(t) for t in tasks].count(S.PENDING_RESOURCES) == want
    assert [env.state(t) for t in tasks[:3]] == [S.PENDING_RESOURCES] * 3
    assert all(env.store.tasks.get_task(t).pending_reason for t in tasks)


# -- per-user limits ------------------------------------------------------------------------


def limited(tmp_path: Path, *, default: Limits | None = None, **sched: object) -> Env:
    users = UserSettings(limits=default or Limits(), per_user={"alice": Limits(max_gpus=4)})
    env = Env(tmp_path, users, **sched)
    env.cluster.add_node("w2", gpus=4, cpus=16)
    for name in ("alice", "bob"):
        env.store.users.create_user(name, Role.USER, T0)
    return env


def test_a_task_over_its_owners_gpu_limit_waits_and_blocks_nobody(tmp_path: Path) -> None:
    env = limited(tmp_path)
    a1 = env.add(g=4, user="alice")
    a2 = env.add(g=2, user="alice")  # alice's 4 GPUs are taken by a1
    b1 = env.add(g=4, user="bob")  # behind a2 in FIFO order: starts all the same
    env.tick(T0)
    assert [env.state(t) for t in (a1, a2, b1)] == [S.SUBMITTED, S.PENDING_RESOURCES,
                                                     S.SUBMITTED]
    assert env.store.tasks.get_task(a2).pending_reason == (
        "user alice uses 4 of 4 GPUs allowed; this task needs 2")
    env.cluster.start(sid(a1), {"w1": 4})
    env.cluster.finish(sid(a1))
    env.tick(T0 + 1)  # a1 ended: alice's GPUs are free again, and the cluster has room
    assert env.state(a1) is S.SUCCEEDED and env.state(a2) is S.SUBMITTED


def test_a_task_held_by_its_owners_limit_never_holds_the_starvation_guard(tmp_path: Path
                                                                          ) -> None:
    env = limited(tmp_path, starvation_guard_s=10.0)
    env.cluster.occupy("w2", GPU=2, CPU=6)  # someone outside Argus: w2 has 2 GPUs free
    a1 = env.add(g=4, user="alice")
    a2 = env.add(g=4, user="alice")  # over alice's limit, and no room for it either
    env.tick(T0)
    b1 = env.add(g=2, user="bob", now=T0 + 500)  # a2 has been runnable for 500 s
    env.tick(T0 + 500)
    # Held by its owner's limit, a2 is not what the guard protects: bob's task starts.
    assert env.state(a1) is S.SUBMITTED and env.state(b1) is S.SUBMITTED
    assert env.state(a2) is S.PENDING_RESOURCES
    assert env.store.tasks.get_task(a2).pending_reason.startswith("user alice uses 4 of 4 GPUs")


def test_gang_bigger_than_the_owners_limit_says_it_cannot_start(tmp_path: Path) -> None:
    env = limited(tmp_path)
    big = env.add(nnodes=2, g=4, user="alice")
    env.tick(T0)
    assert env.store.tasks.get_task(big).pending_reason == (
        "needs 8 GPUs, more than user alice's limit of 4 GPUs: it cannot start unless the "
        "limit is raised")


def test_running_tasks_limit_per_user(tmp_path: Path) -> None:
    env = limited(tmp_path, default=Limits(max_running_tasks=1))
    b1, b2 = env.add(g=1, user="bob"), env.add(g=1, user="bob")
    a1 = env.add(g=1, user="alice")
    env.tick(T0)
    assert [env.state(t) for t in (b1, b2, a1)] == [S.SUBMITTED, S.PENDING_RESOURCES,
                                                     S.SUBMITTED]
    assert env.store.tasks.get_task(b2).pending_reason == "user bob runs 1 of 1 tasks allowed"


def test_a_disabled_users_queued_tasks_wait_until_enabled(tmp_path: Path) -> None:
    env = limited(tmp_path)
    running = env.add(g=1, user="bob")
    env.tick(T0)
    env.cluster.start(sid(running), {"w1": 1})
    env.tick(T0 + 1)
    queued = env.add(g=1, user="bob", now=T0 + 2)
    env.store.users.set_user_enabled("bob", False, T0 + 2)
    env.tick(T0 + 2)
    assert env.state(running) is S.RUNNING  # runs to its end
    assert env.state(queued) is S.PENDING_RESOURCES
    assert env.store.tasks.get_task(queued).pending_reason.startswith("user bob is disabled")
    env.cluster.finish(sid(running))
    env.tick(T0 + 3)
    assert env.state(running) is S.SUCCEEDED and env.state(queued) is S.PENDING_RESOURCES
    env.store.users.set_user_enabled("bob", True, T0 + 4)
    env.tick(T0 + 4)
    assert env.state(queued) is S.SUBMITTED


def test_limits_count_what_this_tick_submitted(tmp_path: Path) -> None:
    env = limited(tmp_path)
    first = env.add(g=2, user="alice")
    second = env.add(g=2, user="alice")
    third = env.add(g=1, user="alice")
    env.tick(T0)  # 2 + 2 = alice's 4 in one tick; the third waits for her, not the cluster
    assert [env.state(t) for t in (first, second, third)] == [
        S.SUBMITTED, S.SUBMITTED, S.PENDING_RESOURCES]
    assert env.store.tasks.get_task(third).pending_reason == (
        "user alice uses 4 of 4 GPUs allowed; this task needs 1")
