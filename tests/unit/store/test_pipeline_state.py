"""A pipeline's shown state: WAITING while none of its stages has started (every stage's
task BLOCKED, QUEUED or PENDING_RESOURCES), RUNNING once one has, through the store's
reads (one and the list) and real scheduler ticks on the fake cluster. The stored state
stays RUNNING until the pipeline ends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.cluster.fake import FakeCluster
from service.config import Settings
from service.domain.states import WAITING, PipelineState, RayStatus, TaskState
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.policy.pipelines import parse_pipeline
from service.store.sql import QUERIES
from service.store.writer import Store
from service.usecases.pipeline_submit import submit_pipeline

T0 = 1_766_600_000.0
SHOWN = ("get_pipeline", "list_pipelines", "list_pipelines_of_user")


def _doc(root: Path) -> str:
    spec = (f"{{workload: sft, code_path: {root}/verl, model_id: org/model, "
            f"train_file: {root}/train.parquet, val_file: null, nnodes: 1, "
            f"n_gpus_per_node: 4}}")
    return f"name: two\nstages:\n  a: {{jobspec: {spec}}}\n" \
           f"  b: {{after: {{ok: [a]}}, jobspec: {spec}}}\n"


@pytest.fixture
def world(tmp_path: Path, store_url: str):
    settings = Settings(shared_root=str(tmp_path))
    store = Store(store_url)
    cluster = FakeCluster(clock=T0)
    cluster.add_node("w1", gpus=4, cpus=16)
    sched = Scheduler(store, cluster, settings, Artifacts(settings.shared_root))
    yield store, cluster, sched, settings, tmp_path
    store.close()


def _shown(store: Store, pid: str) -> tuple[PipelineState, PipelineState, PipelineState]:
    """The state get_pipeline and both lists show, and the stored one."""
    one = store.pipelines.get_pipeline(pid).pipeline.state
    [everyone] = store.pipelines.list_pipelines(None, 10)
    [mine] = store.pipelines.list_pipelines("alice", 10)
    assert everyone.state is mine.state is one
    stored = store.core._conn.execute("SELECT state FROM pipelines WHERE pipeline_id = ?",
                                      (pid,)).fetchone()[0]
    return one, mine.state, PipelineState(stored)


def test_waiting_until_a_stage_starts_then_running_then_its_end(world) -> None:
    store, cluster, sched, settings, root = world
    text = _doc(root)
    pid, ids = submit_pipeline(store, parse_pipeline(text), text, settings, "alice", T0)
    assert _shown(store, pid)[0] is PipelineState.WAITING  # QUEUED and BLOCKED
    assert _shown(store, pid)[2] is PipelineState.RUNNING  # stored: not ended
    cluster.occupy("w1", GPU=4)  # another job holds the GPUs
    sched.tick(T0 + 1)
    assert store.tasks.get_task(ids["a"]).state is TaskState.PENDING_RESOURCES
    assert _shown(store, pid)[0] is PipelineState.WAITING
    cluster.release("w1", GPU=4)
    sched.tick(T0 + 2)
    assert store.tasks.get_task(ids["a"]).state is TaskState.SUBMITTED
    assert _shown(store, pid)[0] is PipelineState.RUNNING
    cluster.clock = T0 + 3
    cluster.finish(f"{ids['a']}--a01", RayStatus.SUCCEEDED)
    sched.tick(T0 + 3)  # a ended, b released: a stage has started, so RUNNING
    assert store.tasks.get_task(ids["b"]).state in WAITING | {TaskState.SUBMITTING,
                                                         TaskState.SUBMITTED}
    assert _shown(store, pid)[0] is PipelineState.RUNNING
    sched.tick(T0 + 4)
    cluster.clock = T0 + 5
    cluster.finish(f"{ids['b']}--a01", RayStatus.SUCCEEDED)
    sched.tick(T0 + 5)
    assert _shown(store, pid) == (PipelineState.SUCCEEDED,) * 3


def test_a_canceled_waiting_pipeline_ends_canceled(world) -> None:
    store, _, sched, settings, root = world
    text = _doc(root)
    pid, ids = submit_pipeline(store, parse_pipeline(text), text, settings, "alice", T0)
    store.pipelines.flag_pipeline_cancel(pid, T0 + 1)
    for stage in ("b", "a"):
        store.tasks.cancel(ids[stage], T0 + 1)
    sched.tick(T0 + 2)
    assert _shown(store, pid) == (PipelineState.CANCELED,) * 3


@pytest.mark.parametrize("name", SHOWN)
def test_the_waiting_states_in_the_queries_are_the_domains(name: str) -> None:
    """The reads spell the waiting task states out in SQL: exactly ``states.WAITING``."""
    [listed] = re.findall(r"t\.state NOT IN \(([^)]*)\)", QUERIES[name])
    assert set(re.findall(r"'([A-Z_]+)'", listed)) == {s.value for s in WAITING}
