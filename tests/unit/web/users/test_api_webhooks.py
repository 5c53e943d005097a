"""``/api/v2/webhooks`` through the HTTP API: the secret once, owners and admins, limits,
every bad input a 400 that names its field, the SSRF rules at registration, and the
deliveries a state change causes."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.cluster.fake import FakeCluster
from service.config import Settings, UserSettings
from service.domain.newtask import NewTask
from service.domain.users import Role
from service.engine.artifacts import Artifacts
from service.store.writer import Store
from service.web.app import create_app
from service.webhooks.settings import WebhookSettings

BOOTSTRAP = "bootstrap-token-of-the-operator"
T0 = 1_766_000_000.0
PUBLIC = "https://93.184.215.14/hook"


class World:
    def __init__(self, tmp_path: Path, allow: tuple[str, ...]) -> None:
        self.settings = Settings(
            shared_root=str(tmp_path / "shared"),
            users=UserSettings(bootstrap_admin="root", default_user="root"),
            webhooks=WebhookSettings(max_per_user=2, allow_networks=tuple(
                ipaddress.ip_network(n) for n in allow)))
        self.store = Store(str(tmp_path / "db.sqlite3"))
        self.tokens = {"root": BOOTSTRAP}
        for name, role in (("ada", Role.ADMIN), ("alice", Role.USER), ("bob", Role.USER)):
            self.store.users.create_user(name, role, T0)
            self.tokens[name] = self.store.users.create_token(name, "t", None, T0,
                                                              max_live=10).secret

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def app(self):
        return create_app(self.settings, self.store, FakeCluster(), Artifacts(
            self.settings.shared_root), token=BOOTSTRAP, clock=lambda: T0)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, allow=("127.0.0.0/8",))
    yield w
    w.store.close()


@pytest.fixture
async def client(aiohttp_client, world: World):
    return await aiohttp_client(world.app())


async def create(client, world: World, who: str, **body: Any):
    return await client.post("/api/v2/webhooks", headers=world.auth(who),
                             json={"url": PUBLIC, "events": ["task.failed"], **body})


async def test_the_secret_is_shown_once_and_never_listed_or_logged(client, world,
                                                                   caplog) -> None:
    caplog.set_level(logging.DEBUG)
    resp = await create(client, world, "alice", events=["task.failed", "task.succeeded",
                                                        "task.failed"], format="slack")
    assert resp.status == 201, await resp.text()
    made = await resp.json()
    assert made["secret"].startswith("whsec_")
    assert made["events"] == ["task.failed", "task.succeeded"] and made["format"] == "slack"
    assert made["owner"] == "alice" and made["id"].startswith("wh_")
    listed = await (await client.get("/api/v2/webhooks", headers=world.auth("alice"))).json()
    assert listed == {"webhooks": [{k: v for k, v in made.items() if k != "secret"}]}
    assert made["secret"] not in caplog.text
    assert made["secret"].removeprefix("whsec_") not in caplog.text


async def test_owners_see_theirs_admins_see_all(client, world) -> None:
    alices = (await (await create(client, world, "alice")).json())["id"]
    bobs = (await (await create(client, world, "bob")).json())["id"]

    async def ids(who: str, query: str = "") -> set[str]:
        resp = await client.get(f"/api/v2/webhooks{query}", headers=world.auth(who))
        return {h["id"] for h in (await resp.json())["webhooks"]}

    assert await ids("alice") == {alices} and await ids("bob") == {bobs}
    assert await ids("ada") == {alices, bobs} and await ids("ada", "?user=bob") == {bobs}
    assert await ids("alice", "?user=bob") == {alices}  # a user's filter is themself
    for verb, path in (("DELETE", f"/api/v2/webhooks/{alices}"),
                       ("GET", f"/api/v2/webhooks/{alices}/deliveries")):
        resp = await client.request(verb, path, headers=world.auth("bob"))
        assert resp.status == 403, await resp.text()
    resp = await client.delete(f"/api/v2/webhooks/{alices}", headers=world.auth("ada"))
    assert resp.status == 200 and (await resp.json()) == {"deleted": alices}
    resp = await client.delete(f"/api/v2/webhooks/{alices}", headers=world.auth("alice"))
    assert resp.status == 404


async def test_the_per_user_limit_is_a_409_saying_so(client, world) -> None:
    for _ in range(2):
        assert (await create(client, world, "alice")).status == 201
    resp = await create(client, world, "alice")
    assert resp.status == 409
    assert "already has 2 webhooks" in (await resp.json())["error"]["message"]
    assert (await create(client, world, "bob")).status == 201  # per user


@pytest.mark.parametrize(("body", "fields"), [
    ({"url": "ftp://x.example/"}, ["url"]),
    ({"url": "https://u:p@x.example/"}, ["url"]),
    ({"url": 42}, ["url"]),
    ({"events": []}, ["events"]),
    ({"events": ["task.exploded"]}, ["events"]),
    ({"events": "task.failed"}, ["events"]),
    ({"events": [["task.failed"], {"a": 1}, None]}, ["events"]),  # unhashable values
    ({"url": {}, "format": None}, ["url", "format"]),
    ({"format": "xml"}, ["format"]),
    ({"secret": "mine"}, ["secret"]),
    ({"url": "gopher://x", "events": [], "format": 1}, ["url", "events", "format"]),
])
async def test_bad_input_is_a_400_naming_each_field(client, world, body, fields) -> None:
    resp = await create(client, world, "alice", **body)
    assert resp.status == 400, await resp.text()
    assert sorted(d["field"] for d in (await resp.json())["error"]["details"]) == sorted(
        fields)
    assert world.store.webhooks.list_webhooks(None) == []


@pytest.mark.parametrize("url", [
    "http://10.0.0.8/hook", "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:8080/", "http://[fd00::1]/", "http://100.64.3.4/", "http://[::ffff:10.1.1.1]/",
    "http://0.0.0.0/",
])
async def test_internal_targets_are_refused_at_registration(client, world, url) -> None:
    resp = await create(client, world, "alice", url=url)
    assert resp.status == 400, await resp.text()
    [detail] = (await resp.json())["error"]["details"]
    assert detail["field"] == "url" and "allow_networks" in detail["message"]


async def test_an_allowed_network_may_be_a_target(client, world) -> None:
    resp = await create(client, world, "alice", url="http://127.0.0.1:9/hook")
    assert resp.status == 201, await resp.text()


async def test_a_state_change_shows_in_the_deliveries(client, world) -> None:
    hook = await (await create(client, world, "alice", events=["task.canceled"])).json()
    world.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={},
                                          nnodes=1, n_gpus_per_node=1, user="alice", created_at=T0,
                                          priority=0),
                                  task_id="mvp2-alice-ppo-20251223-143201-7f3a")
    world.store.tasks.cancel("mvp2-alice-ppo-20251223-143201-7f3a", T0 + 1)
    resp = await client.get(f"/api/v2/webhooks/{hook['id']}/deliveries?limit=5",
                            headers=world.auth("alice"))
    assert resp.status == 200
    body = await resp.json()
    [delivery] = body["deliveries"]
    assert delivery["event_type"] == "task.canceled" and delivery["outcome"] == "PENDING"
    assert delivery["attempts"] == 0 and delivery["next_retry_at"] is not None
    assert delivery["tries"] == []
    assert delivery["id"] == "msg_1" and body["webhook"]["id"] == hook["id"]
    bad = await client.get(f"/api/v2/webhooks/{hook['id']}/deliveries?limit=0",
                           headers=world.auth("alice"))
    assert bad.status == 400


async def test_an_unknown_hook_is_404(client, world) -> None:
    for verb, path in (("DELETE", "/api/v2/webhooks/wh_000000000000"),
                       ("GET", "/api/v2/webhooks/wh_000000000000/deliveries")):
        resp = await client.request(verb, path, headers=world.auth("alice"))
        assert resp.status == 404


@pytest.mark.parametrize(("url", "says"), [
    ("http://a..b/", "host 'a..b' has an empty label"),  # was a 500 (UnicodeError)
    ("http://169.254.169.254.\u3002/", "has an empty label"),  # was a 500
    ("http://.a/", "has an empty label"),
    ("http://" + "a" * 64 + ".example/", "has a label longer than 63 characters"),
    ("http://" + ".".join(["a" * 63] * 4) + "/", "is longer than 253 characters"),
    ("http://xn--zz.example/", "not a valid IDNA A-label"),
    ("http://\u0661\u0662.example/", "not a valid international name"),
    ("http://a!b.example/", "may hold only letters, digits"),
    ("http://2130706433/", "no IPv4 address in dotted-decimal form"),
    ("http://169\u3002254\u3002169\u3002254/", "address 169.254.169.254 is link-local"),
    ("https://93.184.215.14/\ud800", "must be valid Unicode"),  # was a 500 (SQLite)
])
async def test_a_malformed_host_is_a_400_naming_the_url(client, world, url, says) -> None:
    resp = await create(client, world, "alice", url=url)
    assert resp.status == 400, await resp.text()
    [detail] = (await resp.json())["error"]["details"]
    assert detail["field"] == "url" and says in detail["message"], detail
    assert world.store.webhooks.list_webhooks(None) == []


async def test_other_dots_are_read_as_dots(client, world) -> None:
    resp = await create(client, world, "alice", url="http://127\uff0e0\uff0e0\uff0e1:9/hook")
    assert resp.status == 201, await resp.text()
