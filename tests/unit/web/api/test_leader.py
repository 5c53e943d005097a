"""Several instances on one PostgreSQL database (issue 54): each serves the API, exactly
one (the lease's holder) runs the scheduler, and a standby takes over when the leader
stops. Two real apps in this process on a FakeCluster, each with its own identity."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from service import main as main_mod
from service.cluster.fake import FakeCluster
from service.domain.lease import Instance

pytestmark = pytest.mark.postgres
TOKEN = "s3cret-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"}


def settings_for(tmp_path: Path, url: str, port: int) -> main_mod.Settings:
    cfg = tmp_path / f"argus-{port}.yaml"
    cfg.write_text(
        f"ray:\n  shared_root: {tmp_path / 'shared'}\n"
        f"v2:\n  api: {{host: 127.0.0.1, port: {port}}}\n"
        f"  store: {{url: '{url}', lease_ttl_s: 3}}\n"
        "  scheduler: {tick_s: 0.2}\n")
    return main_mod.load_settings(cfg, environ={})


def task_body(tmp_path: Path) -> str:
    shared = tmp_path / "shared"
    (shared / "code").mkdir(parents=True, exist_ok=True)
    return (f"workload: sft\ncode_path: {shared}/code\nmodel_id: org/model\n"
            f"train_file: {shared}/train.parquet\nval_file: null\nnnodes: 1\n"
            "n_gpus_per_node: 1\n")


async def until(check, what: str, within_s: float = 10.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if value := await check():
            return value
        await asyncio.sleep(0.05)  # a poll of real threads, with a deadline
    raise AssertionError(f"not within {within_s} s: {what}")


async def test_one_instance_leads_the_other_serves_and_takes_over_when_it_stops(
        tmp_path: Path, aiohttp_client, pg_server, monkeypatch) -> None:
    url = pg_server.store_database()
    # one process, two instances: distinct hosts, so only the lease's expiry or release
    # (never "a dead pid on this host") hands it over
    monkeypatch.setattr(main_mod, "this_instance", lambda port: Instance(
        f"host{port}:1:abc", f"host{port}", 1, f"host{port}:{port}"))
    first = await aiohttp_client(main_mod.build_service(
        settings_for(tmp_path, url, 18081), TOKEN, FakeCluster()))
    second_app = main_mod.build_service(settings_for(tmp_path, url, 18082), TOKEN,
                                        FakeCluster())
    second = await aiohttp_client(second_app)

    async def instance(client) -> dict:
        return (await (await client.get("/readyz")).json())["instance"]

    mine = await instance(second)
    assert mine["role"] == "standby" and mine["leader"]["holder"] == "host18081:1:abc"
    assert (await instance(first))["role"] == "leader"
    health = await (await second.get("/healthz")).json()
    assert health["status"] == "ok" and health["scheduler"]["role"] == "standby"
    assert health["scheduler"]["alive"] is False

    async def state(client, task_id: str) -> str:
        answer = await client.get(f"/api/v2/tasks/{task_id}", headers=HEADERS)
        return (await answer.json())["state"]

    # a submit through the standby is admitted by the leader's scheduler
    resp = await second.post("/api/v2/tasks", data=task_body(tmp_path), headers=HEADERS)
    assert resp.status == 201, await resp.text()
    queued = (await resp.json())["task_id"]

    async def pending(client, task_id: str):
        return await state(client, task_id) == "PENDING_RESOURCES"

    await until(lambda: pending(second, queued), "the leader to take the task in")
    metrics = await (await second.get("/metrics", headers=HEADERS)).text()
    assert 'argus_instance_leader{address="host18082:18082",instance="host18082:1:abc"} 0.0' \
        in metrics

    await first.close()  # a clean stop releases the lease: the standby takes it at once

    async def leads() -> bool:
        return (await instance(second))["role"] == "leader"

    await until(leads, "the standby to take over", within_s=5.0)
    mine = await instance(second)
    assert mine["leader"]["holder"] == "host18082:1:abc" and mine["leader"]["epoch"] == 2
    resp = await second.post("/api/v2/tasks", data=task_body(tmp_path), headers=HEADERS)
    later = (await resp.json())["task_id"]
    await until(lambda: pending(second, later), "the new leader to take a task in")
    # the console's cluster page says who leads, and which instance drew the page
    await second.post("/ui/signin", data={"token": TOKEN, "next": "/ui/cluster"},
                      allow_redirects=False)
    html = await (await second.get("/ui/cluster")).text()
    assert "led by <code>host18082:1:abc</code> (host18082:18082)" in html
    assert "epoch 2;" in html and ">leader</span>" in html


async def test_a_token_revoked_through_one_instance_is_refused_by_the_other(
        tmp_path: Path, aiohttp_client, pg_server, monkeypatch) -> None:
    """Each instance caches token rows; a revocation is written through one of them, and
    the other reads the row again within its cache's TTL (2 s), never trusting it longer."""
    url = pg_server.store_database()
    monkeypatch.setattr(main_mod, "this_instance", lambda port: Instance(
        f"host{port}:1:abc", f"host{port}", 1, f"host{port}:{port}"))
    one = await aiohttp_client(main_mod.build_service(
        settings_for(tmp_path, url, 18083), TOKEN, FakeCluster()))
    other = await aiohttp_client(main_mod.build_service(
        settings_for(tmp_path, url, 18084), TOKEN, FakeCluster()))
    admin = {"Authorization": f"Bearer {TOKEN}"}
    assert (await one.post("/api/v2/users", json={"name": "bob"}, headers=admin)).status == 201
    made = await (await one.post("/api/v2/users/bob/tokens", json={}, headers=admin)).json()
    bob = {"Authorization": f"Bearer {made['token']}"}
    assert (await other.get("/api/v2/me", headers=bob)).status == 200  # cached there now
    revoked = await one.post(f"/api/v2/users/bob/tokens/{made['token_id']}:revoke",
                             headers=admin)
    assert revoked.status == 200
    assert (await one.get("/api/v2/me", headers=bob)).status == 401  # at once where written

    async def refused() -> bool:
        return (await other.get("/api/v2/me", headers=bob)).status == 401

    await until(refused, "the other instance to refuse the revoked token", within_s=5.0)


async def test_a_standby_answers_the_leaders_view_of_nodes_and_estimates(
        tmp_path: Path, aiohttp_client, pg_server, monkeypatch) -> None:
    """What comes from the leader's last tick (the nodes' free GPUs, a waiting task's
    start estimate) is answered by a standby as by the leader: published through the
    database (service/engine/shared_view.py), not empty."""
    url = pg_server.store_database()
    monkeypatch.setattr(main_mod, "this_instance", lambda port: Instance(
        f"host{port}:1:abc", f"host{port}", 1, f"host{port}:{port}"))
    cluster = FakeCluster(clock=time.time())
    cluster.add_node("n" * 28, gpus=4, name="w1")
    leader = await aiohttp_client(main_mod.build_service(
        settings_for(tmp_path, url, 18085), TOKEN, cluster))
    standby = await aiohttp_client(main_mod.build_service(
        settings_for(tmp_path, url, 18086), TOKEN, FakeCluster()))  # never asked
    body = task_body(tmp_path).replace("n_gpus_per_node: 1", "n_gpus_per_node: 4") + \
        "max_runtime_s: 3600\n"
    first, waiting = [(await (await leader.post("/api/v2/tasks", data=body,
                                               headers=HEADERS)).json())["task_id"]
                      for _ in range(2)]

    async def page(client, path: str) -> dict:
        return await (await client.get(path, headers=HEADERS)).json()

    def estimate(task: dict) -> tuple:
        return task["estimated_start"], task["estimate_basis"], task["estimated_start_bound"]

    async def estimated() -> tuple | None:
        mine = estimate(await page(leader, f"/api/v2/tasks/{waiting}"))
        return mine if mine[0] is not None else None

    async def submitted() -> str | None:  # the first's job on Ray (the fake)
        return next(iter(cluster.jobs), None)

    cluster.start(await until(submitted, "the leader to submit the first"), {"n" * 28: 4})
    await until(estimated, "the leader to estimate the waiting task's start")

    async def standby_agrees() -> bool:
        theirs = estimate(await page(standby, f"/api/v2/tasks/{waiting}"))
        return theirs == estimate(await page(leader, f"/api/v2/tasks/{waiting}"))

    await until(standby_agrees, "the standby to answer the leader's estimate")
    assert estimate(await page(standby, f"/api/v2/tasks/{first}")) == (None, None, None)

    async def same_nodes() -> dict | None:
        theirs = await page(standby, "/api/v2/nodes")
        same = theirs["nodes"] == (await page(leader, "/api/v2/nodes"))["nodes"]
        return theirs if same else None

    theirs = await until(same_nodes, "the standby to answer the leader's nodes")
    assert [(n["name"], n["gpus_total"]) for n in theirs["nodes"]] == [("w1", 4.0)]
    assert theirs["observed_at"] is not None
