"""Fixtures shared by the tests of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_env import TOKEN, Env, Loop, make_env

from service.config import Settings
from service.engine.artifacts import Artifacts
from service.web.app import create_app


@pytest.fixture
def env(tmp_path: Path, store_url: str):
    """The console on a real store, on each engine (``store_url``)."""
    e = make_env(tmp_path, Settings(shared_root=str(tmp_path / "shared"), ray_timeout_s=5.0),
                 store_url)
    yield e
    e.store.close()


@pytest.fixture
async def client(env: Env, aiohttp_client):  # the app is cleaned up before the store closes
    app = create_app(env.settings, env.store, env.cluster, Artifacts(str(env.shared)),
                     token=TOKEN, scheduler_loop=Loop(), clock=env.clock, metrics=env.metrics,
                     wake_interval_s=0.0)
    return await aiohttp_client(app)
