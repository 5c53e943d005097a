"""``argus nodes`` and ``argus node cordon|drain|resume`` against a running test server
(real app and Store, a FakeCluster whose snapshot the scheduler's last tick recorded)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from argus_client.cli import main as cli
from service.cluster.fake import FakeCluster
from service.config import Settings
from service.domain.nodes import NodeSource
from service.engine.artifacts import Artifacts
from service.store.writer import Store
from service.web.api.deps import DEPS
from service.web.app import create_app

TOKEN = "cli-token"
T0 = 1_766_000_000.0


@pytest.fixture
async def server(tmp_path: Path, aiohttp_server, monkeypatch):
    settings = Settings(shared_root=str(tmp_path / "shared"))
    store = Store(str(tmp_path / "db.sqlite3"))
    cluster = FakeCluster()
    cluster.add_node("5f0c3e2a9b41d7c8", gpus=4, name="ray-worker-0")
    app = create_app(settings, store, cluster, Artifacts(settings.shared_root),
                     token=TOKEN, clock=lambda: T0)
    app[DEPS].metrics.observed.record(T0, cluster.snapshot([]))
    test_server = await aiohttp_server(app)
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    yield str(test_server.make_url("/")), store
    store.close()


async def run(url: str, *argv: str, err: io.StringIO | None = None) -> tuple[int, str]:
    out = io.StringIO()
    code = await asyncio.to_thread(cli.main, ["--url", url, *argv], out=out, err=err)
    return code, out.getvalue()


async def test_nodes_cordon_drain_resume(server: tuple[str, Store]) -> None:
    url, store = server
    code, out = await run(url, "nodes")
    assert code == 0 and "ray-worker-0" in out and "4/4" in out and "yes" in out
    code, out = await run(url, "node", "cordon", "ray-worker-0", "--reason", "bad fan")
    assert (code, out.strip()) == (0, "node ray-worker-0 cordoned: bad fan")
    err = io.StringIO()
    code, out = await run(url, "node", "cordon", "ray-worker-0", "--reason", "x", err=err)
    assert code != 0 and "already cordoned (by admin: bad fan)" in err.getvalue()
    err = io.StringIO()
    code, out = await run(url, "node", "drain", "ray-worker-0", "--reason", "swap", err=err)
    assert code == 0 and "drained: swap" in out and "none is requeued" in err.getvalue()
    code, out = await run(url, "--json", "nodes")
    (node,) = json.loads(out)["nodes"]
    assert node["cordon"]["state"] == "drained" and node["schedulable"] is False
    code, out = await run(url, "node", "resume", "ray-worker-0")
    assert (code, out.strip()) == (0, "node ray-worker-0 resumed (was drained: swap)")
    err = io.StringIO()
    code, _ = await run(url, "node", "cordon", "nope", "--reason", "x", err=err)
    assert code != 0 and "node nope not found" in err.getvalue()
    assert store.nodes.states() == []


async def test_a_reason_is_required_before_any_request(server: tuple[str, Store]) -> None:
    url, _ = server
    err = io.StringIO()
    with pytest.raises(SystemExit) as exc:
        await run(url, "node", "cordon", "ray-worker-0", err=err)
    assert exc.value.code == 2


async def test_drain_with_requeue(server: tuple[str, Store]) -> None:
    url, store = server
    err = io.StringIO()
    code, out = await run(url, "node", "drain", "ray-worker-0", "--reason", "replacing GPU 3",
                          "--requeue", err=err)
    assert (code, out.strip()) == (0, "node ray-worker-0 drained (requeue): replacing GPU 3")
    assert "stopped at the next tick and re-queued" in err.getvalue()
    assert store.nodes.state("ray-worker-0").requeue is True
    code, out = await run(url, "nodes")
    assert code == 0 and "drained (requeue) by admin" in out, out
    code, out = await run(url, "--json", "nodes")
    assert json.loads(out)["nodes"][0]["cordon"]["requeue"] is True
    err = io.StringIO()
    code, _ = await run(url, "node", "drain", "ray-worker-0", "--reason", "x", "--requeue",
                        err=err)
    assert code != 0 and "already drained with requeue" in err.getvalue()
    code, out = await run(url, "node", "resume", "ray-worker-0")
    assert code == 0 and store.nodes.states() == []


async def test_only_a_drain_takes_requeue(server: tuple[str, Store]) -> None:
    url, store = server
    with pytest.raises(SystemExit) as exc:
        await run(url, "node", "cordon", "ray-worker-0", "--reason", "x", "--requeue",
                  err=io.StringIO())
    assert exc.value.code == 2 and store.nodes.states() == []


async def test_node_events_newest_first(server: tuple[str, Store]) -> None:
    url, _ = server
    await run(url, "node", "cordon", "ray-worker-0", "--reason", "bad fan")
    await run(url, "node", "resume", "ray-worker-0", "--reason", "fan replaced")
    code, out = await run(url, "node", "events", "ray-worker-0")
    lines = out.strip().splitlines()
    assert code == 0 and lines[0].split() == ["AT", "KIND", "SOURCE", "BY", "REASON"]
    assert "NODE_RESUMED" in lines[1] and "fan replaced" in lines[1]
    assert "NODE_CORDONED" in lines[2] and "bad fan" in lines[2] and "admin" in lines[2]
    code, out = await run(url, "--json", "node", "events", "ray-worker-0", "--limit", "1")
    assert [e["kind"] for e in json.loads(out)["events"]] == ["NODE_RESUMED"]
    err = io.StringIO()
    code, _ = await run(url, "node", "events", "nope", err=err)
    assert code != 0 and "node nope not found" in err.getvalue()


async def test_the_sdk_reads_a_nodes_events(server: tuple[str, Store]) -> None:
    from argus_client import ArgusClient, NodeEvent

    url, store = server
    store.nodes.cordon("ray-worker-0", NodeSource.QUARANTINE, None, T0, "3 CUDA errors")
    got = await asyncio.to_thread(ArgusClient(url, TOKEN).node_events, "ray-worker-0")
    assert got.name == "ray-worker-0"
    assert got.events == [NodeEvent(at="2025-12-17T19:33:20.000Z", kind="NODE_CORDONED",
                                    source="quarantine", by=None, reason="3 CUDA errors")]


def test_a_resume_prints_the_services_note() -> None:
    from argus_client.cli.nodes import changed_text

    data = {"name": "w1", "action": "resume", "note": "the node's health check still fails",
            "cordon": {"state": "cordoned", "reason": "quarantine: 2 tasks"}}
    assert changed_text(data) == ("node w1 resumed (was cordoned: quarantine: 2 tasks)\n"
                                  "note: the node's health check still fails")
    assert "note" not in changed_text({**data, "note": None})
