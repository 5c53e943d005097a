"""The harness shared by the tests of this folder (``test_api_users.py`` and its siblings):
constants, builders and helpers; the fixtures are in ``conftest.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from service.cluster.fake import FakeCluster
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.store.writer import Store
from service.web.app import create_app
from service.web.metrics import ServiceMetrics

BOOTSTRAP = "bootstrap-token-of-the-operator"


T0 = 1_766_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    shared: Path
    store: Store
    cluster: FakeCluster
    scheduler: Scheduler
    clock: Clock
    tokens: dict[str, str]  # caller -> token

    def tick(self, advance: float = 1.0) -> None:
        self.clock.now += advance
        self.cluster.clock = self.clock.now
        self.scheduler.tick(self.clock.now)

    def auth(self, who: str) -> dict[str, str]:
        return {} if who == "anonymous" else {"Authorization": f"Bearer {self.tokens[who]}"}


def jobspec(shared: Path, gpus: int = 1) -> str:
    return (f"workload: sft\ncode_path: {shared}/code\nmodel_id: org/model\n"
            f"train_file: {shared}/train.parquet\nval_file: null\nnnodes: 1\n"
            f"n_gpus_per_node: {gpus}\n")


def app_of(world: World):
    return create_app(world.settings, world.store, world.cluster,  # type: ignore[attr-defined]
                      Artifacts(world.settings.shared_root), token=BOOTSTRAP,  # type: ignore
                      clock=world.clock,
                      metrics=ServiceMetrics(world.store.tasks.counts_by_state, users=world.store))


async def submit_as(client, world: World, who: str, gpus: int = 1) -> str:
    resp = await client.post("/api/v2/tasks", data=jobspec(world.shared, gpus),
                             headers={**world.auth(who), "Content-Type": "application/yaml"})
    assert resp.status == 201, await resp.text()
    return (await resp.json())["task_id"]


CALLERS = ("anonymous", "carol", "alice", "bob", "ada", "bootstrap")


OK_ALL = {"alice": 200, "bob": 200, "ada": 200, "bootstrap": 200}


OWNER = {"alice": 200, "bob": 403, "ada": 200, "bootstrap": 200}


ADMIN = {"alice": 403, "bob": 403, "ada": 200, "bootstrap": 200}


EXPECTED: dict[tuple[str, str], dict[str, int]] = {
    ("POST", "/api/v2/tasks"): {k: 201 for k in OK_ALL},
    ("GET", "/api/v2/tasks"): OK_ALL,
    ("GET", "/api/v2/tasks/{task_id}"): OK_ALL,
    # the task is on the cluster by then: past the owner check, its state refuses it
    ("PATCH", "/api/v2/tasks/{task_id}"): {**OWNER, "alice": 409, "ada": 409,
                                           "bootstrap": 409},
    ("GET", "/api/v2/tasks/{task_id}/attempts"): OK_ALL,
    ("GET", "/api/v2/tasks/{task_id}/events"): OK_ALL,
    ("POST", "/api/v2/tasks/{task_id}:cancel"): {**OWNER, "alice": 202, "ada": 202,
                                                 "bootstrap": 202},
    ("GET", "/api/v2/tasks/{task_id}/logs"): OWNER,
    ("GET", "/api/v2/tasks/{task_id}/metrics"): OWNER,  # read from the logs
    ("GET", "/api/v2/queue"): OK_ALL,
    ("POST", "/api/v2/pipelines"): {k: 201 for k in OK_ALL},
    ("GET", "/api/v2/pipelines"): OK_ALL,
    ("GET", "/api/v2/pipelines/{pipeline_id}"): OWNER,
    ("POST", "/api/v2/pipelines/{pipeline_id}/cancel"): OWNER,
    ("GET", "/api/v2/me"): OK_ALL,
    ("GET", "/api/v2/users"): ADMIN,
    ("POST", "/api/v2/users"): {**ADMIN, "ada": 201, "bootstrap": 201},
    ("GET", "/api/v2/users/{name}"): OWNER,
    ("DELETE", "/api/v2/users/{name}"): {**ADMIN, "ada": 405, "bootstrap": 405},
    ("POST", "/api/v2/users/{name}:disable"): ADMIN,
    ("POST", "/api/v2/users/{name}:enable"): ADMIN,
    ("GET", "/api/v2/users/{name}/tokens"): OWNER,
    ("POST", "/api/v2/users/{name}/tokens"): {**OWNER, "alice": 201, "ada": 201,
                                              "bootstrap": 201},
    ("POST", "/api/v2/users/{name}/tokens/{token_id}:revoke"): OWNER,
    ("GET", "/api/v2/usage"): OK_ALL,
    ("POST", "/api/v2/webhooks"): {k: 201 for k in OK_ALL},
    ("GET", "/api/v2/webhooks"): OK_ALL,
    ("DELETE", "/api/v2/webhooks/{hook_id}"): OWNER,  # alice's hook
    ("GET", "/api/v2/webhooks/{hook_id}/deliveries"): OWNER,
    ("GET", "/api/v2/nodes"): OK_ALL,
    ("GET", "/api/v2/nodes/{node}/events"): OK_ALL,
    ("POST", "/api/v2/nodes/{node}:cordon"): ADMIN,
    ("POST", "/api/v2/nodes/{node}:drain"): ADMIN,
    ("POST", "/api/v2/nodes/{node}:resume"): ADMIN,  # a node cordoned before
    ("GET", "/api/v2/openapi.json"): {**OK_ALL, "anonymous": 200, "carol": 200},
    ("GET", "/metrics"): OK_ALL,
    ("GET", "/healthz"): {**OK_ALL, "anonymous": 200, "carol": 200},
    ("GET", "/readyz"): {**OK_ALL, "anonymous": 200, "carol": 200},
}


CASES = [(m, p, who) for (m, p) in EXPECTED for who in CALLERS]


PUBLIC_HOOK = "https://93.184.215.14/hook"  # a public IP literal: no DNS, never called
