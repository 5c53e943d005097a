"""Runtime tier: head faults cost no training. A real local cluster (head + one worker,
the real watchdogs on the embedded GCS store; netns, and the quick start's ports mode) and
the real scheduler in this process (Ray found through head.json) run a stand-in verl run
while the head's GCS is SIGKILLed by the project's fault script: the run goes on, ends
SUCCEEDED on attempt 1, and its step log shows no restart. With the store wiped by
``fault_wipe_gcs_store.sh`` (a new cluster) the attempt is lost as before: CLUSTER_LOST,
and attempt 2 resumes from the checkpoint.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from raypool import discovery
from raypool.headrecord import HeadRecord
from raypool.local.launcher import LocalCluster, down, node_pids, up
from service.cluster.boundary import ClusterError
from service.cluster.raycluster import RayCluster
from service.config import SchedulerSettings, Settings
from service.domain.newtask import NewTask
from service.domain.states import TaskState
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler, SchedulerLoop
from service.jobspec.spec import parse_jobspec
from service.store.writer import Store

from .waiting import poll

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
STANDIN = ROOT / "examples" / "standin-verl"
USER = "alice"
STEPS = 30  # one step a second

if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
    pytest.skip("runtime tier needs root plus `ip` and `unshare` (nodes run in network + "
                "PID namespaces)", allow_module_level=True)


def local_cluster(isolation: str) -> Iterator[LocalCluster]:
    state_dir = f"/tmp/arh-{secrets.token_hex(3)}"
    path = os.environ["PATH"]
    # the nodes inherit it: the entrypoint's `python3` is this venv's (Ray, like the image)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + path
    try:
        yield up(state_dir, 1, isolation, ttl_s=8, timeout_s=120)
    finally:
        os.environ["PATH"] = path
        if os.path.exists(os.path.join(state_dir, "local.json")):
            problems = down(state_dir)
            assert problems == [], problems
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module", params=["netns", "ports"])
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """netns: nodes as separate hosts; ports: the quick start's cluster (one IP, a PID
    namespace per node, so each driver registers with its own node's raylet)."""
    yield from local_cluster(request.param)


@dataclass
class Service:
    """The task service's scheduler on a fresh database, ticking in its own thread."""

    settings: Settings
    store: Store
    loop: SchedulerLoop
    artifacts: Artifacts
    seq: int = 0

    def submit(self, steps: int = STEPS) -> str:
        self.seq += 1
        task_id = f"mvp2-{USER}-ppo-20261124-160000-{secrets.token_hex(2)}"
        data = Path(self.settings.shared_root) / "data"
        text = yaml.safe_dump({
            "workload": "ppo", "code_path": str(STANDIN), "model_id": "org/model",
            "train_file": str(data / "train.parquet"), "val_file": str(data / "val.parquet"),
            "nnodes": 1, "n_gpus_per_node": 1, "total_training_steps": steps,
            "save_freq": 1,
            "overrides": [f"+argus_demo.duration_s={steps}"],
        })
        spec = parse_jobspec(text, self.settings)
        self.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text=text,
                                             spec=spec.to_dict(), nnodes=1, n_gpus_per_node=1,
                                             user=USER, created_at=time.time(), priority=0),
                                     task_id=task_id)
        self.loop.wake()
        return task_id

    def state(self, task_id: str) -> TaskState:
        return self.store.tasks.get_task(task_id).state

    def explain(self, task_id: str) -> Callable[[], str]:
        """What the service knows of the task, for a failed wait."""
        def text() -> str:
            task = self.store.tasks.get_task(task_id)
            lines = [f"task {task.state} pending={task.pending_reason!r} "
                     f"summary={task.error_summary!r}"]
            lines += [f"attempt {a.attempt_no} {a.ray_status} {a.failure_kind} {a.message!r}"
                      for a in self.store.attempts.list_attempts(task_id)]
            lines += [f"event {e.event_type} {e.payload}" for e in self.store.tasks.events(task_id)]
            return "\n".join(lines)
        return text

    def step_log(self, task_id: str, attempt: int) -> str:
        sid = f"{task_id}--a{attempt:02d}"
        return self.artifacts.read_log(sid, USER) or ""


@pytest.fixture
def service(cluster: LocalCluster, tmp_path: Path) -> Iterator[Service]:
    shared = tmp_path / "shared"
    settings = Settings(
        shared_root=str(shared), head_json=cluster.head_file, ray_timeout_s=5,
        allowed_roots=(str(shared), str(STANDIN)), default_overrides={},
        scheduler=SchedulerSettings(tick_s=0.5, retry_mode="timer", retry_interval_s=2))
    store = Store(str(tmp_path / "db.sqlite3"))
    artifacts = Artifacts(settings.shared_root)
    scheduler = Scheduler(store, RayCluster(settings), settings, artifacts)
    loop = SchedulerLoop(scheduler, 0.5)
    loop.start()
    try:
        yield Service(settings, store, loop, artifacts)
    finally:
        loop.stop()
        store.close()


def head_record(c: LocalCluster) -> HeadRecord | None:
    return discovery.read_record(c.head_file, c.cluster_name).record


def fault(c: LocalCluster, script: str, *args: str) -> None:
    env = dict(os.environ, ARGUS_LOCAL_DIR=c.state_dir,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    subprocess.run([str(SCRIPTS / script), *args], env=env, check=True, capture_output=True,
                   text=True, timeout=120)


def steps_done(text: str) -> list[int]:
    """The steps the stand-in logged, in order (verl's console lines: ``step:N - ...``)."""
    return [int(m) for m in re.findall(r"\] step:(\d+) - ", text)]


def running_at_step(svc: Service, task_id: str, step: int) -> Callable[[], bool]:
    """The attempt is RUNNING and its driver log (live, from Ray) has reached ``step``."""
    sid = f"{task_id}--a01"

    def check() -> bool:
        if svc.state(task_id) is not TaskState.RUNNING:
            return False
        try:
            text = svc.loop.scheduler.cluster.logs(sid)
        except ClusterError:  # not yet: polled again
            return False
        return step in steps_done(text)
    return check


def test_a_run_survives_a_gcs_kill_and_succeeds_on_its_first_attempt(cluster, service):
    task_id = service.submit()
    poll(running_at_step(service, task_id, 3), 120, "the stand-in run at step 3",
         service.explain(task_id))
    before = head_record(cluster)
    assert before is not None and before.cluster_id
    raylet = node_pids(cluster, "w1", "raylet")
    fault(cluster, "fault_kill_head_ray.sh", "local", "head")
    poll(lambda: (r := head_record(cluster)) is not None and r.generation != before.generation,
         60, "the head back with a new generation")
    after = head_record(cluster)
    assert after is not None and after.cluster_id == before.cluster_id  # the same cluster
    assert node_pids(cluster, "w1", "raylet") == raylet  # the worker kept its raylet
    assert service.state(task_id) in (TaskState.RUNNING, TaskState.SUCCEEDED)
    poll(lambda: service.state(task_id) is TaskState.SUCCEEDED, 120, "the run to succeed",
         service.explain(task_id))
    attempts = service.store.attempts.list_attempts(task_id)
    assert [a.attempt_no for a in attempts] == [1]
    log = service.step_log(task_id, 1)
    assert steps_done(log) == list(range(1, STEPS + 1)), log[-2000:]  # no step twice
    assert "resumed from checkpoint" not in log
    assert node_pids(cluster, "w1", "raylet") == raylet


def test_a_wiped_store_is_a_new_cluster_and_the_run_resumes_as_attempt_2(cluster, service):
    if cluster.isolation != "netns":
        pytest.skip("the wipe is the same on every isolation; once is enough")
    task_id = service.submit()
    poll(running_at_step(service, task_id, 3), 120, "the stand-in run at step 3",
         service.explain(task_id))
    before = head_record(cluster)
    assert before is not None
    fault(cluster, "fault_wipe_gcs_store.sh", "local", "head")
    poll(lambda: (r := head_record(cluster)) is not None and r.generation != before.generation,
         60, "the head back with a new generation")
    after = head_record(cluster)
    assert after is not None and after.cluster_id != before.cluster_id  # a new cluster
    poll(lambda: len(service.store.attempts.list_attempts(task_id)) == 2, 120, "attempt 2",
         service.explain(task_id))
    first = service.store.attempts.get_attempt(task_id, 1)
    assert first.failure_kind == "CLUSTER_LOST", first.message
    poll(lambda: service.state(task_id) is TaskState.SUCCEEDED, 180, "attempt 2 to succeed",
         service.explain(task_id))
    assert "resumed from checkpoint" in service.step_log(task_id, 2)
