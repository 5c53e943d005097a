"""Fixtures shared by the tests of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from users_world import (
    BOOTSTRAP,
    T0,
    Clock,
    World,
    app_of,
)

from service.cluster.fake import FakeCluster
from service.config import Settings, UserSettings
from service.domain.users import Role
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.policy.quotas import Limits
from service.store.writer import Store


@pytest.fixture
def world(tmp_path: Path, store_url: str) -> World:
    shared = tmp_path / "shared"
    settings = Settings(shared_root=str(shared), users=UserSettings(
        bootstrap_admin="root", default_user="root",
        per_user={"alice": Limits(max_gpus=4)}))
    store = Store(store_url)
    cluster = FakeCluster(clock=T0)
    cluster.add_node("n1", gpus=8, cpus=32)
    clock = Clock()
    scheduler = Scheduler(store, cluster, settings, Artifacts(settings.shared_root))
    w = World(shared, store, cluster, scheduler, clock, {"bootstrap": BOOTSTRAP})
    for name, role in (("ada", Role.ADMIN), ("alice", Role.USER), ("bob", Role.USER),
                       ("carol", Role.USER)):
        store.users.create_user(name, role, T0)
        w.tokens[name] = store.users.create_token(name, "test", None, T0, max_live=10).secret
    store.users.set_user_enabled("carol", False, T0)
    w.settings = settings  # type: ignore[attr-defined]
    yield w
    store.close()


@pytest.fixture
async def client(aiohttp_client, world: World):
    return await aiohttp_client(app_of(world))
