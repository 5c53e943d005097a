"""The scheduling policy through real ticks: priority order, fair share, retry when the
room is back (keeping the task's place), the guard inside that order, preemption, and
time limits (stopped past them; backfill onto kept nodes by them).

FakeCluster at the Ray boundary, injected clock, no sleeps. Each ordering rule has a
table or a scenario of its own; the pure parts (fairshare, preemption, retry) are tested
by table in their own files.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scheduler_env import T0, VERL_GPU_ERROR, Env, driver_holds_the_task_lock, sid

from service.config import UserSettings
from service.domain.newtask import NewTask
from service.domain.states import RayStatus, TaskState
from service.jobspec.model import JobSpec

S = TaskState


class PolicyEnv(Env):
    def add(self, nnodes: int = 1, g: int = 4, now: float = T0, user: str = "alice",
            priority: int = 0, save_freq: int | None = None,
            max_runtime_s: int | None = None, max_attempts: int | None = None) -> str:
        self.n += 1
        task_id = f"{user}-ppo-20251223-143201-{self.n:04x}"
        spec = JobSpec(workload="ppo", code_path=f"{self.root}/verl", model_id="org/model",
                       train_file=f"{self.root}/train.parquet",
                       val_file=f"{self.root}/val.parquet", nnodes=nnodes,
                       n_gpus_per_node=g, save_freq=save_freq, priority=priority,
                       max_attempts=max_attempts)
        self.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="workload: ppo\n",
                                             spec=spec.to_dict(), nnodes=nnodes, n_gpus_per_node=g,
                                             user=user, created_at=now, priority=priority,
                                             max_runtime_s=max_runtime_s), task_id=task_id)
        return task_id

    def states(self, *task_ids: str) -> list[TaskState]:
        return [self.state(t) for t in task_ids]

    def reason(self, task_id: str) -> str:
        return self.store.tasks.get_task(task_id).pending_reason or ""

    def events(self, task_id: str, kind: str) -> list[dict]:
        return [e.payload for e in self.store.tasks.events(task_id) if e.event_type == kind]


@pytest.fixture
def make(tmp_path: Path):
    made: list[PolicyEnv] = []

    def _make(users: UserSettings | None = None, **sched: object) -> PolicyEnv:
        env = PolicyEnv(tmp_path / f"e{len(made)}", users, **sched)
        made.append(env)
        return env

    yield _make
    for env in made:
        env.store.close()


# -- priority ---------------------------------------------------------------------------

@pytest.mark.parametrize(("priorities", "admitted"), [
    ((0, 0, 0), [0]),  # FIFO among equals
    ((0, 5, 5), [1]),  # higher first, FIFO among the higher
    ((0, 5, 9), [2]),
    ((-3, -1, -2), [1]),  # users may step back below the default
])
def test_higher_priority_is_admitted_first(make, priorities, admitted) -> None:
    env = make(fair_share=False)
    tasks = [env.add(priority=p, now=T0 + i) for i, p in enumerate(priorities)]
    env.tick(T0 + 10)
    started = [i for i, t in enumerate(tasks) if env.state(t) is S.SUBMITTED]
    assert started == admitted


def test_queue_positions_follow_priority_then_fifo_and_reasons_say_why(make) -> None:
    env = make(fair_share=False)
    env.cluster.occupy("w1", GPU=4, CPU=12)  # nothing fits: everyone waits
    low, high, mid = env.add(priority=0), env.add(priority=7), env.add(priority=3)
    env.tick(T0)
    positions = {t: env.store.tasks.get_task(t).queue_position for t in (low, high, mid)}
    assert positions == {high: 1, mid: 2, low: 3}
    assert [t.task_id for t in env.store.tasks.queue()[0]] == [high, mid, low]
    assert env.reason(high).startswith("needs 1x4 GPUs")
    assert env.reason(low).endswith("; after tasks of higher priority")


def test_a_priority_change_reorders_the_queue(make) -> None:
    env = make(fair_share=False)
    env.cluster.occupy("w1", GPU=4, CPU=12)
    a, b = env.add(), env.add()
    env.tick(T0)
    env.store.tasks.set_priority(b, 10, T0 + 1, by="admin")
    assert env.store.tasks.get_task(b).queue_position == 1
    env.cluster.release("w1", GPU=4, CPU=12)
    env.tick(T0 + 2)
    assert env.states(a, b) == [S.PENDING_RESOURCES, S.SUBMITTED]
    assert env.events(b, "PRIORITY_CHANGED") == [{"from": 0, "to": 10, "by": "admin"}]


def test_backfill_and_the_guard_work_inside_the_priority_order(make) -> None:
    env = make(fair_share=False, starvation_guard_s=100.0, reservations=0)
    env.cluster.occupy("w1", GPU=2, CPU=6)
    big_high = env.add(g=4, priority=5)  # fits an idle w1, not now
    small_low = env.add(g=1, priority=0)
    env.tick(T0)  # backfill: the low small task starts while the high gang waits
    assert env.states(big_high, small_low) == [S.PENDING_RESOURCES, S.SUBMITTED]
    late_high = env.add(g=1, priority=4, now=T0 + 100)
    env.tick(T0 + 100)  # big_high is past the guard: its node is kept, late_high waits
    assert env.state(late_high) is S.PENDING_RESOURCES
    assert env.reason(late_high).startswith(f"waiting behind {big_high} (priority 5)")


# -- fair share ---------------------------------------------------------------------------

@pytest.mark.parametrize(("fair", "weights", "expected"), [
    (False, {}, {"alice": 4, "bob": 0}),  # FIFO: alice submitted first
    (True, {}, {"alice": 2, "bob": 2}),  # DRF: equal shares
    (True, {"alice": 3.0}, {"alice": 3, "bob": 1}),  # weighted
    (True, {"bob": 3.0}, {"alice": 1, "bob": 3}),
])
def test_fair_share_interleaves_users_of_one_priority(make, fair, weights, expected) -> None:
    env = make(UserSettings(weights=weights), fair_share=fair)
    tasks = {u: [env.add(g=1, user=u, now=T0 + i + (10 if u == "bob" else 0))
                 for i in range(4)] for u in ("alice", "bob")}
    env.tick(T0 + 20)
    got = {u: sum(env.state(t) is S.SUBMITTED for t in ts) for u, ts in tasks.items()}
    assert got == expected


def test_fair_share_counts_what_users_already_run(make) -> None:
    env = make(fair_share=True)
    running = env.add(g=2, user="alice")
    env.tick(T0)
    env.cluster.start(sid(running), {"w1": 2})
    alice_next = env.add(g=2, user="alice", now=T0 + 1)
    bob = env.add(g=2, user="bob", now=T0 + 2)
    env.tick(T0 + 3)  # 2 GPUs left: bob (share 0) goes before alice (share 0.5)
    assert env.states(alice_next, bob) == [S.PENDING_RESOURCES, S.SUBMITTED]
    assert env.reason(alice_next).endswith("; after users bob (smaller fair share)")
    shares = env.sched.last_shares
    assert shares["alice"].share == pytest.approx(0.5) and shares["bob"].share == 0.5


def test_fair_share_never_overrides_priority(make) -> None:
    env = make(fair_share=True)
    hog = env.add(g=2, user="alice")
    env.tick(T0)
    env.cluster.start(sid(hog), {"w1": 2})
    alice_high = env.add(g=2, user="alice", priority=1, now=T0 + 1)
    bob = env.add(g=2, user="bob", now=T0 + 2)
    env.tick(T0 + 3)
    assert env.states(alice_high, bob) == [S.SUBMITTED, S.PENDING_RESOURCES]


def test_fair_share_sees_every_users_head_beyond_the_backfill_window(tmp_path: Path) -> None:
    env = PolicyEnv(tmp_path, fair_share=True)
    env.sched.backfill_window = 3
    flood = [env.add(g=1, user="alice", now=T0 + i) for i in range(10)]
    bob = env.add(g=1, user="bob", now=T0 + 20)
    env.tick(T0 + 30)
    assert env.state(bob) is S.SUBMITTED
    assert sum(env.state(t) is S.SUBMITTED for t in flood) == 3  # the other 3 GPUs
    env.store.close()


def test_decayed_usage_remembers_who_ran_recently(make) -> None:
    env = make(fair_share=True, fair_share_half_life_s=3600.0)
    early = env.add(g=4, user="alice")
    env.tick(T0)
    env.cluster.start(sid(early), {"w1": 4})
    env.tick(T0 + 1)
    env.cluster.clock = T0 + 1800
    env.cluster.finish(sid(early))
    env.tick(T0 + 1800)  # alice used 4 GPUs for half an hour; now nobody runs anything
    alice, bob = env.add(g=4, user="alice", now=T0 + 1801), env.add(g=4, user="bob",
                                                                      now=T0 + 1802)
    env.tick(T0 + 1803)  # instantaneous shares are both 0: decayed usage picks bob
    assert env.states(alice, bob) == [S.PENDING_RESOURCES, S.SUBMITTED]
    assert env.sched.last_shares["alice"].charge > 0.5


# -- retry when the room is back ------------------------------------------------------------

def _fail_fast(env: PolicyEnv, task_id: str, n: int = 1) -> None:
    env.cluster.start(sid(task_id, n))
    env.cluster.finish(sid(task_id, n), RayStatus.FAILED, message=VERL_GPU_ERROR)


def test_a_retry_starts_as_soon_as_the_gang_fits_after_the_short_backoff(make) -> None:
    env = make(retry_min_backoff_s=5.0)
    t = env.add()
    env.tick(T0)
    env.cluster.occupy("w1", GPU=2, CPU=6)  # someone grabbed GPUs between check and verl
    _fail_fast(env, t)
    env.tick(T0 + 1)
    assert env.state(t) is S.PENDING_RESOURCES
    env.tick(T0 + 30)  # backoff over, but the GPUs are still taken
    assert env.state(t) is S.PENDING_RESOURCES and env.reason(t).startswith("needs 1x4")
    env.cluster.release("w1", GPU=2, CPU=6)
    env.tick(T0 + 31)  # the first tick that sees the room submits attempt 2
    assert env.state(t) is S.SUBMITTED
    assert env.cluster.submit_calls[-1] == sid(t, 2)


@pytest.mark.parametrize("ran_s", [30.0, 5000.0])
def test_a_retry_keeps_the_wait_before_its_attempt_not_the_time_it_ran(make, ran_s) -> None:
    """The guard, the plan's reservations past it and the preemption grace read the wait
    from ``runnable_since``: a fail-fast retry had waited its turn already (counted from the
    failure, it waited the whole queue again), and an attempt that ran for hours was no
    wait."""
    env = make(retry_min_backoff_s=5.0)
    t = env.add(now=T0)
    env.tick(T0 + 1000)  # claimed after waiting 1000 s
    assert env.state(t) is S.SUBMITTED
    env.cluster.start(sid(t, 1))
    env.cluster.finish(sid(t, 1), RayStatus.FAILED, message=VERL_GPU_ERROR)
    failed_at = T0 + 1000 + ran_s
    env.tick(failed_at)
    assert env.state(t) is S.PENDING_RESOURCES
    (row,) = env.store.tasks.runnable(failed_at, 10)
    assert row.runnable_since - T0 == ran_s  # what it waited, 1000 s, before failed_at


def test_a_task_in_backoff_keeps_its_room_and_its_place(make) -> None:
    env = make(retry_min_backoff_s=5.0)
    first = env.add()
    env.tick(T0)
    _fail_fast(env, first)
    later = env.add(now=T0 + 0.5)
    env.tick(T0 + 1)  # first is in backoff with room to start: later must not take it
    assert env.states(first, later) == [S.PENDING_RESOURCES, S.PENDING_RESOURCES]
    assert env.reason(first).startswith("retry backoff: attempt 2 not before ")
    env.tick(T0 + 6)
    assert env.states(first, later) == [S.SUBMITTED, S.PENDING_RESOURCES]


@pytest.mark.parametrize(("failures", "expected_waits"), [
    (1, [5.0]), (3, [5.0, 10.0, 20.0]), (6, [5.0, 10.0, 20.0, 40.0, 40.0, 40.0]),
])
def test_the_backoff_grows_with_consecutive_resource_failures(make, failures,
                                                               expected_waits) -> None:
    env = make(retry_min_backoff_s=5.0, retry_max_backoff_s=40.0)
    t = env.add()
    now = T0
    env.tick(now)
    waits = []
    for n in range(1, failures + 1):
        _fail_fast(env, t, n)
        now += 1
        env.tick(now)
        (event,) = [e for e in env.events(t, "RETRY_SCHEDULED") if e["failed_attempt"] == n]
        waits.append(event["next_run_at"] - now)
        now = event["next_run_at"]
        env.tick(now)
        assert env.cluster.submit_calls[-1] == sid(t, n + 1)
    assert waits == expected_waits


# -- preemption ---------------------------------------------------------------------------

def _running(env: PolicyEnv, task_id: str, now: float, node: str = "w1", g: int = 4) -> None:
    env.tick(now)
    env.cluster.start(sid(task_id), {node: g})
    env.tick(now + 1)
    assert env.state(task_id) is S.RUNNING


def test_preemption_stops_a_lower_priority_task_that_resumes_later(make) -> None:
    env = make(preemption=True, preemption_grace_s=60.0, max_attempts=1)
    low = env.add(priority=0, save_freq=10)
    _running(env, low, T0)
    high = env.add(priority=10, now=T0 + 10)
    env.tick(T0 + 10)
    env.tick(T0 + 69)  # not past the grace period yet
    assert env.cluster.stop_calls == [] and env.state(low) is S.RUNNING
    env.tick(T0 + 70)
    assert env.cluster.stop_calls == [sid(low)]
    assert env.reason(high).startswith(f"preempting {low} (priority 0) to make room")
    assert env.events(low, "PREEMPTION_REQUESTED") == [
        {"attempt_no": 1, "for": high, "priority": 10}]
    assert env.events(high, "PREEMPTING") == [{"victims": [low], "priority": 10}]
    env.tick(T0 + 71)  # the stop ended the attempt: PREEMPTED, and high starts at once
    attempt = env.store.attempts.get_attempt(low, 1)
    assert (attempt.failure_kind, attempt.preempted_for) == ("PREEMPTED", high)
    assert env.states(low, high) == [S.PENDING_RESOURCES, S.SUBMITTED]
    env.cluster.start(sid(high), {"w1": 4})
    env.cluster.finish(sid(high))
    env.tick(T0 + 80)  # max_attempts=1 does not count the preempted attempt
    assert env.state(low) is S.SUBMITTED and env.cluster.submit_calls[-1] == sid(low, 2)


def test_a_task_s_own_max_attempts_does_not_count_a_preemption(make) -> None:
    env = make(preemption=True, preemption_grace_s=60.0, max_attempts=5)
    low = env.add(priority=0, save_freq=10, max_attempts=1)
    _running(env, low, T0)
    high = env.add(priority=10, now=T0 + 10)
    env.tick(T0 + 10)
    env.tick(T0 + 70)
    env.tick(T0 + 71)  # preempted: back to the queue, not counted
    assert env.store.attempts.get_attempt(low, 1).failure_kind == "PREEMPTED"
    env.cluster.start(sid(high), {"w1": 4})
    env.cluster.finish(sid(high))
    env.tick(T0 + 80)
    assert env.state(low) is S.SUBMITTED and env.cluster.submit_calls[-1] == sid(low, 2)


def test_a_preemption_reaches_an_orphaned_driver_through_its_watcher(make) -> None:
    """Ray failed the victim's job for a lost supervisor while its driver ran on and kept
    its placement groups (as on real Ray, where they stay mapped to the submission): the
    preemption asks the driver's watcher, and the preemptor starts once it is gone."""
    env = make(preemption=True, preemption_grace_s=0.0)
    low = env.add(priority=0, save_freq=10)
    _running(env, low, T0)
    stop = env.artifacts.task_lock(low, "alice").with_name(f"{low}.lock.stop")
    with driver_holds_the_task_lock(env, low):
        job = env.cluster.jobs[sid(low)]  # Ray's word only: the driver keeps its GPUs
        job.status, job.message = RayStatus.FAILED, "Unexpected error occurred: CANCELLED"
        env.tick(T0 + 5)
        high = env.add(priority=10, now=T0 + 10)
        env.tick(T0 + 10)
        env.tick(T0 + 11)
        assert stop.read_text() == f"preempted for {high}\n"
        assert env.states(low, high) == [S.RUNNING, S.PENDING_RESOURCES]
        env.cluster.finish(sid(low), RayStatus.FAILED, message=job.message)  # stopped
    env.tick(T0 + 12)
    attempt = env.store.attempts.get_attempt(low, 1)
    assert (attempt.failure_kind, attempt.preempted_for) == ("PREEMPTED", high)
    env.tick(T0 + 13)
    assert env.state(high) is S.SUBMITTED


@pytest.mark.parametrize(("victim", "config", "preempted"), [
    ({"priority": 0, "save_freq": 5}, {}, True),
    ({"priority": 0, "save_freq": None}, {}, False),  # no checkpoint: never
    ({"priority": 0, "save_freq": -1}, {}, False),
    ({"priority": 0, "save_freq": None}, {"preempt_without_checkpoint": True}, True),
    ({"priority": 10, "save_freq": 5}, {}, False),  # equal priority: never
    ({"priority": 11, "save_freq": 5}, {}, False),
    ({"priority": 0, "save_freq": 5}, {"preemption": False}, False),
])
def test_who_may_be_preempted(make, victim, config, preempted) -> None:
    env = make(**{"preemption": True, "preemption_grace_s": 0.0, **config})
    low = env.add(**victim)
    _running(env, low, T0)
    env.add(priority=10, now=T0 + 5)
    env.tick(T0 + 5)
    assert (env.cluster.stop_calls == [sid(low)]) is preempted


def test_the_fewest_and_lowest_victims_are_stopped_and_the_queue_behind_waits(make) -> None:
    env = make(preemption=True, preemption_grace_s=0.0)
    env.cluster.add_node("w2", gpus=4, cpus=16)
    a = env.add(g=2, priority=1, save_freq=1)  # w1
    b = env.add(g=2, priority=2, save_freq=1)  # w1
    c = env.add(g=4, priority=0, save_freq=1)  # w2: lowest, and alone frees a node
    for t, node, g, now in ((a, "w1", 2, T0), (b, "w1", 2, T0 + 2), (c, "w2", 4, T0 + 4)):
        env.tick(now)
        env.cluster.start(sid(t), {node: g})
    env.tick(T0 + 6)
    real_stop = env.cluster.stop
    stops: list[str] = []
    env.cluster.stop = stops.append  # a slow stop: the job keeps running for now
    high = env.add(g=4, priority=9, now=T0 + 7)
    env.tick(T0 + 7)
    assert stops == [sid(c)] and env.states(a, b, c) == [S.RUNNING] * 3
    env.cluster.add_node("w3", gpus=1, cpus=8)  # too small for high's gang
    beside = env.add(g=1, priority=9, now=T0 + 8)
    behind = env.add(g=4, priority=9, now=T0 + 8)
    env.tick(T0 + 8)  # backfill where high cannot run; the stop is sent again
    assert env.states(beside, behind) == [S.SUBMITTED, S.PENDING_RESOURCES]
    assert stops == [sid(c), sid(c)]
    env.cluster.stop = real_stop
    real_stop(sid(c))
    env.tick(T0 + 9)  # c ended: its node goes to high, not to the task behind it
    assert env.states(c, high, behind) == [S.PENDING_RESOURCES, S.SUBMITTED,
                                           S.PENDING_RESOURCES]
    assert env.events(high, "PREEMPTING") == [{"victims": [c], "priority": 9}]  # once


def test_no_victims_when_stopping_all_would_not_make_room(make) -> None:
    env = make(preemption=True, preemption_grace_s=0.0)
    low = env.add(g=2, priority=0, save_freq=1)
    _running(env, low, T0, g=2)
    env.cluster.occupy("w1", GPU=2, CPU=6)  # the rest is someone else's
    high = env.add(g=4, priority=5, now=T0 + 5)
    env.add(g=4, priority=5, now=T0 + 6)
    env.tick(T0 + 10)
    assert env.cluster.stop_calls == []
    assert env.state(low) is S.RUNNING and env.state(high) is S.PENDING_RESOURCES


def test_preemptions_are_counted_in_metrics(make) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from service.web.metrics import MeteredScheduler, ServiceMetrics

    env = make(preemption=True, preemption_grace_s=0.0)
    metrics = ServiceMetrics(env.store.tasks.counts_by_state)
    env.sched = MeteredScheduler(env.sched, metrics)
    low = env.add(priority=0, save_freq=1)
    _running(env, low, T0)
    env.add(priority=3, now=T0 + 5)
    env.tick(T0 + 5)
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    assert families["argus_preemptions"].samples[0].value == 1


def test_a_preemption_is_recorded_before_ray_is_asked_and_survives_a_restart(make) -> None:
    from service.cluster.boundary import ClusterUnavailable

    env = make(preemption=True, preemption_grace_s=0.0)
    low = env.add(priority=0, save_freq=1)
    _running(env, low, T0)
    high = env.add(priority=3, now=T0 + 5)
    real_stop = env.cluster.stop

    def unreachable(submission_id: str) -> None:
        raise ClusterUnavailable("timeout")

    env.cluster.stop = unreachable
    env.tick(T0 + 5)  # the stop does not reach Ray: the mark is kept all the same
    assert env.store.attempts.get_attempt(low, 1).preempted_for == high
    assert env.state(low) is S.RUNNING
    env.cluster.stop = real_stop
    env.reopen()  # the service restarts: reconcile sends the stop and ends the attempt
    env.tick(T0 + 6)
    assert env.store.attempts.get_attempt(low, 1).failure_kind == "PREEMPTED"
    assert env.states(low, high) == [S.PENDING_RESOURCES, S.SUBMITTED]


def test_the_guard_goes_to_the_longest_wait_whatever_fair_share_says(make) -> None:
    env = make(fair_share=True, starvation_guard_s=300.0, reservations=0)
    env.cluster.add_node("w2", gpus=4, cpus=16)
    carol_running = env.add(g=2, user="carol")
    env.tick(T0)
    env.cluster.start(sid(carol_running), {"w1": 2})
    env.cluster.occupy("w2", GPU=1, CPU=3)
    carol_big = env.add(g=4, user="carol", now=T0 + 1)
    alice_big = env.add(g=4, user="alice", now=T0 + 50)
    env.tick(T0 + 60)  # alice (share 0) comes before carol (share 0.25) in the order
    bob = env.add(g=3, user="bob", now=T0 + 400)
    env.tick(T0 + 400)  # both past the guard: carol's waited longest, she holds it
    assert env.states(carol_big, alice_big, bob) == [S.PENDING_RESOURCES] * 3
    assert env.reason(bob).startswith(f"waiting behind {carol_big} (priority 0), runnable "
                                      "for over 300s: nodes 10.0.0.3 are kept for it")
    env.cluster.release("w2", GPU=1, CPU=3)
    env.tick(T0 + 401)  # w2 drained: carol's gang starts there, before alice's
    assert env.states(carol_big, alice_big) == [S.SUBMITTED, S.PENDING_RESOURCES]


# -- time limits ----------------------------------------------------------------------------

def test_an_attempt_past_its_limit_is_stopped_and_fails_time_limit(make) -> None:
    env = make()  # retryable failures are retried without end: TIME_LIMIT is not one
    t = env.add(max_runtime_s=100)
    env.tick(T0)
    env.cluster.start(sid(t), {"w1": 4})
    env.tick(T0 + 1)
    env.tick(T0 + 99)
    assert env.cluster.stop_calls == [] and env.state(t) is S.RUNNING
    env.tick(T0 + 100)  # the limit is reached: stopped
    assert env.cluster.stop_calls == [sid(t)]
    assert env.events(t, "STOP_REQUESTED") == [{"attempt_no": 1, "reason": "time_limit"}]
    env.tick(T0 + 101)  # Ray says it ended
    task = env.store.tasks.get_task(t)
    assert task.state is S.FAILED and task.latest_attempt.failure_kind == "TIME_LIMIT"
    assert task.error_summary == "TIME_LIMIT: ran past its max_runtime_s (100 s): stopped"
    env.tick(T0 + 200)
    assert env.cluster.submit_calls == [sid(t)]  # never retried


def test_an_orphaned_driver_past_its_limit_is_stopped_by_its_watcher(make) -> None:
    """Ray failed the job (its supervisor lost) while the driver ran on: Ray's stop cannot
    reach it, so the limit asks the driver's watcher, and the attempt ends TIME_LIMIT when
    the driver is gone."""
    env = make()
    t = env.add(max_runtime_s=100)
    env.tick(T0)
    env.cluster.start(sid(t), {"w1": 4})
    env.tick(T0 + 1)
    lock = env.artifacts.task_lock(t, "alice")
    with driver_holds_the_task_lock(env, t):
        env.cluster.finish(sid(t), RayStatus.FAILED,
                           message="Unexpected error occurred: RPC error: CANCELLED")
        env.tick(T0 + 50)
        assert not lock.with_name(f"{t}.lock.stop").exists()
        env.tick(T0 + 100)
        assert lock.with_name(f"{t}.lock.stop").read_text() == "time limit\n"
        assert env.events(t, "STOP_REQUESTED") == [{"attempt_no": 1, "reason": "time_limit"}]
        env.tick(T0 + 105)
        assert env.state(t) is S.RUNNING
    env.tick(T0 + 110)
    task = env.store.tasks.get_task(t)
    assert task.state is S.FAILED and task.latest_attempt.failure_kind == "TIME_LIMIT"
    assert env.cluster.submit_calls == [sid(t)]


def test_a_limit_never_touches_a_run_that_ends_in_time_or_fails_on_its_own(make) -> None:
    env = make(max_attempts=1)
    done, failed, unlimited = env.add(g=1, max_runtime_s=100), \
        env.add(g=1, max_runtime_s=100), env.add(g=1)
    env.tick(T0)
    for t in (done, failed, unlimited):
        env.cluster.start(sid(t), {"w1": 1})
    env.tick(T0 + 1)
    env.cluster.clock = T0 + 50
    env.cluster.finish(sid(done))
    env.cluster.finish(sid(failed), RayStatus.FAILED, message="boom", log="RuntimeError: boom\n")
    env.tick(T0 + 150)  # both ended before their limit; seen after it
    assert env.states(done, failed, unlimited) == [S.SUCCEEDED, S.FAILED, S.RUNNING]
    assert env.store.attempts.get_attempt(failed, 1).failure_kind == "RUNTIME_ERROR"
    env.tick(T0 + 10**6)
    assert env.cluster.stop_calls == [] and env.state(unlimited) is S.RUNNING


# Two 4-GPU nodes, each half used by an attempt with a limit; a 2x4 gang past the guard
# keeps both (shadow: the later of the two deadlines, T0 + 1000). A 1x2 task may run
# there only if its limit surely ends by then.
@pytest.mark.parametrize(("second_limit", "outside", "cand_limit", "starts"), [
    (1000, False, 800, True),  # T0+101 + 800 + 30 slack <= T0+1000
    (1000, False, 869, True),  # exactly at the shadow
    (1000, False, 870, False),  # one second past it
    (1000, False, None, False),  # no limit: nobody can tell when it ends
    (None, False, 10, False),  # an attempt there has no limit: no shadow at all
    (1000, True, 10, False),  # GPUs used there by another submitter: no shadow
    (500, False, 369, True),  # the shadow is the later deadline (w1's, T0+1000)...
    (500, False, 870, False),  # ...and not further
])
def test_a_task_whose_limit_ends_before_the_kept_nodes_drain_may_run_there(
        make, second_limit, outside, cand_limit, starts) -> None:
    env = make(starvation_guard_s=100.0, fair_share=False, reservations=0)
    env.cluster.add_node("w2", gpus=4, cpus=16)
    first = env.add(g=2, max_runtime_s=1000)
    second = env.add(g=2, max_runtime_s=second_limit)
    env.tick(T0)
    env.cluster.start(sid(first), {"w1": 2})
    env.cluster.start(sid(second), {"w2": 1} if outside else {"w2": 2})
    if outside:
        env.cluster.occupy("w2", GPU=1, CPU=3)
    gang = env.add(nnodes=2, g=4, now=T0)
    env.tick(T0 + 1)
    small = env.add(g=2, now=T0 + 101, max_runtime_s=cand_limit)
    env.tick(T0 + 101)  # the gang is past the guard: w1 and w2 are kept for it
    assert env.state(gang) is S.PENDING_RESOURCES
    assert (env.state(small) is S.SUBMITTED) is starts
    if not starts:
        assert env.reason(small).startswith(f"waiting behind {gang}")


def test_the_guard_says_until_when_its_nodes_are_kept(make) -> None:
    env = make(starvation_guard_s=100.0, fair_share=False, reservations=0)
    running = env.add(g=2, max_runtime_s=1000)
    env.tick(T0)
    env.cluster.start(sid(running), {"w1": 2})
    gang = env.add(g=4, now=T0)
    late = env.add(g=2, now=T0 + 101)
    env.tick(T0 + 101)
    assert env.reason(late) == (
        f"waiting behind {gang} (priority 0), runnable for over 100s: nodes 10.0.0.2 are "
        "kept for it (starvation guard); they are free by 2025-12-23T14:43:20.000Z at the "
        "latest: a task whose max_runtime_s ends by then may run there meanwhile")


def test_every_waiting_task_gets_a_start_within_a_few_ticks(
        make, monkeypatch: pytest.MonkeyPatch) -> None:
    # past the tick's own estimates (ESTIMATED), the deep ones come a few a tick: a queue
    # of 7 behind one running hour-long task, 2 estimated a tick and 2 more deep ones
    from service.scheduling import estimates
    from service.scheduling.deep import DeepEstimates

    monkeypatch.setattr(estimates, "ESTIMATED", 2)
    env = make(reservations=1)
    env.sched.applier.deep = DeepEstimates(per_tick=2)
    first = env.add(max_runtime_s=3600)
    env.tick(T0)
    env.cluster.start(sid(first), {"w1": 4})
    queue = [env.add(max_runtime_s=3600, now=T0 + i) for i in range(1, 8)]
    env.tick(T0 + 10)
    assert set(env.sched.last_estimates) == set(queue[:4])  # 2 of the tick, 2 deep
    env.tick(T0 + 11)
    env.tick(T0 + 12)
    shown = env.sched.last_estimates
    assert set(shown) == set(queue)
    turn = 3600 + 30  # a run and its stop's slack
    assert [shown[t].start for t in queue] == [T0 + k * turn for k in range(1, 8)]
    env.cluster.finish(sid(first))
    env.tick(T0 + 13)  # queue[0] starts now, not at its planned start: no estimate
    shown = env.sched.last_estimates
    assert env.state(queue[0]) is S.SUBMITTED and queue[0] not in shown
    assert shown[queue[1]].start == T0 + 13 + turn  # the tick's own: from now on
