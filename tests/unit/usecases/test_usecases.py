"""The task use cases without HTTP: a real store on a temporary database, the fake
cluster, a recording waker. The API and the console map these outcomes; their own tests
check the mapping."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import yaml

import service.usecases as usecases_package
import service.web.api as api_package
import service.web.ui as ui_package
from service.cluster.fake import FakeCluster
from service.config import Settings, UserSettings
from service.domain.states import TaskState
from service.domain.users import Principal, Role
from service.jobspec.model import JobSpecError
from service.policy.pipelines import PipelineError, parse_pipeline
from service.policy.quotas import Limits
from service.store.aio import AsyncStore
from service.store.offload import Offload
from service.store.writer import Store
from service.usecases import pipelines, tasks
from service.usecases.idempotency import KeysInFlight
from service.usecases.pipeline_submit import submit_pipeline
from service.usecases.ports import (
    BadDependencies,
    Invalid,
    NotAllowed,
    NotFound,
    NotOwner,
    OverQuota,
    WrongState,
)

pytestmark = pytest.mark.unit

T0 = 1_766_000_000.0
ADMIN = Principal("admin", Role.ADMIN)
ALICE = Principal("alice", Role.USER)
BOB = Principal("bob", Role.USER)


class Recorder:
    def __init__(self) -> None:
        self.count = 0

    def wake(self) -> None:
        self.count += 1

    def inc(self, amount: float = 1) -> None:
        self.count += int(amount)


@dataclass
class Metrics:
    submits: Recorder = field(default_factory=Recorder)


@dataclass
class Deps:
    """What ``usecases.ports.TaskDeps`` asks for, built for a test."""

    settings: Settings
    store: AsyncStore
    cluster: FakeCluster
    cluster_pool: ThreadPoolExecutor
    work: Offload
    waker: Recorder
    clock: object
    metrics: Metrics
    sync: Store  # the same store, for a test's own setup and checks
    in_flight: KeysInFlight = field(default_factory=KeysInFlight)


@pytest.fixture
def deps(tmp_path: Path, store_url: str) -> Iterator[Deps]:
    settings = Settings(shared_root=str(tmp_path / "shared"), ray_timeout_s=5.0)
    store = Store(store_url)
    for name in ("alice", "bob"):
        store.users.create_user(name, Role.USER, T0)
    pool, work = ThreadPoolExecutor(1), Offload("test-work", 1)
    astore = AsyncStore(store)
    yield Deps(settings, astore, FakeCluster(clock=T0), pool, work, Recorder(),
               lambda: T0, Metrics(), store)
    astore.close()
    work.close()
    pool.shutdown()
    store.close()


def spec(shared: str, **fields: object) -> str:
    doc = {"workload": "ppo", "code_path": f"{shared}/code/verl",
           "model_id": "Qwen/Qwen2.5-0.5B-Instruct", "train_file": f"{shared}/d/t.parquet",
           "val_file": f"{shared}/d/v.parquet", "nnodes": 1, "n_gpus_per_node": 2,
           **fields}
    return "".join(f"{k}: {v}\n" for k, v in doc.items())


async def submit(deps: Deps, who: Principal = ALICE, **fields: object) -> str:
    done = await tasks.submit(deps, who, spec(deps.settings.shared_root, **fields),
                              as_json=False)
    return done.task_id


def with_scheduler(deps: Deps, **kw: object) -> None:
    deps.settings = replace(deps.settings,
                            scheduler=replace(deps.settings.scheduler, **kw))


def running(deps: Deps, task_id: str) -> str:
    """Put the task on the fake cluster as the scheduler would; its submission id."""
    claim = deps.sync.attempts.claim_for_submit(task_id, TaskState.QUEUED, T0)
    deps.sync.attempts.mark_submitted(task_id, claim.attempt_no, T0)
    deps.cluster.add_node("n1", gpus=2)
    from service.cluster.boundary import SubmitRequest
    deps.cluster.submit(SubmitRequest(submission_id=claim.ray_submission_id,
                                      entrypoint="true", runtime_env={},
                                      entrypoint_num_cpus=1, entrypoint_resources={},
                                      metadata={}))
    return claim.ray_submission_id


# -- submit ---------------------------------------------------------------------------


async def test_submit_applies_the_configured_defaults_and_wakes_once(deps: Deps) -> None:
    with_scheduler(deps, default_priority=3, max_user_priority=5,
                   default_max_runtime_s=3600.0)
    task_id = await submit(deps)
    task = deps.sync.tasks.get_task(task_id)
    assert task is not None and task.user == "alice" and task.state is TaskState.QUEUED
    assert (task.priority, task.max_runtime_s) == (3, 3600.0)
    assert (deps.waker.count, deps.metrics.submits.count) == (1, 1)


async def test_submit_above_the_allowance_is_refused_before_any_write(deps: Deps) -> None:
    with pytest.raises(NotAllowed) as refused:
        await submit(deps, priority=7)
    assert refused.value.field == "priority" and "above what users may ask" in str(
        refused.value)
    assert deps.sync.tasks.list_tasks()[0] == [] and deps.waker.count == 0
    assert deps.sync.tasks.get_task(await submit(deps, ADMIN, priority=7)).priority == 7


async def test_submit_refuses_a_bad_jobspec_an_unknown_parent_and_a_full_quota(
        deps: Deps) -> None:
    with pytest.raises(JobSpecError):
        await submit(deps, nnodes=0)
    with pytest.raises(BadDependencies) as bad:
        await submit(deps, after="{any: [mvp2-alice-ppo-20250101-000000-abcd]}")
    assert bad.value.problems
    deps.settings = replace(deps.settings, users=UserSettings(
        limits=Limits(max_waiting_tasks=1)))
    await submit(deps)
    with pytest.raises(OverQuota) as over:
        await submit(deps)
    assert over.value.refusal.limit == "max_waiting_tasks"
    await submit(deps, ADMIN)  # admins are exempt


# -- cancel ---------------------------------------------------------------------------


async def test_cancel_a_waiting_task_ends_it_at_once(deps: Deps) -> None:
    task_id = await submit(deps)
    done = await tasks.cancel(deps, ALICE, task_id)
    assert (done.state, done.stopping) == (TaskState.CANCELED, False)
    assert deps.cluster.stop_calls == [] and deps.waker.count == 2
    with pytest.raises(WrongState) as again:
        await tasks.cancel(deps, ALICE, task_id)
    assert again.value.state == TaskState.CANCELED


async def test_cancel_on_ray_flags_the_task_and_stops_it_best_effort(deps: Deps) -> None:
    task_id = await submit(deps)
    sid = running(deps, task_id)
    done = await tasks.cancel(deps, ADMIN, task_id)
    assert (done.state, done.stopping) == (TaskState.SUBMITTED, True)
    assert deps.cluster.stop_calls == [sid]
    assert deps.sync.tasks.get_task(task_id).cancel_requested
    deps.cluster.unreachable = True  # a second cancel: recorded, Ray's silence is no error
    assert (await tasks.cancel(deps, ALICE, task_id)).stopping


async def test_only_the_owner_or_an_admin_cancels(deps: Deps) -> None:
    task_id = await submit(deps)
    with pytest.raises(NotOwner) as refused:
        await tasks.cancel(deps, BOB, task_id)
    assert refused.value.owner == "alice" and "you are bob" in str(refused.value)
    with pytest.raises(NotFound):
        await tasks.cancel(deps, ADMIN, "no-such-task")
    assert deps.sync.tasks.get_task(task_id).state is TaskState.QUEUED


# -- priority -------------------------------------------------------------------------


async def test_set_priority_checks_range_allowance_owner_and_state(deps: Deps) -> None:
    with_scheduler(deps, max_user_priority=5)
    task_id = await submit(deps)
    assert (await tasks.set_priority(deps, ALICE, task_id, 5)).priority == 5
    for who, value, error in ((ALICE, 6, NotAllowed), (ALICE, None, Invalid),
                              (ALICE, 10**9, Invalid), (BOB, 1, NotOwner)):
        with pytest.raises(error):
            await tasks.set_priority(deps, who, task_id, value)
    assert (await tasks.set_priority(deps, ADMIN, task_id, 50)).priority == 50
    assert (await tasks.set_priority(deps, ALICE, task_id, 20)).priority == 20  # lower
    running(deps, task_id)
    with pytest.raises(WrongState) as late:
        await tasks.set_priority(deps, ALICE, task_id, 1)
    assert late.value.state == "SUBMITTED" and late.value.task is not None
    assert deps.sync.tasks.get_task(task_id).priority == 20


# -- pipelines ------------------------------------------------------------------------


async def test_cancel_pipeline_cancels_its_open_stages_and_wakes_once(deps: Deps) -> None:
    shared = deps.settings.shared_root
    stage = yaml.safe_load(spec(shared))
    text = json.dumps({"name": "two", "stages": {
        "first": {"jobspec": stage},
        "second": {"after": {"any": ["first"]}, "jobspec": stage}}})
    doc = parse_pipeline(text)
    pid, stages = submit_pipeline(
        deps.sync, doc, text, deps.settings, "alice", T0, is_admin=False)
    with pytest.raises(NotOwner):
        await pipelines.cancel_pipeline(deps, BOB, pid)
    with pytest.raises(NotFound):
        await pipelines.cancel_pipeline(deps, ADMIN, "pl-none")
    wakes = deps.waker.count
    done = await pipelines.cancel_pipeline(deps, ALICE, pid)
    assert done.canceled == [stages["second"], stages["first"]]  # children first
    assert {s.state for s in done.view.stages} == {TaskState.CANCELED}
    assert done.view.pipeline.cancel_requested_at == T0
    assert deps.waker.count == wakes + 1


async def test_submit_pipeline_creates_its_stages_under_the_quota_and_wakes(deps: Deps
                                                                          ) -> None:
    stage = yaml.safe_load(spec(deps.settings.shared_root))
    text = json.dumps({"name": "two", "stages": {
        "first": {"jobspec": stage},
        "second": {"after": {"any": ["first"]}, "jobspec": stage}}})
    with pytest.raises(PipelineError):
        await pipelines.submit_pipeline(deps, ALICE, "name: x\nstages: {}\n")
    done = await pipelines.submit_pipeline(deps, ALICE, text)
    assert set(done.stages) == {"first", "second"} and deps.waker.count == 1
    states = {deps.sync.tasks.get_task(t).state for t in done.stages.values()}
    assert states == {TaskState.QUEUED, TaskState.BLOCKED}
    deps.settings = replace(deps.settings, users=UserSettings(
        limits=Limits(max_waiting_tasks=1)))  # one QUEUED stage already (BLOCKED: not)
    with pytest.raises(OverQuota):
        await pipelines.submit_pipeline(deps, ALICE, text)
    await pipelines.submit_pipeline(deps, ADMIN, text)  # admins are exempt


# -- the front ends go through the use cases -------------------------------------------

TASK_WRITES = {"create_task", "cancel", "set_priority", "flag_pipeline_cancel",
               # accounts and webhooks (service.usecases.accounts, .webhooks)
               "create_user", "set_user_enabled", "create_token", "revoke_token",
               "create_webhook", "delete_webhook", "get_webhook", "list_webhooks",
               "webhook_deliveries"}
FRONT_ENDS = (api_package, ui_package)


def test_the_api_and_the_console_write_tasks_only_through_the_use_cases() -> None:
    """No handler or page calls the store's task, account or webhook writes (nor reads
    a webhook, nor the pipeline creation) itself: each rule has one home,
    ``service.usecases``."""
    root = Path(__file__).resolve().parents[3]
    found, read = [], 0
    for package in FRONT_ENDS:
        for path in sorted(Path(package.__file__).parent.glob("*.py")):
            read += 1
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and node.attr in TASK_WRITES
                        and isinstance(node.value, (ast.Attribute, ast.Name))
                        and getattr(node.value, "attr", getattr(node.value, "id", "")) in (
                            "store", "s")):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.attr}")
                if (isinstance(node, ast.ImportFrom)
                        and node.module == "service.usecases.pipeline_submit"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} pipeline_submit")
    assert read >= 20 and found == []



def test_the_use_cases_reach_the_store_through_its_lanes() -> None:
    """A use case calls ``deps.store.read(lambda s: s.method(...))``, ``.write(...)`` or
    ``.heavy(...)`` (reads whose cost grows with a window),
    never a per-method wrapper of ``AsyncStore``."""
    found, read = [], 0
    for path in sorted(Path(usecases_package.__file__).parent.glob("*.py")):
        read += 1
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "store"
                    and node.attr not in {"read", "write", "heavy"}):
                found.append(f"{path.name}:{node.lineno} store.{node.attr}")
    assert read >= 8 and found == []
