"""A submitted JobSpec's ``priority`` reaches the task (the scheduler orders and preempts
by it): the configured default when omitted, 403 for a non-admin above
``max_user_priority``, an admin up to the maximum. A real app and Store, FakeCluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.app import create_app
from service.artifacts import Artifacts
from service.cluster_fake import FakeCluster
from service.config import SchedulerSettings, Settings, UserSettings
from service.metrics import ServiceMetrics
from service.openapi import build_openapi
from service.store import Store
from service.users import Role

BOOTSTRAP = "bootstrap-token-of-the-operator"
T0 = 1_766_000_000.0


@pytest.fixture
def store(tmp_path: Path):
    s = Store(str(tmp_path / "db.sqlite3"))
    yield s
    s.close()


@pytest.fixture
async def client(aiohttp_client, tmp_path: Path, store: Store):
    shared = tmp_path / "shared"
    settings = Settings(
        shared_root=str(shared),
        users=UserSettings(bootstrap_admin="root", default_user="root"),
        scheduler=SchedulerSettings(default_priority=2, max_user_priority=5),
    )
    tokens = {"root": BOOTSTRAP}
    for name, role in (("ada", Role.ADMIN), ("alice", Role.USER)):
        store.create_user(name, role, T0)
        tokens[name] = store.create_token(name, "test", None, T0, max_live=10).secret
    app = create_app(settings, store, FakeCluster(clock=T0), Artifacts(settings.shared_root),
                     token=BOOTSTRAP, clock=lambda: T0,
                     metrics=ServiceMetrics(store.counts_by_state, users=store))
    c = await aiohttp_client(app)
    c.tokens, c.shared = tokens, shared
    return c


async def submit(client, who: str, priority: object = None):
    extra = "" if priority is None else f"priority: {priority}\n"
    body = (f"workload: sft\ncode_path: {client.shared}/code\nmodel_id: org/model\n"
            f"train_file: {client.shared}/train.parquet\nval_file: null\nnnodes: 1\n"
            f"n_gpus_per_node: 1\n{extra}")
    return await client.post("/api/v2/tasks", data=body, headers={
        "Authorization": f"Bearer {client.tokens[who]}", "Content-Type": "application/yaml"})


@pytest.mark.parametrize("who, asked, stored", [
    ("alice", None, 2),    # omitted: the configured default
    ("alice", 5, 5),       # a user up to max_user_priority
    ("alice", -1000, -1000),
    ("ada", 1000, 1000),   # an admin up to the maximum
    ("root", 100, 100),    # the bootstrap admin too
])
async def test_submitted_priority_is_the_tasks(client, store: Store, who: str,
                                               asked: int | None, stored: int) -> None:
    resp = await submit(client, who, asked)
    assert resp.status == 201, await resp.text()
    task_id = (await resp.json())["task_id"]
    task = store.get_task(task_id)
    assert task is not None and task.priority == stored
    (created,) = [e for e in store.events(task_id) if e.event_type == "CREATED"]
    assert created.payload["priority"] == stored


async def test_a_user_above_max_user_priority_is_refused_and_nothing_is_queued(
        client, store: Store) -> None:
    resp = await submit(client, "alice", 6)
    assert resp.status == 403
    body = await resp.json()
    assert body["error"]["details"] == [{"field": "priority", "message": (
        "priority 6 is above what users may ask for (5); only an admin sets a priority "
        "up to 1000")}]
    assert sum(store.counts_by_state().values()) == 0


async def test_out_of_range_is_a_jobspec_error(client) -> None:
    resp = await submit(client, "ada", 1001)
    assert resp.status == 400
    assert any(d["field"] == "priority" for d in (await resp.json())["error"]["details"])


def test_openapi_documents_the_403_of_a_submit() -> None:
    assert "403" in build_openapi()["paths"]["/api/v2/tasks"]["post"]["responses"]
