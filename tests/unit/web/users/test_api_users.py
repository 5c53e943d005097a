"""Users through the HTTP API: every route's authorization by table, tokens' life, the
401 messages, no secret in any log line, ownership, filters, usage, per-user metrics.

A real app and Store, FakeCluster and the real Scheduler driven tick by tick with an
injected clock: no sleeps.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from users_world import (
    BOOTSTRAP,
    CASES,
    EXPECTED,
    PUBLIC_HOOK,
    T0,
    World,
    app_of,
    jobspec,
    submit_as,
)

from service.domain.nodes import NodeSource
from service.domain.rows import EventRow
from service.domain.states import RayStatus, TaskState
from service.engine.artifacts import Artifacts
from service.policy.quotas import Limits
from service.web.api.auth import Access
from service.web.api.deps import DEPS
from service.web.app import ROUTES, create_app, path_template


def test_the_table_covers_every_route_and_agrees_with_its_access() -> None:
    routes = {(m, path_template(p)): access for m, p, _, access in ROUTES}
    assert set(EXPECTED) == set(routes)
    for route, access in routes.items():
        expected = EXPECTED[route]
        if access is Access.PUBLIC:
            assert expected["anonymous"] == expected["carol"] == 200, route
        if access is Access.ADMIN:
            assert expected["alice"] == expected["bob"] == 403, route


@pytest.mark.parametrize(("method", "path", "who"), CASES)
async def test_route_authorization(client, world: World, method: str, path: str,
                                   who: str) -> None:
    task = await submit_as(client, world, "alice")
    world.tick()  # submitted to the fake Ray: it has an attempt, hence logs
    world.cluster.write_log(f"{task}--a01", "step 1\n")
    spare = world.store.users.create_token("alice", "spare", None, T0, max_live=10).row.token_id
    hook = world.store.webhooks.create_webhook(owner="alice", url=PUBLIC_HOOK,
                                               events=["task.failed"],
                                      fmt="standard", now=T0, max_per_user=10).hook_id
    concrete = (path.replace("{task_id}", task).replace("{name}", "alice")
                .replace("{token_id}", spare).replace("{hook_id}", hook))
    kw: dict[str, Any] = {"headers": world.auth(who)}
    pipeline = {"name": "p", "stages": {"a": {"jobspec": yaml.safe_load(
        jobspec(world.shared))}}}
    if "{pipeline_id}" in path:
        resp = await client.post("/api/v2/pipelines", json=pipeline,
                                 headers=world.auth("alice"))
        concrete = path.replace("{pipeline_id}", (await resp.json())["pipeline_id"])
    if (method, path) == ("POST", "/api/v2/pipelines"):
        kw["json"] = pipeline
    elif (method, path) == ("POST", "/api/v2/tasks"):
        kw = {"headers": {**kw["headers"], "Content-Type": "application/yaml"},
              "data": jobspec(world.shared)}
    elif (method, path) == ("POST", "/api/v2/users"):
        kw["json"] = {"name": "dave"}
    elif (method, path) == ("POST", "/api/v2/webhooks"):
        kw["json"] = {"url": PUBLIC_HOOK, "events": ["task.succeeded"]}
    elif method == "PATCH":
        kw["json"] = {"priority": -1}
    elif "{node}" in path:  # n1: a node Ray lists (resume: cordoned first)
        client.server.app[DEPS].metrics.observed.record(T0, world.cluster.snapshot([]))
        if path.endswith(":resume"):
            world.store.nodes.cordon("n1", NodeSource.OPERATOR, "ada", T0, "test")
        concrete = path.replace("{node}", "n1")
        kw["json"] = {"reason": "test"}
    resp = await client.request(method, concrete, **kw)
    default = 401  # anonymous and carol (disabled) everywhere but /healthz
    assert resp.status == EXPECTED[(method, path)].get(who, default), await resp.text()
    if resp.status in (401, 403):
        body = await resp.json()
        assert body["error"]["code"] == {401: "unauthorized", 403: "forbidden"}[resp.status]
        assert body["error"]["message"]


# -- 401: which token problem, in the message; nothing changes --------------------------------


async def get_me(client, token: str) -> tuple[int, dict[str, Any]]:
    resp = await client.get("/api/v2/me", headers={"Authorization": f"Bearer {token}"})
    return resp.status, await resp.json()


async def test_revoked_expired_and_disabled_say_which(client, world: World) -> None:
    expiring = world.store.users.create_token("bob", "short", T0 + 60, T0, max_live=10)
    assert (await get_me(client, expiring.secret))[0] == 200
    world.clock.now = T0 + 61
    status, body = await get_me(client, expiring.secret)
    assert status == 401
    assert body["error"]["message"] == (
        f"token argus_{expiring.row.token_id} expired at 2025-12-17T19:34:20.000Z")

    bobs = next(t for t in world.store.users.list_tokens("bob") if t.label == "test")
    resp = await client.post(f"/api/v2/users/bob/tokens/{bobs.token_id}:revoke",
                             headers=world.auth("bob"))
    assert resp.status == 200 and (await resp.json())["state"] == "revoked"
    status, body = await get_me(client, world.tokens["bob"])
    assert status == 401 and "was revoked at" in body["error"]["message"]

    status, body = await get_me(client, world.tokens["carol"])
    assert status == 401 and body["error"]["message"] == "user carol is disabled"


async def test_a_wrong_secret_for_a_real_token_id_is_just_invalid(client, world) -> None:
    real = world.tokens["alice"]
    forged = real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB")
    world.store.users.set_user_enabled("alice", False, T0)
    status, body = await get_me(client, forged)
    assert status == 401 and body["error"]["message"] == "invalid token"  # no status leak


async def test_token_guessing_backs_off_with_429_but_known_tokens_still_pass(
        client, world: World, caplog) -> None:
    from service.policy.failure_guard import API

    caplog.set_level(logging.WARNING)
    assert (await get_me(client, world.tokens["alice"]))[0] == 200  # alice's row is cached
    secret = "g" * 43
    guesses = [f"argus_{i:012x}_{secret}" for i in range(API.free_failures + 1)]
    for guess in guesses:
        assert (await get_me(client, guess))[0] == 401
    status, body = await get_me(client, "argus_0000000000ff_" + "g" * 43)
    assert status == 429 and body["error"]["code"] == "auth_backoff"
    resp = await client.get("/api/v2/me", headers=world.auth("bob"))  # not cached: waits
    assert resp.status == 429 and resp.headers["Retry-After"] == "1"
    # who already signed in from this address is served on: alice, and the environment's
    assert (await get_me(client, world.tokens["alice"]))[0] == 200
    assert (await get_me(client, BOOTSTRAP))[0] == 200
    world.clock.now += 1.0  # the wait is over: one more check, then a doubled wait
    assert (await get_me(client, world.tokens["bob"]))[0] == 200
    assert (await get_me(client, guesses[0]))[0] == 401
    resp = await client.get("/api/v2/me", headers={"Authorization": f"Bearer {guesses[1]}"})
    assert resp.status == 429 and resp.headers["Retry-After"] == "2"
    failures = [r.getMessage() for r in caplog.records if "failed API token" in r.getMessage()]
    assert failures == ["1 failed API token check(s) since the last report"]  # in aggregate
    assert not any(g in r.getMessage() for r in caplog.records for g in guesses)


@pytest.mark.parametrize("token", [
    "x" * 513, "argus_" + "0" * 12 + "_" + "a" * 43, "tøken-ñ", "bootstrap-token-of-the-operatoR",
    BOOTSTRAP + "x", BOOTSTRAP[:-1], "a" * 100_000,
])
async def test_odd_tokens_are_401_and_change_nothing(client, world, token) -> None:
    before = [t.last_used_at for t in world.store.users.list_tokens("alice")]
    resp = await client.get("/api/v2/me", headers={"Authorization": f"Bearer {token}"})
    assert resp.status in (400, 401)  # the HTTP parser may refuse an oversized header first
    if resp.status == 401:
        assert (await resp.json())["error"]["message"] in ("invalid token",)
    assert [t.last_used_at for t in world.store.users.list_tokens("alice")] == before


async def test_non_ascii_bootstrap_token_still_works(aiohttp_client, world) -> None:
    token = "test-token-不是秘密"
    client = await aiohttp_client(create_app(
        world.settings, world.store, world.cluster,  # type: ignore[attr-defined]
        Artifacts(world.shared), token=token, clock=world.clock))
    resp = await client.get("/api/v2/me", headers={"Authorization": f"Bearer {token}"})
    assert resp.status == 200 and (await resp.json())["name"] == "root"


async def test_undecodable_header_bytes_are_401(client, world) -> None:
    reader, writer = await __import__("asyncio").open_connection(client.host, client.port)
    writer.write(b"GET /api/v2/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n"
                 b"Connection: close\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]


# -- tokens: lifecycle, last use, no secret anywhere ------------------------------------------


async def test_token_lifecycle_through_the_api(client, world: World, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    resp = await client.post("/api/v2/users/me/tokens", headers=world.auth("alice"),
                             json={"label": "ci", "expires_in_s": 3600})
    assert resp.status == 201
    created = await resp.json()
    secret = created["token"]
    assert created["user"] == "alice" and created["state"] == "active"
    assert created["prefix"] == f"argus_{created['token_id']}" and created["label"] == "ci"
    assert created["expires_at"] == "2025-12-17T20:33:20.000Z"
    status, me = await get_me(client, secret)
    assert status == 200 and me["name"] == "alice" and me["role"] == "user"
    assert me["token"]["token_id"] == created["token_id"] and not me["token"]["bootstrap"]
    assert me["limits"] == {"max_running_tasks": 0, "max_gpus": 4, "max_waiting_tasks": 1000,
                            "max_spec_bytes_per_day": 64 << 20}
    listed = await (await client.get("/api/v2/users/alice/tokens",
                                     headers=world.auth("alice"))).json()
    assert sorted(t["label"] for t in listed["tokens"]) == ["ci", "test"]
    assert all("token" not in t and "sha256" not in t for t in listed["tokens"])
    await submit_as(client, world, "alice")
    resp = await client.post(f"/api/v2/users/me/tokens/{created['token_id']}:revoke",
                             headers={"Authorization": f"Bearer {secret}"})
    assert resp.status == 200 and (await resp.json())["changed"] is True
    assert (await get_me(client, secret))[0] == 401  # at once: no cache outlives it
    # no secret (nor its hash) in any log line, whatever happened
    sha = world.store.users.token_auth(created["token_id"]).sha256
    # the secret part: all after argus_<id>_ (it may hold "_" itself: token_urlsafe)
    secret_part = secret.removeprefix(f"argus_{created['token_id']}_")
    assert len(secret_part) == 43
    for tok in (secret, world.tokens["alice"], BOOTSTRAP, sha, secret_part):
        assert tok not in caplog.text
    assert f"argus_{created['token_id']}" in caplog.text  # the public prefix is fine


async def test_last_used_is_written_at_most_once_a_minute(client, world, monkeypatch) -> None:
    writes: list[float] = []
    real = world.store.users.touch_token
    monkeypatch.setattr(world.store.users, "touch_token",
                        lambda token_id, now: (writes.append(now), real(token_id, now)))
    for _ in range(5):
        assert (await get_me(client, world.tokens["bob"]))[0] == 200
    world.clock.now += 59
    assert (await get_me(client, world.tokens["bob"]))[0] == 200
    assert writes == [T0]
    world.clock.now += 2
    assert (await get_me(client, world.tokens["bob"]))[0] == 200
    assert writes == [T0, T0 + 61]
    assert world.store.users.list_tokens("bob")[0].last_used_at == T0 + 61


@pytest.mark.parametrize(("who", "path", "body", "status", "needle"), [
    ("alice", "/api/v2/users/bob/tokens", {}, 403, "only bob or an admin"),
    ("ada", "/api/v2/users/ghost/tokens", {}, 404, "user ghost not found"),
    ("ada", "/api/v2/users/carol/tokens", {}, 409, "user carol is disabled"),
    ("ada", "/api/v2/users/Bad--Name/tokens", {}, 400, "invalid user name"),
    ("alice", "/api/v2/users/me/tokens", {"label": ""}, 400, "invalid token request"),
    ("alice", "/api/v2/users/me/tokens", {"expires_in_s": -5}, 400, "invalid token request"),
    ("alice", "/api/v2/users/me/tokens", {"expires_at": "2020-01-01T00:00:00Z"}, 400,
     "invalid token request"),
    ("alice", "/api/v2/users/me/tokens", {"expires_at": "soon"}, 400, "invalid token"),
    ("alice", "/api/v2/users/me/tokens", {"expires_at": "2026-01-01", "expires_in_s": 5},
     400, "invalid token request"),
    ("alice", "/api/v2/users/me/tokens", {"secret": "mine"}, 400, "invalid token request"),
    ("alice", "/api/v2/users/me/tokens", [1], 400, "must be a JSON object"),
])
async def test_token_requests_that_change_nothing(client, world, who, path, body, status,
                                                  needle) -> None:
    before = {n: len(world.store.users.list_tokens(n)) for n in ("alice", "bob", "carol")}
    resp = await client.post(path, headers=world.auth(who), json=body)
    assert resp.status == status, await resp.text()
    assert needle in (await resp.json())["error"]["message"]
    assert {n: len(world.store.users.list_tokens(n)) for n in before} == before


async def test_token_body_must_be_json(client, world) -> None:
    resp = await client.post("/api/v2/users/me/tokens", data="label=x",
                             headers={**world.auth("alice"), "Content-Type": "text/plain"})
    assert resp.status == 415
    resp = await client.post("/api/v2/users/me/tokens", data="{not json",
                             headers={**world.auth("alice"), "Content-Type": "application/json"})
    assert resp.status == 400
    resp = await client.post("/api/v2/users/me/tokens", data="x" * 20_000,
                             headers={**world.auth("alice"), "Content-Type": "application/json"})
    assert resp.status == 413
    resp = await client.post("/api/v2/users/me/tokens", data="[" * 5000,  # too deep: not a 500
                             headers={**world.auth("alice"), "Content-Type": "application/json"})
    assert resp.status == 400
    resp = await client.post("/api/v2/users/me/tokens", data='{"label": "x"}', headers={
        **world.auth("alice"), "Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert resp.status == 415
    assert [t.label for t in world.store.users.list_tokens("alice")] == ["test"]


async def test_revoking_someone_elses_or_an_unknown_token(client, world) -> None:
    bobs = world.store.users.list_tokens("bob")[0].token_id
    resp = await client.post(f"/api/v2/users/alice/tokens/{bobs}:revoke",
                             headers=world.auth("alice"))
    assert resp.status == 404  # not alice's token, whatever its id
    resp = await client.post(f"/api/v2/users/bob/tokens/{bobs}:revoke",
                             headers=world.auth("alice"))
    assert resp.status == 403
    assert world.store.users.get_token(bobs).revoked_at is None


# -- users ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"name": "alice"}, 409, "name"),
    ({"name": "Alice"}, 400, "name"),
    ({"name": "al--ice"}, 400, "name"),
    ({"name": "me"}, 400, "name"),
    ({"name": "dave", "role": "root"}, 400, "role"),
    ({"name": "dave", "extra": 1}, 400, "extra"),
    ({}, 400, "name"),
])
async def test_bad_user_creation_changes_nothing(client, world, body, status, field) -> None:
    before = world.store.users.list_users()
    resp = await client.post("/api/v2/users", headers=world.auth("ada"), json=body)
    assert resp.status == status, await resp.text()
    assert field in [d["field"] for d in (await resp.json())["error"]["details"]]
    assert world.store.users.list_users() == before


async def test_create_user_then_their_first_token(client, world) -> None:
    resp = await client.post("/api/v2/users", headers=world.auth("ada"),
                             json={"name": "dave", "role": "admin"})
    assert resp.status == 201
    assert (await resp.json())["role"] == "admin"
    resp = await client.post("/api/v2/users/dave/tokens", headers=world.auth("ada"))
    token = (await resp.json())["token"]
    status, me = await get_me(client, token)
    assert (status, me["name"], me["role"]) == (200, "dave", "admin")


async def test_disabling_a_user_with_tasks_on_the_cluster_and_in_the_queue(client, world
                                                                           ) -> None:
    running = await submit_as(client, world, "bob")
    world.tick()
    world.cluster.start(f"{running}--a01", {"n1": 1})
    world.tick()
    queued = await submit_as(client, world, "bob")
    resp = await client.post("/api/v2/users/bob:disable", headers=world.auth("ada"))
    assert resp.status == 200
    body = await resp.json()
    assert body["changed"] and not body["user"]["enabled"]
    assert (body["active_tasks"], body["queued_tasks"]) == (1, 1)
    assert "1 task(s) on the cluster run to their end" in body["effect"]
    assert (await get_me(client, world.tokens["bob"]))[0] == 401  # at once
    world.tick()
    task = world.store.tasks.get_task(queued)
    assert task.state.value == "PENDING_RESOURCES"
    assert task.pending_reason.startswith("user bob is disabled")
    assert world.store.tasks.get_task(running).state.value == "RUNNING"
    # an admin may still cancel the disabled user's tasks
    resp = await client.post(f"/api/v2/tasks/{queued}:cancel", headers=world.auth("ada"))
    assert resp.status == 200
    events = [(e.event_type, e.payload.get("by")) for e in world.store.tasks.events(queued)]
    assert events[0] == ("CREATED", "bob") and events[-1] == ("STATE_TRANSITION", "ada")
    resp = await client.post("/api/v2/users/bob:disable", headers=world.auth("ada"))
    assert (await resp.json())["changed"] is False
    resp = await client.post("/api/v2/users/bob:enable", headers=world.auth("ada"))
    assert (await resp.json())["user"]["enabled"] is True
    assert (await get_me(client, world.tokens["bob"]))[0] == 200


async def test_the_bootstrap_admin_cannot_be_disabled_and_users_are_not_deleted(client, world
                                                                                ) -> None:
    resp = await client.post("/api/v2/users/root:disable", headers=world.auth("ada"))
    assert resp.status == 409 and "bootstrap admin" in (await resp.json())["error"]["message"]
    resp = await client.delete("/api/v2/users/bob", headers=world.auth("ada"))
    assert resp.status == 405
    assert "disable bob instead" in (await resp.json())["error"]["message"]
    assert world.store.users.get_user("bob") is not None
    assert world.store.users.get_user("root").enabled
    resp = await client.post("/api/v2/users/ghost:disable", headers=world.auth("ada"))
    assert resp.status == 404


async def test_me_with_the_bootstrap_token(client, world) -> None:
    status, me = await get_me(client, BOOTSTRAP)
    assert (status, me["name"], me["role"], me["token"]["bootstrap"]) == (
        200, "root", "admin", True)


# -- ownership and filters ----------------------------------------------------------------------


async def test_tasks_belong_to_their_submitter_and_everyone_sees_them(client, world) -> None:
    a = await submit_as(client, world, "alice")
    b = await submit_as(client, world, "bob")
    assert re.fullmatch(r"mvp2-alice-sft-\d{8}-\d{6}-[0-9a-f]{4}", a)
    for who in ("alice", "bob"):
        got = await (await client.get(f"/api/v2/tasks/{b}", headers=world.auth(who))).json()
        assert got["user"] == "bob"
    resp = await client.post(f"/api/v2/tasks/{b}:cancel", headers=world.auth("alice"))
    assert resp.status == 403
    assert "only its owner (bob) or an admin" in (await resp.json())["error"]["message"]
    assert world.store.tasks.get_task(b).state.value == "QUEUED"

    async def ids(path: str, who: str, **params: str) -> list[str]:
        resp = await client.get(path, headers=world.auth(who), params=params)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        tasks = body["tasks"] if "tasks" in body else body["pending"] + body["running"]
        return [t["task_id"] for t in tasks]

    assert await ids("/api/v2/tasks", "alice") == [b, a]  # everyone's by default
    assert await ids("/api/v2/tasks", "alice", user="me") == [a]
    assert await ids("/api/v2/tasks", "alice", user="bob") == [b]
    assert await ids("/api/v2/tasks", "alice", user="all") == [b, a]
    assert await ids("/api/v2/queue", "bob", user="me") == [b]
    queue = await (await client.get("/api/v2/queue", headers=world.auth("bob"),
                                    params={"user": "me"})).json()
    assert queue["pending"][0]["queue_position"] == 2  # counted in the whole queue
    for bad, needle in (("ghost", "no user 'ghost'"), ("Bad", "not a valid user name")):
        resp = await client.get("/api/v2/tasks", headers=world.auth("bob"),
                                params={"user": bad})
        assert resp.status == 400
        assert needle in (await resp.json())["error"]["details"][0]["message"]


async def test_files_land_in_the_owners_tree(client, world) -> None:
    task = await submit_as(client, world, "alice")
    world.tick()
    files = world.shared / "users" / "alice" / "jobs" / f"{task}--a01"
    assert (files / "submit.json").exists() and (files / "jobspec.yaml").exists()
    resp = await client.post(
        "/api/v2/tasks", data=jobspec(world.shared).replace(
            f"{world.shared}/train.parquet", f"{world.shared}/users/bob/train.parquet"),
        headers={**world.auth("alice"), "Content-Type": "application/yaml"})
    assert resp.status == 400
    detail = (await resp.json())["error"]["details"][0]
    assert detail["field"] == "train_file" and "user bob's tree" in detail["message"]


# -- priorities: who may ask for how much, and when ---------------------------------------------

NAME_OF = {"alice": "alice", "ada": "ada", "bootstrap": "root", "bob": "bob"}


def bring_to(world: World, task: str, state: str) -> None:
    """Move alice's 1-GPU task from QUEUED to ``state`` (or 16 GPUs: PENDING_RESOURCES)."""
    if state == "QUEUED":
        return
    if state == "CANCELED":
        world.store.tasks.cancel(task, world.clock.now, "alice")
        return
    world.tick()  # PENDING_RESOURCES (16 GPUs never fit) or SUBMITTED
    if state in ("RUNNING", "SUCCEEDED"):
        world.cluster.start(f"{task}--a01", {"n1": 1})
        world.tick()
    if state == "SUCCEEDED":
        world.cluster.finish(f"{task}--a01", RayStatus.SUCCEEDED)
        world.tick()
    assert world.store.tasks.get_task(task).state.value == state


def priority_events(world: World, task: str) -> list[EventRow]:
    return [e for e in world.store.tasks.events(task) if e.event_type == "PRIORITY_CHANGED"]


# (caller, state of alice's task, priority asked, status); users may ask for up to 0
# (max_user_priority), admins up to 1000. The owner check comes first, then the caller's
# allowance, then the task's state.
PRIORITY_CASES = [
    ("alice", "QUEUED", -10, 200),  # the owner steps back
    ("alice", "PENDING_RESOURCES", -1000, 200),
    ("alice", "QUEUED", 5, 403),  # above what users may ask for
    ("alice", "PENDING_RESOURCES", 1, 403),
    ("ada", "QUEUED", 500, 200),  # an admin raises it
    ("ada", "PENDING_RESOURCES", 1000, 200),
    ("bootstrap", "QUEUED", 1000, 200),
    ("ada", "QUEUED", -3, 200),
    ("bob", "QUEUED", -10, 403),  # another user's task
    ("bob", "PENDING_RESOURCES", -10, 403),
    ("alice", "SUBMITTED", -10, 409),  # no longer waiting
    ("alice", "RUNNING", -10, 409),
    ("ada", "RUNNING", 100, 409),
    ("alice", "SUCCEEDED", -10, 409),
    ("alice", "CANCELED", -10, 409),
    ("bob", "RUNNING", -10, 403),
    ("alice", "RUNNING", 5, 403),
    ("carol", "QUEUED", -10, 401),  # disabled
    ("anonymous", "QUEUED", -10, 401),
]


@pytest.mark.parametrize(("who", "state", "priority", "status"), PRIORITY_CASES)
async def test_priority_change_by_caller_and_state(client, world: World, who: str, state: str,
                                                   priority: int, status: int) -> None:
    task = await submit_as(client, world, "alice", gpus=16 if state == "PENDING_RESOURCES"
                           else 1)
    bring_to(world, task, state)
    before = world.store.tasks.get_task(task)
    resp = await client.patch(f"/api/v2/tasks/{task}", headers=world.auth(who),
                              json={"priority": priority})
    assert resp.status == status, await resp.text()
    body = await resp.json()
    after = world.store.tasks.get_task(task)
    if status != 200:
        assert body["error"]["code"] == {401: "unauthorized", 403: "forbidden",
                                         409: "conflict"}[status]
        assert after.priority == before.priority == 0 and after.state == before.state
        assert priority_events(world, task) == []
        return
    assert body["task_id"] == task and body["priority"] == priority == after.priority
    assert body["state"] == state and body["queue_position"] == 1
    (event,) = priority_events(world, task)
    assert event.payload == {"from": 0, "to": priority, "by": NAME_OF[who]}


async def test_priority_refusals_say_why(client, world: World) -> None:
    task = await submit_as(client, world, "alice")
    resp = await client.patch(f"/api/v2/tasks/{task}", headers=world.auth("alice"),
                              json={"priority": 7})
    err = (await resp.json())["error"]
    assert resp.status == 403
    assert err["message"] == ("priority 7 is above what users may ask for (0); only an "
                              "admin sets a priority up to 1000")
    assert err["details"] == [{"field": "priority", "message": err["message"]}]
    resp = await client.patch(f"/api/v2/tasks/{task}", headers=world.auth("bob"),
                              json={"priority": -1})
    assert "only its owner (alice) or an admin may change the priority of" in (
        await resp.json())["error"]["message"]
    world.tick()  # submitted
    resp = await client.patch(f"/api/v2/tasks/{task}", headers=world.auth("alice"),
                              json={"priority": -1})
    err = (await resp.json())["error"]
    assert resp.status == 409 and err["details"] == [{"field": "state",
                                                      "message": "SUBMITTED"}]
    assert err["message"] == (f"task {task} is SUBMITTED: only a waiting (BLOCKED, QUEUED or "
                              "PENDING_RESOURCES) task's priority can change")


async def test_a_user_may_keep_or_lower_what_an_admin_gave(client, world: World) -> None:
    task = await submit_as(client, world, "alice")
    for who, priority, status in (("ada", 300, 200), ("alice", 300, 403), ("alice", 0, 200),
                                  ("alice", 0, 200)):
        resp = await client.patch(f"/api/v2/tasks/{task}", headers=world.auth(who),
                                  json={"priority": priority})
        assert resp.status == status, (who, priority, await resp.text())
    assert world.store.tasks.get_task(task).priority == 0
    # an unchanged value writes no event
    assert [(e.payload["to"], e.payload["by"]) for e in priority_events(world, task)] == [
        (300, "ada"), (0, "alice")]


async def test_the_allowance_and_default_come_from_config(aiohttp_client, world: World
                                                          ) -> None:
    sched = replace(world.settings.scheduler, default_priority=-5,  # type: ignore[attr-defined]
                    max_user_priority=10)
    world.settings = replace(world.settings, scheduler=sched)  # type: ignore[attr-defined]
    client = await aiohttp_client(app_of(world))
    task = await submit_as(client, world, "alice")
    assert world.store.tasks.get_task(task).priority == -5  # the default, none asked for
    for priority, status in ((10, 200), (11, 403)):
        resp = await client.patch(f"/api/v2/tasks/{task}", headers=world.auth("alice"),
                                  json={"priority": priority})
        assert resp.status == status, await resp.text()
    assert world.store.tasks.get_task(task).priority == 10
    resp = await client.post("/api/v2/tasks", data=jobspec(world.shared) + "priority: 11\n",
                             headers={**world.auth("bob"), "Content-Type": "application/yaml"})
    assert resp.status == 403 and "(10)" in (await resp.json())["error"]["message"]


# (caller, priority in the JobSpec, status): users up to 0, admins up to 1000
SUBMIT_CASES = [
    ("alice", None, 201),  # the default (0)
    ("alice", -20, 201),
    ("alice", 0, 201),
    ("alice", 1, 403),
    ("bob", 1000, 403),
    ("ada", 1000, 201),
    ("bootstrap", 250, 201),
    ("ada", -1000, 201),
]


@pytest.mark.parametrize(("who", "priority", "status"), SUBMIT_CASES)
async def test_submit_with_a_priority(client, world: World, who: str, priority: int | None,
                                      status: int) -> None:
    spec = jobspec(world.shared) + ("" if priority is None else f"priority: {priority}\n")
    resp = await client.post("/api/v2/tasks", data=spec, headers={
        **world.auth(who), "Content-Type": "application/yaml"})
    assert resp.status == status, await resp.text()
    body = await resp.json()
    if status == 403:
        assert body["error"]["code"] == "forbidden"
        assert f"priority {priority} is above what users may ask for (0)" in (
            body["error"]["message"])
        assert world.store.tasks.list_tasks(state=None, limit=10, before_seq=None)[0] == []
        return
    task = world.store.tasks.get_task(body["task_id"])
    assert task.priority == (priority or 0) and task.user == NAME_OF[who]
    created = world.store.tasks.events(task.task_id)[0]
    assert created.event_type == "CREATED" and created.payload["priority"] == (priority or 0)


# -- usage and metrics -----------------------------------------------------------------------


async def test_usage_matches_runtime_times_gpus(client, world) -> None:
    a = await submit_as(client, world, "alice", gpus=4)
    b = await submit_as(client, world, "bob", gpus=2)
    world.tick()  # both submitted at T0 + 1
    for task, gpus in ((a, 4), (b, 2)):
        world.cluster.start(f"{task}--a01", {"n1": gpus})
    world.tick(9)  # RUNNING since T0 + 1 (the fake's start time)
    world.clock.now += 100  # T0 + 110
    world.cluster.clock = world.clock.now
    world.cluster.finish(f"{a}--a01")
    world.tick(0)  # a ended at T0 + 110: 109 s x 4 GPUs; b still running
    resp = await client.get("/api/v2/usage", headers=world.auth("bob"))
    assert resp.status == 200
    body = await resp.json()
    users = {u["user"]: u for u in body["users"]}
    assert users["alice"]["gpu_seconds"] == pytest.approx(109 * 4)
    assert users["bob"]["gpu_seconds"] == pytest.approx(109 * 2)  # counted up to now
    assert users["bob"]["running_attempts"] == 1
    assert [t["task_id"] for t in body["tasks"]] == [a, b]  # most GPU time first
    # a window clips the attempts
    resp = await client.get("/api/v2/usage", headers=world.auth("bob"),
                            params={"from": str(T0 + 11), "to": str(T0 + 21), "user": "me"})
    body = await resp.json()
    assert [(u["user"], u["gpu_seconds"]) for u in body["users"]] == [("bob", 20.0)]
    # the per-user counter of ended attempts, and GPUs in use now
    text = await (await client.get("/metrics", headers=world.auth("bob"))).text()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("argus_user_gpu_seconds_total", (("user", "alice"),))] == 109 * 4
    assert samples[("argus_user_gpus_in_use", (("user", "bob"),))] == 2
    assert samples[("argus_user_tasks", (("state", "RUNNING"), ("user", "bob")))] == 1
    assert samples[("argus_user_tasks", (("state", "SUCCEEDED"), ("user", "alice")))] == 1


@pytest.mark.parametrize(("params", "field"), [
    ({"from": "yesterday"}, "from"),
    ({"to": "1e400"}, "to"),
    ({"from": "nan"}, "from"),
    ({"from": "2026-01-02", "to": "2026-01-01"}, "from"),
    ({"tasks": "-1"}, "tasks"),
    ({"tasks": "99999"}, "tasks"),
    ({"user": "ghost"}, "user"),
])
async def test_usage_bad_parameters_are_400(client, world, params, field) -> None:
    resp = await client.get("/api/v2/usage", headers=world.auth("alice"), params=params)
    assert resp.status == 400, await resp.text()
    assert [d["field"] for d in (await resp.json())["error"]["details"]] == [field]


# -- the OpenAPI document states every route's security ------------------------------------------


async def test_openapi_states_each_routes_security(client, world) -> None:
    doc = await (await client.get("/api/v2/openapi.json", headers=world.auth("bob"))).json()
    expected = {Access.PUBLIC: "public", Access.ADMIN: "admin"}
    by_handler_check = {"cancel": "owner", "logs": "owner"}
    for method, path, _, access in ROUTES:
        op = doc["paths"][path_template(path)][method.lower()]
        assert op["security"] == ([] if access is Access.PUBLIC else [{"bearerAuth": []}])
        stated = op["x-argus-access"]
        if access in expected:
            assert stated == expected[access], (method, path)
        else:
            assert stated in ("user", "owner", "self"), (method, path)
        if any(k in path for k in by_handler_check):
            assert stated == "owner", path
        if "{name" in path and access is Access.USER:
            assert stated == "self", path
        if stated in ("admin", "owner", "self"):
            assert "403" in op["responses"], (method, path)
        if stated != "public":
            assert "401" in op["responses"], (method, path)


# -- what a user may store: waiting tasks and JobSpec bytes -----------------------------------


async def test_a_submit_flood_stops_at_the_quota_with_429_and_loses_nothing(aiohttp_client,
                                                                              world):
    users = replace(world.settings.users, per_user={  # type: ignore[attr-defined]
        "bob": Limits(max_waiting_tasks=3),
        "alice": Limits(max_spec_bytes_per_day=1200, max_waiting_tasks=0)})
    world.settings = replace(world.settings, users=users)  # type: ignore[attr-defined]
    client = await aiohttp_client(app_of(world))
    bob = [await submit_as(client, world, "bob") for _ in range(3)]
    resp = await client.post("/api/v2/tasks", data=jobspec(world.shared),
                             headers={**world.auth("bob"), "Content-Type": "application/yaml"})
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "60"
    body = await resp.json()
    assert body["error"]["code"] == "quota_exceeded"
    assert body["error"]["details"][0]["field"] == "max_waiting_tasks"
    assert "max_waiting_tasks 3" in body["error"]["message"]
    # an admin is exempt; what was accepted stays; once bob's tasks start he may submit
    for _ in range(5):
        await submit_as(client, world, "ada")
    assert all(world.store.tasks.get_task(t) is not None for t in bob)
    world.tick()
    assert world.store.tasks.get_task(bob[0]).state != TaskState.QUEUED
    await submit_as(client, world, "bob")
    # the byte quota: three of these JobSpecs fit in 1200 bytes, the fourth does not
    stored = world.store.reads.reader().execute(
        "SELECT jobspec_yaml, spec_json FROM tasks WHERE task_id = ?", (bob[0],)).fetchone()
    one = len(stored[0].encode()) + len(stored[1].encode())
    accepted = 0
    while True:
        resp = await client.post("/api/v2/tasks", data=jobspec(world.shared), headers={
            **world.auth("alice"), "Content-Type": "application/yaml"})
        if resp.status != 201:
            break
        accepted += 1
    assert accepted == 1200 // one
    assert resp.status == 429
    body = await resp.json()
    assert body["error"]["details"][0]["field"] == "max_spec_bytes_per_day"
    assert 0 < int(resp.headers["Retry-After"]) <= 24 * 3600
    tasks, _ = world.store.tasks.list_tasks(state=None, limit=100, before_seq=None, user="alice")
    assert len(tasks) == accepted  # the refused submit wrote nothing


async def test_an_owner_may_lower_a_priority_an_admin_raised(client, world):
    """Anyone may lower their own task's priority, even from above what users may ask
    for; raising it again past that stays an admin's."""
    task = await submit_as(client, world, "alice")

    async def patch(who: str, value: int) -> int:
        resp = await client.patch(f"/api/v2/tasks/{task}", json={"priority": value},
                                  headers=world.auth(who))
        return resp.status

    assert await patch("ada", 500) == 200
    assert await patch("alice", 400) == 200
    assert world.store.tasks.get_task(task).priority == 400
    assert await patch("alice", 450) == 403  # above both her allowance and the task's
    assert await patch("alice", -5) == 200
    assert await patch("alice", 1) == 403


async def test_the_validators_agree_with_the_openapi_document(client, world):
    """Cases where the server and its schema disagreed: an integral JSON float is an
    integer; an empty state filter is no state; a token must not expire as it is made."""
    task = await submit_as(client, world, "alice")
    resp = await client.patch(f"/api/v2/tasks/{task}", json={"priority": 260.0},
                              headers=world.auth("ada"))
    assert resp.status == 200 and (await resp.json())["priority"] == 260
    resp = await client.patch(f"/api/v2/tasks/{task}", json={"priority": 2.5},
                              headers=world.auth("ada"))
    assert resp.status == 400
    resp = await client.get("/api/v2/tasks?state=", headers=world.auth("alice"))
    assert resp.status == 400 and (await resp.json())["error"]["details"][0]["field"] == "state"
    for within, status in ((5e-324, 400), (0.5, 400), (1, 201)):
        resp = await client.post("/api/v2/users/me/tokens", headers=world.auth("alice"),
                                 json={"label": "short", "expires_in_s": within})
        assert resp.status == status, (within, await resp.text())
    doc = await (await client.get("/api/v2/openapi.json", headers=world.auth("alice"))).json()
    token_body = doc["components"]["schemas"]["NewTokenRequest"]["properties"]["expires_in_s"]
    assert token_body["minimum"] == 1
    logs = doc["paths"]["/api/v2/tasks/{task_id}/logs"]["get"]["parameters"]
    attempt = next(p for p in logs if p["name"] == "attempt")["schema"]["oneOf"][1]
    assert attempt["maximum"] == 2**63 - 1
    user = doc["paths"]["/api/v2/users/{name}"]["get"]["parameters"][0]["schema"]
    assert user["pattern"] == "^[a-z][a-z0-9_-]{0,31}$"


async def test_the_queue_comes_a_page_at_a_time_with_positions_in_the_whole_queue(
        client, world):
    ids = []
    for who in ("alice", "bob", "alice", "bob", "alice"):
        ids.append(await submit_as(client, world, who, gpus=16))  # none fits: all wait
    world.tick()

    async def pages(query: str) -> list[list[tuple[str, int]]]:
        out, cursor = [], None
        while True:
            url = f"/api/v2/queue?{query}" + (f"&cursor={cursor}" if cursor else "")
            resp = await client.get(url, headers=world.auth("bob"))
            body = await resp.json()
            assert resp.status == 200, body
            out.append([(t["task_id"], t["queue_position"]) for t in body["pending"]])
            cursor = body["next_cursor"]
            if cursor is None:
                return out

    assert await pages("limit=2") == [[(ids[0], 1), (ids[1], 2)], [(ids[2], 3), (ids[3], 4)],
                                      [(ids[4], 5)]]
    assert await pages("limit=2&user=alice") == [[(ids[0], 1), (ids[2], 3)], [(ids[4], 5)]]
    for bad in ("limit=0", "limit=1001", "cursor=abc", "cursor=c2VxOjE"):  # seq:1, not pos
        resp = await client.get(f"/api/v2/queue?{bad}", headers=world.auth("bob"))
        assert resp.status == 400, bad
