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
