"""Fixtures shared by the tests of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from scheduler_env import Env


@pytest.fixture
def env(tmp_path: Path, store_url: str) -> Env:
    """The scheduler on a real store, on each engine (``store_url``)."""
    e = Env(tmp_path, store_url=store_url)
    yield e
    e.store.close()
