"""The console's webhooks page: list, create (the secret shown once), delete; the
form checks of every console POST (origin, form token); the deliveries' outcomes."""

from __future__ import annotations

import html
import ipaddress
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_env import Env, csrf_of, make_env, page, sign_in

from service.config import Settings
from service.domain.newtask import NewTask
from service.webhooks.settings import WebhookSettings

TID = "mvp2-ppo-20251223-143201-7f3a"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:  # conftest's client serves it
    settings = Settings(shared_root=str(tmp_path / "shared"), webhooks=WebhookSettings(
        max_per_user=2, allow_networks=(ipaddress.ip_network("127.0.0.0/8"),)))
    e = make_env(tmp_path, settings)
    yield e
    e.store.close()


async def create(client, csrf: str, url: str, *events: str, fmt: str = "standard"):
    data = [("csrf", csrf), ("url", url), ("format", fmt)] + [("events", e) for e in events]
    return await client.post("/ui/webhooks", data=data, allow_redirects=False)


async def test_create_shows_the_secret_once_then_lists_and_deletes(client, env) -> None:
    await sign_in(client)
    text = await page(client, "/ui/webhooks")
    assert 'id="no-webhooks"' in text and 'href="/ui/webhooks" class="on"' in text
    resp = await create(client, csrf_of(text), "http://127.0.0.1:9/hook", "task.failed",
                        "task.canceled")
    body = await resp.text()
    assert resp.status == 201, body
    secret = re.search(r'id="webhook-secret">(whsec_[^<]+)<', body).group(1)
    [hook] = env.store.webhooks.list_webhooks(None)
    assert hook.secret == html.unescape(secret) and hook.events == (
        "task.canceled", "task.failed")
    again = await page(client, "/ui/webhooks")
    assert hook.hook_id in again and "whsec_" not in again  # shown once

    env.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                        n_gpus_per_node=1, user=hook.owner,
                                        created_at=env.clock.now, priority=0), task_id=TID)
    env.store.tasks.cancel(TID, env.clock.now)
    listed = await page(client, "/ui/webhooks")
    assert "task.canceled" in listed and 'class="outcome-pending"' in listed

    resp = await client.post(f"/ui/webhooks/{hook.hook_id}/delete",
                             data={"csrf": csrf_of(listed)}, allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/ui/webhooks"
    assert env.store.webhooks.list_webhooks(None) == []


@pytest.mark.parametrize(("url", "events", "status", "message"), [
    ("http://10.0.0.1/x", ("task.failed",), 400, "is private"),
    ("ftp://127.0.0.1/x", ("task.failed",), 400, "scheme must be http or https"),
    ("http://127.0.0.1:9/x", (), 400, "events: must be a non-empty list"),
    ("http://127.0.0.1:9/x", ("task.nope",), 400, "unknown event types"),
])
async def test_a_refused_form_says_why_and_keeps_what_was_typed(client, env, url, events,
                                                                 status, message) -> None:
    await sign_in(client)
    resp = await create(client, csrf_of(await page(client, "/ui/webhooks")), url, *events)
    body = html.unescape(await resp.text())
    assert resp.status == status and message in body, body
    assert f'value="{url}"' in body
    assert env.store.webhooks.list_webhooks(None) == []


async def test_the_limit_is_shown(client, env) -> None:
    await sign_in(client)
    csrf = csrf_of(await page(client, "/ui/webhooks"))
    for _ in range(2):
        assert (await create(client, csrf, "http://127.0.0.1:9/x", "task.failed")).status == 201
    resp = await create(client, csrf, "http://127.0.0.1:9/x", "task.failed")
    assert resp.status == 409 and "already has 2 webhooks" in await resp.text()


async def test_forged_or_cross_site_posts_are_refused(client, env) -> None:
    await sign_in(client)
    csrf = csrf_of(await page(client, "/ui/webhooks"))
    assert (await create(client, "forged", "http://127.0.0.1:9/x", "task.failed")).status == 403
    resp = await client.post("/ui/webhooks", data={"csrf": csrf, "url": "http://127.0.0.1/",
                                                   "events": "task.failed"},
                             headers={"Origin": "https://evil.example"}, allow_redirects=False)
    assert resp.status == 403
    hook = env.store.webhooks.create_webhook(owner="admin", url="http://127.0.0.1:9/x",
                                             events=["task.failed"], fmt="standard", now=1.0,
                                             max_per_user=5)
    resp = await client.post(f"/ui/webhooks/{hook.hook_id}/delete", data={"csrf": "x"},
                             allow_redirects=False)
    assert resp.status == 403 and env.store.webhooks.get_webhook(hook.hook_id) is not None
    assert env.store.webhooks.list_webhooks(None) == [hook]


async def test_signed_out_visits_go_to_sign_in(client) -> None:
    resp = await client.get("/ui/webhooks", allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"].startswith("/ui/signin")


@pytest.mark.parametrize(("url", "message"), [
    ("http://a..b/", "url: host 'a..b' has an empty label"),  # was a 500
    ("http://169.254.169.254.\u3002/", "has an empty label"),  # was a 500
    ("http://" + "a" * 64 + ".example/", "has a label longer than 63 characters"),
    ("http://169\u3002254\u3002169\u3002254/", "address 169.254.169.254 is link-local"),
])
async def test_a_malformed_host_is_a_form_error(client, env, url, message) -> None:
    await sign_in(client)
    resp = await create(client, csrf_of(await page(client, "/ui/webhooks")), url,
                        "task.failed")
    body = html.unescape(await resp.text())
    assert resp.status == 400 and message in body, body
    assert f'value="{url}"' in body
    assert env.store.webhooks.list_webhooks(None) == []
