"""Fixtures shared by the tests of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_env import (
    T0,
    TOKEN,
    Clock,
    Env,
    Loop,
)

from service.cluster.fake import FakeCluster
from service.config import Settings
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.store.writer import Store
from service.web.app import create_app
from service.web.metrics import MeteredScheduler, ServiceMetrics


@pytest.fixture
def env(tmp_path: Path):
    shared = tmp_path / "shared"
    settings = Settings(shared_root=str(shared), ray_timeout_s=5.0)
    store = Store(str(tmp_path / "db.sqlite3"))
    cluster = FakeCluster(clock=T0)
    clock = Clock(T0)
    metrics = ServiceMetrics(store.counts_by_state, users=store, queue=store, clock=clock)
    scheduler = MeteredScheduler(Scheduler(store, cluster, settings, Artifacts(str(shared))),
                                 metrics)
    yield Env(shared, settings, store, cluster, scheduler, metrics, clock)
    store.close()


@pytest.fixture
async def client(env: Env, aiohttp_client):  # the app is cleaned up before the store closes
    app = create_app(env.settings, env.store, env.cluster, Artifacts(str(env.shared)),
                     token=TOKEN, scheduler_loop=Loop(), clock=env.clock, metrics=env.metrics,
                     wake_interval_s=0.0)
    return await aiohttp_client(app)
