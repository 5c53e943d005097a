"""The driver-log follower against FakeCluster and a real store (injected times, no sleeps)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from service.cluster.fake import FakeCluster
from service.config import Settings
from service.domain.newtask import NewTask
from service.domain.progress import Progress
from service.domain.states import RayStatus, TaskState
from service.domain.writes import ProgressUpdate
from service.engine.artifacts import Artifacts
from service.engine.progress_follower import FollowerLoop, LogFollower
from service.engine.scheduler import Scheduler
from service.jobspec.model import JobSpec
from service.store.writer import StaleProgress, Store

T0 = 1_766_500_000.0


class World:
    def __init__(self, root: Path, *, max_points: int = 500,
                 max_read_chars: int = 1 << 20) -> None:
        self.root = root
        self.settings = Settings(shared_root=str(root))
        self.store = Store(str(root / "db.sqlite3"))
        self.cluster = FakeCluster(clock=T0)
        self.cluster.add_node("w1", gpus=8, cpus=32)
        self.artifacts = Artifacts(str(root))
        self.sched = Scheduler(self.store, self.cluster, self.settings, self.artifacts)
        self.max_points = max_points
        self.max_read_chars = max_read_chars
        self.follower = self.new_follower()
        self.n = 0

    def new_follower(self) -> LogFollower:
        return LogFollower(self.store, self.cluster, self.artifacts,
                           max_points=self.max_points, max_read_chars=self.max_read_chars)

    def running(self, total_training_steps: int | None = None) -> tuple[str, str]:
        """A task admitted and running on the fake cluster: (task id, submission id)."""
        self.n += 1
        task_id = f"mvp2-ppo-20251223-143201-{self.n:04x}"
        spec = JobSpec(workload="ppo", code_path=f"{self.root}/verl", model_id="org/model",
                       train_file=f"{self.root}/t.parquet", val_file=f"{self.root}/v.parquet",
                       nnodes=1, n_gpus_per_node=1, total_training_steps=total_training_steps)
        self.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="workload: ppo\n",
                                             spec=spec.to_dict(), nnodes=1, n_gpus_per_node=1,
                                             user="alice", created_at=T0, priority=0),
                                     task_id=task_id)
        self.sched.tick(T0)
        sid = f"{task_id}--a01"
        self.cluster.start(sid, {"w1": 1})
        self.sched.tick(T0)
        assert self.store.tasks.get_task(task_id).state is TaskState.RUNNING
        return task_id, sid

    def queued(self, gpus: int) -> str:
        self.n += 1
        task_id = f"mvp2-ppo-20251223-143201-{self.n:04x}"
        self.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="workload: ppo\n",
                                             spec={}, nnodes=1, n_gpus_per_node=gpus, user="bob",
                                             created_at=T0, priority=0), task_id=task_id)
        return task_id

    def progress(self, task_id: str) -> Progress:
        row = self.store.progress.task_progress(task_id)
        assert row is not None
        return row.progress


@pytest.fixture
def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    yield w
    w.store.close()


def test_reads_only_what_is_new_and_keeps_a_partial_line(world: World) -> None:
    task, sid = world.running(total_training_steps=10)
    world.cluster.write_log(sid, "starting\nstep:1 - train/loss:2.0\nstep:2 - train/lo")
    world.follower.poll(T0 + 10)
    assert world.progress(task) == Progress(step=1, total=10, first_step=1, first_at=T0 + 10,
                                            last_at=T0 + 10)
    world.cluster.write_log(sid, "ss:1.5\nstep:3 - train/loss:1.0\n")
    report = world.follower.poll(T0 + 20)
    assert (report.followed, report.lines) == (1, 2)
    first_end = len("starting\nstep:1 - train/loss:2.0\n")
    assert world.cluster.log_reads == [(sid, 0), (sid, first_end)]
    p = world.progress(task)
    assert (p.step, p.total, p.rate, p.eta_at) == (3, 10, 0.2, T0 + 20 + 7 / 0.2)
    points = world.store.progress.metric_points(task, ["train/loss"])
    assert [(pt.step, pt.value) for pt in points] == [(1, 2.0), (2, 1.5), (3, 1.0)]
    world.follower.poll(T0 + 30)  # nothing new: nothing written, offset unchanged
    assert world.cluster.log_reads[-1] == (sid, len(world.cluster.jobs[sid].log))


def test_the_log_says_the_total_and_wins_over_the_jobspec(world: World) -> None:
    task, sid = world.running(total_training_steps=100)
    world.cluster.write_log(sid, "Total training steps: 40\nstep:1 - a:1\n")
    world.follower.poll(T0 + 1)
    assert world.progress(task).total == 40


def test_a_restarted_service_goes_on_from_the_stored_offset(world: World) -> None:
    task, sid = world.running()
    world.cluster.write_log(sid, "step:1 - loss:3\n")
    world.follower.poll(T0 + 1)
    world.follower = world.new_follower()  # the service restarted
    world.cluster.write_log(sid, "step:2 - loss:2\n")
    world.follower.poll(T0 + 11)
    assert world.cluster.log_reads[-1] == (sid, len("step:1 - loss:3\n"))
    p = world.progress(task)
    assert (p.step, p.first_step, p.rate) == (2, 1, 0.1)


def test_the_end_of_the_log_is_read_from_the_archive(world: World) -> None:
    task, sid = world.running()
    world.cluster.write_log(sid, "step:1 - loss:3\n")
    world.follower.poll(T0 + 1)
    world.cluster.finish(sid, RayStatus.SUCCEEDED, log="step:2 - loss:2\nstep:3 - loss:1")
    world.sched.tick(T0 + 5)  # archives the log, the task ends
    assert world.store.tasks.get_task(task).state is TaskState.SUCCEEDED
    world.follower.poll(T0 + 6)
    assert world.progress(task).step == 3
    assert [p.step for p in world.store.progress.metric_points(task, ["loss"])] == [1, 2, 3]
    world.follower.poll(T0 + 7)  # forgotten: nothing read twice
    assert [p.step for p in world.store.progress.metric_points(task, ["loss"])] == [1, 2, 3]


def test_points_stay_under_the_cap_per_metric(tmp_path: Path) -> None:
    world = World(tmp_path, max_points=8)
    task, sid = world.running(total_training_steps=1000)
    for chunk in range(10):
        world.cluster.write_log(sid, "".join(
            f"step:{s} - loss:{1 / s}" + (f" - val/loss:{s}\n" if s % 10 == 0 else "\n")
            for s in range(chunk * 100 + 1, chunk * 100 + 101)))
        world.follower.poll(T0 + chunk)
    loss = [p.step for p in world.store.progress.metric_points(task, ["loss"])]
    val = [p.step for p in world.store.progress.metric_points(task, ["val/loss"])]
    assert 4 <= len(loss) <= 8 and loss[0] == 1
    assert len({b - a for a, b in pairwise(loss)}) == 1  # evenly spread
    assert 1 <= len(val) <= 8
    assert world.store.progress.metric_keys(task) == ["loss", "val/loss"]
    state = world.store.progress.follow_state(task, 1)
    assert state is not None and list(state.steps["loss"]) == loss
    world.store.close()


def test_a_resumed_attempt_goes_on_from_its_checkpoint(world: World) -> None:
    task, sid = world.running(total_training_steps=10)
    world.cluster.write_log(sid, "step:1 - loss:3\nstep:2 - loss:2\nstep:3 - loss:1.5\n")
    world.follower.poll(T0 + 1)
    other = world.queued(gpus=8)  # does not fit next to the running task
    world.store.attempts.request_preemption([(task, 1)], other, T0 + 2)
    world.cluster.finish(sid, RayStatus.STOPPED, log="step:4 - loss:1.2\n")
    sid2 = f"{task}--a02"
    for _ in range(3):
        world.sched.tick(T0 + 3)  # preempted: back in the queue, then submitted again
    assert sid2 in world.cluster.jobs
    world.cluster.start(sid2, {"w1": 1})
    world.sched.tick(T0 + 4)
    world.cluster.write_log(sid2, "resumed from checkpoint global_step_2\n")
    world.follower.poll(T0 + 5)
    row = world.store.progress.task_progress(task)
    assert row is not None and row.attempt_no == 2
    assert (row.progress.step, row.progress.resumed_from) == (2, 2)
    world.cluster.write_log(sid2, "step:3 - loss:1.4\n")
    world.follower.poll(T0 + 6)
    world.cluster.write_log(sid2, "step:5 - loss:1.0\n")
    world.follower.poll(T0 + 10)
    p = world.store.progress.task_progress(task).progress
    assert (p.step, p.rate) == (5, 0.5)
    by_attempt = [(pt.attempt_no, pt.step) for pt in world.store.progress.metric_points(task,
                                                                                        ["loss"])]
    assert by_attempt == [(1, 1), (1, 2), (1, 3), (1, 4), (2, 3), (2, 5)]
    assert task in world.store.progress.active_progress()


def test_an_unreachable_cluster_loses_nothing(world: World) -> None:
    task, sid = world.running()
    world.cluster.write_log(sid, "step:1 - loss:3\n")
    world.cluster.unreachable = True
    report = world.follower.poll(T0 + 1)
    assert report.unreachable and world.store.progress.task_progress(task) is None
    world.cluster.unreachable = False
    world.follower.poll(T0 + 2)
    assert world.progress(task).step == 1


def test_an_overlong_line_is_skipped_not_stalled_on(tmp_path: Path) -> None:
    world = World(tmp_path, max_read_chars=1024)
    task, sid = world.running()
    world.cluster.write_log(sid, "x" * 3000 + "\nstep:1 - loss:3\n")
    for i in range(5):
        world.follower.poll(T0 + i)
    assert world.progress(task).step == 1
    world.store.close()


def test_a_write_from_a_stale_offset_changes_nothing(world: World) -> None:
    task, sid = world.running()
    world.cluster.write_log(sid, "step:1 - loss:3\n")
    world.follower.poll(T0 + 1)
    stale = ProgressUpdate(task_id=task, attempt_no=1, expected_offset=0, log_offset=5,
                           progress=Progress(step=99))
    with pytest.raises(StaleProgress):
        world.store.progress.record_progress(stale, T0 + 2)
    assert world.progress(task).step == 1


def test_the_loop_counts_a_failing_poll_and_goes_on(world: World) -> None:
    class Broken(LogFollower):
        def poll(self, now: float):  # type: ignore[override]
            raise RuntimeError("boom")

    loop = FollowerLoop(Broken(world.store, world.cluster, world.artifacts, max_points=2,
                               max_read_chars=1024), 1.0, clock=lambda: T0)
    loop.run_once()
    assert (loop.errors, loop.polls) == (1, 0)
    loop = FollowerLoop(world.follower, 1.0, clock=lambda: T0)
    loop.run_once()
    assert (loop.errors, loop.polls) == (0, 1)
    with pytest.raises(ValueError):
        FollowerLoop(world.follower, 0)


def test_a_repeated_step_replaces_its_value_even_in_a_later_read(world: World) -> None:
    task, sid = world.running()
    world.cluster.write_log(sid, "step:4 - loss:1.5 - val/loss:1.0\n")
    world.follower.poll(T0 + 1)
    world.cluster.write_log(sid, "step:4 - val/loss:0.9\n")  # validation, printed apart
    world.follower.poll(T0 + 2)
    points = world.store.progress.metric_points(task, ["loss", "val/loss"])
    assert [(p.key, p.step, p.value) for p in points] == [("loss", 4, 1.5),
                                                           ("val/loss", 4, 0.9)]
