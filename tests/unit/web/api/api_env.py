"""The harness shared by the tests of this folder (``test_api.py`` and its siblings):
constants, builders and helpers; the fixtures are in ``conftest.py``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.cluster.fake import FakeCluster
from service.config import Settings
from service.engine.artifacts import Artifacts
from service.store.writer import Store
from service.web.app import create_app
from service.web.metrics import MeteredScheduler, ServiceMetrics

TOKEN = "t0ken-for-tests"


AUTH = {"Authorization": f"Bearer {TOKEN}"}


REPO = Path(__file__).resolve().parents[4]


YAML = {**AUTH, "Content-Type": "application/yaml"}


T0 = 1_766_000_000.0


TASK_ID_RE = re.compile(r"mvp2-admin-(ppo|grpo|sft)-\d{8}-\d{6}-[0-9a-f]{4}")


INSUFFICIENT = "ValueError: Total available GPUs 2.0 is less than total desired GPUs 4"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeLoop:
    """What the API sees of SchedulerLoop: wake() and the health counters."""

    wakes: int = 0
    ticks: int = 7
    errors: int = 0
    alive: bool = True
    failed: bool = False
    last_error: str | None = None
    last_tick_duration_s: float = 0.004
    degraded: str | None = None

    def wake(self) -> None:
        self.wakes += 1


@dataclass
class Env:
    shared: Path
    settings: Settings
    store: Store
    cluster: FakeCluster
    artifacts: Artifacts
    scheduler: MeteredScheduler
    metrics: ServiceMetrics
    clock: Clock
    loop: FakeLoop = field(default_factory=FakeLoop)

    def tick(self, advance: float = 0.0) -> Any:
        self.clock.now += advance
        self.cluster.clock = self.clock.now
        return self.scheduler.tick(self.clock.now)

    def sid(self, task_id: str, attempt: int = 1) -> str:
        return f"{task_id}--a{attempt:02d}"


def jobspec(shared: Path, **fields: Any) -> str:
    doc = {
        "workload": "ppo",
        "code_path": f"{shared}/code/verl",
        "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
        "train_file": f"{shared}/data/train.parquet",
        "val_file": f"{shared}/data/test.parquet",
        "nnodes": 1,
        "n_gpus_per_node": 2,
        **fields,
    }
    return "".join(f"{k}: {'null' if v is None else v}\n" for k, v in doc.items())


def make_app(env: Env, **kw: Any):
    kw.setdefault("wake_interval_s", 0.0)  # every request wakes the loop (see test_waker_*)
    return create_app(env.settings, env.store, env.cluster, env.artifacts, token=TOKEN,
                      scheduler_loop=env.loop, clock=env.clock, metrics=env.metrics, **kw)


async def submit(client, env: Env, **fields: Any) -> str:
    resp = await client.post("/api/v2/tasks", data=jobspec(env.shared, **fields), headers=YAML)
    assert resp.status == 201, await resp.text()
    return (await resp.json())["task_id"]


async def get_json(client, path: str, status: int = 200, **params: Any) -> Any:
    resp = await client.get(path, headers=AUTH, params=params)
    assert resp.status == status, await resp.text()
    return await resp.json()


async def state_of(client, task_id: str) -> str:
    return (await get_json(client, f"/api/v2/tasks/{task_id}"))["state"]


def assert_error(body: dict[str, Any], code: str) -> dict[str, Any]:
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"code", "message", "details"}
    assert err["code"] == code and err["message"]
    assert isinstance(err["details"], list)
    return err
