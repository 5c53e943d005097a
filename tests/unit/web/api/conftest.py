"""Fixtures shared by the tests of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_env import (
    T0,
    Clock,
    Env,
    make_app,
)

from service.cluster.fake import FakeCluster
from service.config import Settings
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.store.writer import Store
from service.web.metrics import MeteredScheduler, ServiceMetrics


@pytest.fixture
def env(tmp_path: Path, store_url: str) -> Env:
    """The API on a real store, on each engine (``store_url``)."""
    shared = tmp_path / "shared"
    settings = Settings(shared_root=str(shared), max_body_bytes=4096, ray_timeout_s=5.0)
    store = Store(store_url)
    cluster = FakeCluster(clock=T0)
    artifacts = Artifacts(settings.shared_root)
    metrics = ServiceMetrics(store.tasks.counts_by_state)
    scheduler = MeteredScheduler(Scheduler(store, cluster, settings, artifacts), metrics)
    yield Env(shared, settings, store, cluster, artifacts, scheduler, metrics, Clock(T0))
    store.close()


@pytest.fixture
async def client(aiohttp_client, env: Env):
    env.metrics.watch_loop(env.loop)
    return await aiohttp_client(make_app(env))
