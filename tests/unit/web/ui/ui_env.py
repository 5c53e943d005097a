"""The harness shared by the tests of this folder (``test_ui.py`` and its siblings):
constants, builders and helpers; the fixtures are in ``conftest.py``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.cluster.fake import FakeCluster
from service.config import Settings
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.store.writer import Store
from service.web.metrics import MeteredScheduler, ServiceMetrics

TOKEN = "t0ken-for-ui-tests"


AUTH = {"Authorization": f"Bearer {TOKEN}"}


T0 = 1_766_000_000.0


SCRIPT = "<script>alert(1)</script>"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Loop:
    ticks = errors = 0
    alive, failed, last_error, last_tick_duration_s, degraded = True, False, None, 0.0, None

    def wake(self) -> None:
        pass


@dataclass
class Env:
    shared: Path
    settings: Settings
    store: Store
    cluster: FakeCluster
    scheduler: MeteredScheduler
    metrics: ServiceMetrics
    clock: Clock

    def tick(self, advance: float = 1.0) -> None:
        self.clock.now += advance
        self.cluster.clock = self.clock.now
        self.scheduler.tick(self.clock.now)


def make_env(tmp_path: Path, settings: Settings, store_url: str | None = None) -> Env:
    """A store, a fake cluster, a metered scheduler and a clock at ``T0`` under ``tmp_path``
    (``settings.shared_root`` is the shared tree; ``store_url``: the store's database, a
    SQLite file in ``tmp_path`` by default); the caller closes ``env.store``."""
    shared = Path(settings.shared_root)
    store = Store(store_url or str(tmp_path / "db.sqlite3"))
    cluster = FakeCluster(clock=T0)
    clock = Clock(T0)
    metrics = ServiceMetrics(store.tasks.counts_by_state, users=store, queue=store.console,
                             nodes=store.nodes, clock=clock)
    scheduler = MeteredScheduler(Scheduler(store, cluster, settings, Artifacts(str(shared))),
                                 metrics)
    return Env(shared, settings, store, cluster, scheduler, metrics, clock)


def jobspec(shared: Path, gpus: int = 2, overrides: tuple[str, ...] = (),
            max_runtime_s: int | None = None, description: str | None = None,
            extra: str = "") -> str:
    text = (f"workload: ppo\ncode_path: {shared}/code/verl\n"
            f"model_id: Qwen/Qwen2.5-0.5B-Instruct\ntrain_file: {shared}/data/train.parquet\n"
            f"val_file: {shared}/data/test.parquet\nnnodes: 1\nn_gpus_per_node: {gpus}\n")
    if max_runtime_s is not None:
        text += f"max_runtime_s: {max_runtime_s}\n"
    if description is not None:
        text += f"description: {description!r}\n"
    if overrides:
        text += "overrides:\n" + "".join(f"  - {o!r}\n" for o in overrides)
    return text + extra


async def submit(client, env: Env, token: str = TOKEN, **kw: Any) -> str:
    resp = await client.post("/api/v2/tasks", data=jobspec(env.shared, **kw), headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/yaml"})
    assert resp.status == 201, await resp.text()
    return (await resp.json())["task_id"]


async def sign_in(client, token: str = TOKEN) -> None:
    resp = await client.post("/ui/signin", data={"token": token, "next": "/ui/queue"},
                             allow_redirects=False)
    assert resp.status == 303, await resp.text()
    assert resp.headers["Location"] == "/ui/queue"


async def page(client, path: str, status: int = 200) -> str:
    resp = await client.get(path, allow_redirects=False)
    text = await resp.text()
    assert resp.status == status, text
    return text


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no form token in the page"
    return match.group(1)
