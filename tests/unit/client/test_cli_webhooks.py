"""``argus webhook add|list|rm|deliveries`` against a running test server (real app and
Store; the CLI's urllib calls run in a worker thread while the loop serves them)."""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from argus_client.cli import main as cli
from service.cluster.fake import FakeCluster
from service.config import Settings
from service.domain.newtask import NewTask
from service.engine.artifacts import Artifacts
from service.store.writer import Store
from service.web.app import create_app
from service.webhooks.settings import WebhookSettings

TOKEN = "cli-token"
T0 = 1_766_000_000.0
TID = "mvp2-ppo-20251223-143201-7f3a"


@pytest.fixture
async def server(tmp_path: Path, aiohttp_server, monkeypatch):
    settings = Settings(shared_root=str(tmp_path / "shared"), webhooks=WebhookSettings(
        allow_networks=(ipaddress.ip_network("127.0.0.0/8"),)))
    store = Store(str(tmp_path / "db.sqlite3"))
    app = create_app(settings, store, FakeCluster(), Artifacts(settings.shared_root),
                     token=TOKEN, clock=lambda: T0)
    test_server = await aiohttp_server(app)
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    yield str(test_server.make_url("/")), store
    store.close()


async def run(url: str, *argv: str, err: io.StringIO | None = None) -> tuple[int, str]:
    out = io.StringIO()
    code = await asyncio.to_thread(cli.main, ["--url", url, *argv], out=out, err=err)
    return code, out.getvalue()


async def test_add_list_deliveries_rm(server: tuple[str, Store]) -> None:
    url, store = server
    err = io.StringIO()
    code, out = await run(url, "webhook", "add", "http://127.0.0.1:9/hook", "--events",
                          "task.failed, task.canceled", "--format", "slack", err=err)
    assert code == 0, out
    lines = out.splitlines()
    secret = lines[lines.index("signing secret:") + 1]
    assert secret.startswith("whsec_") and "shown this once" in err.getvalue()
    hook_id = out.split()[1]

    code, out = await run(url, "webhook", "list")
    assert code == 0 and hook_id in out and "task.canceled,task.failed" in out
    assert secret not in out

    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user="admin", created_at=T0, priority=0),
                            task_id=TID)
    store.tasks.cancel(TID, T0 + 1)
    code, out = await run(url, "--json", "webhook", "deliveries", hook_id, "--limit", "5")
    assert code == 0
    [delivery] = json.loads(out)["deliveries"]
    assert delivery["event_type"] == "task.canceled" and delivery["outcome"] == "PENDING"

    code, out = await run(url, "webhook", "rm", hook_id)
    assert (code, out.strip()) == (0, f"deleted {hook_id}")
    code, out = await run(url, "--json", "webhook", "list")
    assert json.loads(out) == {"webhooks": []}


@pytest.mark.parametrize(("argv", "message", "exit_code"), [
    (["webhook", "add", "http://10.0.0.1/x", "--events", "task.failed"], "private", 1),
    (["webhook", "add", "http://127.0.0.1:9/x", "--events", "task.nope"], "unknown event", 1),
    (["webhook", "rm", "wh_000000000000"], "not found", 3),
])
async def test_refusals_exit_with_their_code_and_reason(server, capsys, argv: list[str],
                                                        message: str, exit_code: int) -> None:
    url, _ = server
    code, _ = await run(url, *argv)
    assert code == exit_code
    assert message in capsys.readouterr().err


def test_add_without_events_is_a_usage_error(capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(["webhook", "add", "http://x"])
    assert exc.value.code == 2 and "--events" in capsys.readouterr().err


async def test_the_sdk_answers_with_frozen_dataclasses(server: tuple[str, Store]) -> None:
    from argus_client import (
        ArgusClient,
        DeletedWebhook,
        Deliveries,
        NewWebhook,
        Webhook,
        WebhookList,
    )

    url, store = server
    client = ArgusClient(url, TOKEN)
    hook = await asyncio.to_thread(client.create_webhook, "http://127.0.0.1:9/hook",
                                   ["task.canceled"])
    assert isinstance(hook, NewWebhook) and hook.secret.startswith("whsec_")
    assert hook.secret not in repr(hook)
    listed = await asyncio.to_thread(client.list_webhooks)
    assert isinstance(listed, WebhookList) and isinstance(listed.webhooks[0], Webhook)
    assert listed.webhooks[0].id == hook.id and listed.webhooks[0].events == ["task.canceled"]
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user="admin", created_at=T0, priority=0),
                            task_id=TID)
    store.tasks.cancel(TID, T0 + 1)
    deliveries = await asyncio.to_thread(client.webhook_deliveries, hook.id)
    assert isinstance(deliveries, Deliveries) and deliveries.webhook.id == hook.id
    assert [(d.event_type, d.outcome) for d in deliveries.deliveries] == [
        ("task.canceled", "PENDING")]
    with pytest.raises(AttributeError):
        deliveries.deliveries[0].outcome = "DELIVERED"  # type: ignore[misc]
    gone = await asyncio.to_thread(client.delete_webhook, hook.id)
    assert isinstance(gone, DeletedWebhook) and gone.deleted == hook.id


def test_the_cli_knows_every_event_type_the_server_has() -> None:
    from argus_client.cli.webhooks import EVENT_TYPES, NODE_EVENT_TYPES
    from service.webhooks.events import ADMIN_ONLY, EventType

    assert set(EVENT_TYPES) | set(NODE_EVENT_TYPES) == {t.value for t in EventType}
    assert set(NODE_EVENT_TYPES) == {t.value for t in ADMIN_ONLY}
