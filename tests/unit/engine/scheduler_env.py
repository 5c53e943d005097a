"""The harness shared by the tests of this folder (``test_scheduler.py`` and its siblings):
constants, builders and helpers; the fixtures are in ``conftest.py``."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from service.cluster.fake import FakeCluster
from service.config import SchedulerSettings, Settings, UserSettings
from service.domain.newtask import NewTask
from service.domain.states import TaskState
from service.engine.artifacts import Artifacts
from service.engine.scheduler import (
    Scheduler,
    TickReport,
)
from service.jobspec.model import JobSpec
from service.store.writer import Store

S = TaskState


T0 = 1_766_500_000.0


VERL_GPU_ERROR = "ValueError: Total available GPUs 2.0 is less than total desired GPUs 4"


class Env:
    def __init__(self, root: Path, users: UserSettings | None = None, *,
                 store_url: str | None = None, **sched: object) -> None:
        """``store_url``: the store's database (default: a SQLite file in ``root``)."""
        self.root = root
        self.store_url = store_url or str(root / "db.sqlite3")
        self.settings = Settings(shared_root=str(root),
                                 scheduler=SchedulerSettings(**sched),  # type: ignore[arg-type]
                                 users=users or UserSettings())
        self.store = Store(self.store_url)
        self.cluster = FakeCluster(clock=T0)
        self.cluster.add_node("head", gpus=0, cpus=0, worker_slots=0)
        self.cluster.add_node("w1", gpus=4, cpus=16)
        self.artifacts = Artifacts(self.settings.shared_root)
        self.sched = Scheduler(self.store, self.cluster, self.settings, self.artifacts)
        self.n = 0

    def add(self, nnodes: int = 1, g: int = 4, now: float = T0, user: str = "alice",
            max_attempts: int | None = None) -> str:
        self.n += 1
        task_id = f"mvp2-ppo-20251223-143201-{self.n:04x}"
        spec = JobSpec(workload="ppo", code_path=f"{self.root}/verl", model_id="org/model",
                       train_file=f"{self.root}/train.parquet",
                       val_file=f"{self.root}/val.parquet", nnodes=nnodes, n_gpus_per_node=g,
                       max_attempts=max_attempts)
        self.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="workload: ppo\n",
                                             spec=spec.to_dict(), nnodes=nnodes, n_gpus_per_node=g,
                                             user=user, created_at=now, priority=0),
                                     task_id=task_id)
        return task_id

    def tick(self, now: float) -> TickReport:
        self.cluster.clock = now
        return self.sched.tick(now)

    def state(self, task_id: str) -> TaskState:
        return self.store.tasks.get_task(task_id).state

    def reopen(self) -> None:
        """The service died and starts again on the same database."""
        self.store.close()
        self.store = Store(self.store_url)
        self.sched = Scheduler(self.store, self.cluster, self.settings, self.artifacts)


def sid(task_id: str, n: int = 1) -> str:
    return f"{task_id}--a{n:02d}"


@contextlib.contextmanager
def driver_holds_the_task_lock(env: Env, task_id: str) -> Iterator[None]:
    """What the entrypoint's shell leaves while a driver of the task runs: its lock held
    (an open file description of its own, so the service's test sees a conflict)."""
    path = env.artifacts.task_lock(task_id, env.store.tasks.get_task(task_id).user)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.write(f"{sid(task_id)} on w1 pid 4242 since 2025-12-23T14:32:01Z\n")
        fh.flush()
        yield
