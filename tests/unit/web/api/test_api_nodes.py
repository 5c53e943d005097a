"""``/api/v2/nodes``: the list by name, and cordon / drain / resume with their refusals."""

from __future__ import annotations

import json
from dataclasses import replace

from api_env import AUTH, T0, assert_error, get_json

from service.domain.nodes import NodeSource
from service.domain.users import Role
from service.web.api.deps import DEPS


def _observe(env) -> None:
    env.metrics.observed.record(env.clock.now, env.cluster.snapshot([]))


async def test_cordon_drain_resume_and_the_list(client, env) -> None:
    env.cluster.add_node("id-w1", gpus=4, cpus=16, name="ray-worker-0")
    _observe(env)
    listed = await get_json(client, "/api/v2/nodes")
    assert listed["nodes"] == [{
        "name": "ray-worker-0", "state": "alive", "schedulable": True, "node_id": "id-w1",
        "node_ip": "10.0.0.1", "gpus_total": 4.0, "gpus_free": 4.0, "cordon": None,
        "health": {"state": "unknown", "detail": "no ray.head_json: health files not read",
                   "checked_at": None}}]
    resp = await client.post("/api/v2/nodes/ray-worker-0:cordon", json={"reason": "bad fan"},
                             headers=AUTH)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["cordon"]["state"] == "cordoned" and body["cordon"]["by"] == "admin"
    assert env.loop.wakes >= 1
    resp = await client.post("/api/v2/nodes/ray-worker-0:cordon", json={"reason": "again"},
                             headers=AUTH)
    err = assert_error(await resp.json(), "conflict")
    assert resp.status == 409 and "already cordoned (by admin: bad fan)" in err["message"]
    resp = await client.post("/api/v2/nodes/ray-worker-0:drain", json={"reason": "swap"},
                             headers=AUTH)
    assert resp.status == 200 and (await resp.json())["cordon"]["state"] == "drained"
    (node,) = (await get_json(client, "/api/v2/nodes"))["nodes"]
    assert node["schedulable"] is False and node["cordon"]["reason"] == "swap"
    resp = await client.post("/api/v2/nodes/ray-worker-0:resume", headers=AUTH)
    assert resp.status == 200, await resp.text()
    resp = await client.post("/api/v2/nodes/ray-worker-0:resume", headers=AUTH)
    assert resp.status == 409
    assert "not cordoned" in (await resp.json())["error"]["message"]
    kinds = [e.kind.value for e in env.store.nodes.events("ray-worker-0")]
    assert kinds == ["NODE_CORDONED", "NODE_DRAINED", "NODE_RESUMED"]


async def test_bad_requests_write_nothing(client, env) -> None:
    env.cluster.add_node("w1")
    _observe(env)
    cases = [
        ("w9", {"reason": "x"}, 404, "node w9 not found"),
        ("w1", {}, 400, "a reason is required"),
        ("w1", {"reason": "   "}, 400, "a reason is required"),
        ("w1", {"reason": "x" * 201}, 400, "at most 200"),
        ("w1", {"reason": "two\nlines"}, 400, "printable"),
        ("w1", {"reason": "x", "requeue": True}, 400, "only a drain re-queues"),
        ("w1", {"reason": "x", "other": 1}, 400, "unknown field"),
    ]
    for name, doc, status, text in cases:
        resp = await client.post(f"/api/v2/nodes/{name}:cordon", json=doc, headers=AUTH)
        assert resp.status == status, (doc, await resp.text())
        assert text in json.dumps(await resp.json()), doc
    assert env.store.nodes.states() == [] and env.store.nodes.events("w1") == []


async def test_drain_with_requeue_is_stored_shown_upgraded_and_resumed(client, env) -> None:
    env.cluster.add_node("id-w1", gpus=4, cpus=16, name="gpu-07")
    _observe(env)

    async def post(action: str, doc: dict | None = None):
        resp = await client.post(f"/api/v2/nodes/gpu-07:{action}", json=doc, headers=AUTH)
        return resp.status, await resp.json()

    assert (await post("drain", {"reason": "swap"}))[1]["cordon"]["requeue"] is False
    status, body = await post("drain", {"reason": "replacing GPU 3", "requeue": True})
    assert status == 200, body  # a drain turned into one that re-queues
    assert (body["cordon"]["state"], body["cordon"]["requeue"]) == ("drained", True)
    (node,) = (await get_json(client, "/api/v2/nodes"))["nodes"]
    assert node["cordon"]["requeue"] is True and node["cordon"]["reason"] == "replacing GPU 3"
    for doc in ({"reason": "again", "requeue": True}, {"reason": "again"}):
        status, body = await post("drain", doc)
        assert status == 409, body
        assert "already drained with requeue (by admin: replacing GPU 3)" in \
            body["error"]["message"]
    assert (await post("resume"))[0] == 200
    assert env.store.nodes.state("gpu-07") is None
    await post("cordon", {"reason": "looking"})
    status, body = await post("drain", {"reason": "bad GPU", "requeue": True})
    assert status == 200 and body["cordon"]["requeue"] is True  # a cordon upgraded
    kinds = [e.kind.value for e in env.store.nodes.events("gpu-07")]
    assert kinds == ["NODE_DRAINED", "NODE_DRAINED", "NODE_RESUMED", "NODE_CORDONED",
                     "NODE_DRAINED"]


async def test_requeue_must_be_a_boolean(client, env) -> None:
    env.cluster.add_node("w1")
    _observe(env)
    for bad in ("yes", 1, None, [], {"a": 1}):
        resp = await client.post("/api/v2/nodes/w1:drain",
                                 json={"reason": "x", "requeue": bad}, headers=AUTH)
        assert resp.status == 400, (bad, await resp.text())
        err = assert_error(await resp.json(), "bad_request")
        assert {"field": "requeue", "message": "requeue must be true or false"} in \
            err["details"], err
    assert env.store.nodes.states() == [] and env.store.nodes.events("w1") == []


async def test_a_node_known_only_by_its_stored_state_is_dead(client, env) -> None:
    env.store.nodes.cordon("gone", NodeSource.HEALTH, None, T0, "health: xid: 79")
    (node,) = (await get_json(client, "/api/v2/nodes"))["nodes"]
    assert (node["name"], node["state"], node["cordon"]["source"]) == ("gone", "dead", "health")
    resp = await client.post("/api/v2/nodes/gone:resume", json={"reason": "replaced"},
                             headers=AUTH)
    assert resp.status == 200


async def test_a_user_reads_but_may_not_cordon(client, env) -> None:
    env.cluster.add_node("w1")
    _observe(env)
    env.store.users.create_user("bob", Role.USER, T0)
    token = env.store.users.create_token("bob", "t", None, T0, max_live=5).secret
    bob = {"Authorization": f"Bearer {token}"}
    resp = await client.get("/api/v2/nodes", headers=bob)
    assert resp.status == 200
    resp = await client.post("/api/v2/nodes/w1:cordon", json={"reason": "x"}, headers=bob)
    assert resp.status == 403 and env.store.nodes.states() == []


async def test_the_health_summary_comes_from_the_node_file(client, env) -> None:
    head = env.shared / "ray" / "discovery" / "c" / "head.json"
    (head.parent / "nodes").mkdir(parents=True)
    (head.parent / "nodes" / "w1.health.json").write_text(json.dumps({
        "version": 1, "node": "w1", "healthy": False, "reason": "ecc: 2 uncorrectable",
        "checked_at": T0 - 5, "interval_s": 30}))
    deps = client.server.app[DEPS]  # the app's settings, with head.json beside the files
    object.__setattr__(deps, "settings", replace(deps.settings, head_json=str(head)))
    env.cluster.add_node("w1")
    _observe(env)
    (node,) = (await get_json(client, "/api/v2/nodes"))["nodes"]
    assert node["health"] == {"state": "unhealthy", "detail": "ecc: 2 uncorrectable",
                              "checked_at": "2025-12-17T19:33:15.000Z"}


async def test_resuming_a_node_whose_check_still_fails_is_allowed_and_says_so(
        client, env) -> None:
    head = env.shared / "ray" / "discovery" / "c" / "head.json"
    (head.parent / "nodes").mkdir(parents=True)
    (head.parent / "nodes" / "w1.health.json").write_text(json.dumps({
        "version": 1, "node": "w1", "healthy": False, "reason": "xid 79",
        "checked_at": T0 - 5, "interval_s": 30}))
    deps = client.server.app[DEPS]
    object.__setattr__(deps, "settings", replace(deps.settings, head_json=str(head)))
    env.cluster.add_node("w1")
    _observe(env)
    env.store.nodes.quarantine("w1", T0, "quarantine: 2 tasks failed here")
    resp = await client.post("/api/v2/nodes/w1:resume", json={"reason": "GPU swapped"},
                             headers=AUTH)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["cordon"]["source"] == "quarantine" and env.store.nodes.state("w1") is None
    assert body["note"] == ("the node's health check still fails (xid 79): the service "
                            "cordons it again at its next health read")
    env.store.nodes.cordon("w1", NodeSource.OPERATOR, "admin", T0, "x")
    (head.parent / "nodes" / "w1.health.json").write_text(json.dumps({
        "version": 1, "node": "w1", "healthy": True, "reason": "",
        "checked_at": T0 - 5, "interval_s": 30}))
    resp = await client.post("/api/v2/nodes/w1:resume", headers=AUTH)
    assert resp.status == 200 and (await resp.json())["note"] is None


def _bob(env) -> dict[str, str]:
    env.store.users.create_user("bob", Role.USER, T0)
    token = env.store.users.create_token("bob", "t", None, T0, max_live=5).secret
    return {"Authorization": f"Bearer {token}"}


async def test_a_nodes_events_newest_first_for_any_user(client, env) -> None:
    env.cluster.add_node("w1")
    _observe(env)
    for action, doc in (("cordon", {"reason": "fan"}), ("drain", {"reason": "swap"}),
                        ("resume", {})):
        resp = await client.post(f"/api/v2/nodes/w1:{action}", json=doc, headers=AUTH)
        assert resp.status == 200, await resp.text()
    resp = await client.get("/api/v2/nodes/w1/events", headers=_bob(env))
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["name"] == "w1"
    assert [(e["kind"], e["source"], e["by"], e["reason"]) for e in body["events"]] == [
        ("NODE_RESUMED", "operator", "admin", ""), ("NODE_DRAINED", "operator", "admin", "swap"),
        ("NODE_CORDONED", "operator", "admin", "fan")]
    assert body["events"][0]["at"].endswith("Z")
    one = await get_json(client, "/api/v2/nodes/w1/events", limit=1)
    assert [e["kind"] for e in one["events"]] == ["NODE_RESUMED"]


async def test_node_events_refusals(client, env) -> None:
    env.cluster.add_node("w1")
    _observe(env)
    assert (await get_json(client, "/api/v2/nodes/w1/events"))["events"] == []
    resp = await client.get("/api/v2/nodes/w9/events", headers=AUTH)
    assert resp.status == 404 and "node w9 not found" in await resp.text()
    for bad in ("0", "1001", "x"):
        resp = await client.get(f"/api/v2/nodes/w1/events?limit={bad}", headers=AUTH)
        assert resp.status == 400, bad
        assert "limit" in await resp.text()
    env.store.nodes.cordon("gone", NodeSource.HEALTH, None, T0, "xid 79")
    env.store.nodes.resume("gone", None, "admin", T0 + 1, "")
    gone = await get_json(client, "/api/v2/nodes/gone/events")  # no state, Ray lost it
    assert [e["kind"] for e in gone["events"]] == ["NODE_RESUMED", "NODE_CORDONED"]


async def test_only_admins_subscribe_to_node_events(client, env) -> None:
    doc = {"url": "https://93.184.215.14/hook", "events": ["task.failed", "node.cordoned"]}
    resp = await client.post("/api/v2/webhooks", json=doc, headers=_bob(env))
    assert resp.status == 403, await resp.text()
    assert "only an admin may subscribe to the node events ['node.cordoned']" in \
        (await resp.json())["error"]["message"]
    assert env.store.webhooks.list_webhooks(None) == []
    resp = await client.post("/api/v2/webhooks", json=doc, headers=AUTH)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["events"] == ["node.cordoned", "task.failed"]
