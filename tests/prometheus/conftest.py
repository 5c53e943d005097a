"""The Prometheus tier: a real ``argus-api`` (the production wiring, ``build_service``,
served on a local port) on a scripted fake cluster whose clock is the wall clock, and a
real Prometheus (Debian package ``prometheus``, installed by ``scripts/bootstrap.sh``)
scraping its ``/metrics`` with a user's bearer token every second.

Without the ``prometheus`` binary the tier is skipped, saying why.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from service.cluster.fake import FakeCluster
from service.config import SchedulerSettings, Settings
from service.main import build_service

PROMETHEUS = shutil.which("prometheus")
SCRAPE_S = 1
DEADLINE_S = 30.0


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = DEADLINE_S) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` (and the
    last value seen) at the deadline."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what} (last: {last!r})")


class WallClockCluster(FakeCluster):
    """The fake cluster with real time: attempts start and end when the test says so, and
    Ray's start and end times are the wall clock's, as Prometheus sees them."""

    @property  # type: ignore[override]
    def clock(self) -> float:
        return time.time()

    @clock.setter
    def clock(self, _: float) -> None:
        """The fake's constructor sets a start value; the wall clock needs none."""


def _json(req: urllib.request.Request | str, timeout_s: float = 10.0) -> Any:
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


@dataclass
class Argus:
    url: str
    token: str  # the bootstrap admin's
    shared: Path
    cluster: WallClockCluster

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None,
             content_type: str = "application/json") -> Any:
        data = None
        headers = {"Authorization": f"Bearer {token or self.token}"}
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        return _json(urllib.request.Request(self.url + path, data=data, method=method,
                                            headers=headers))


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str | float) -> Any:
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        try:
            body = _json(f"{self.url}/api/v1/{path}?{query}")
        except urllib.error.HTTPError as exc:  # a bad query: 400 with the error in JSON
            body = json.loads(exc.read())
        return body

    def instant(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        body = self.api("query", query=expr, **({} if at is None else {"time": at}))
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def values(self, expr: str, label: str) -> dict[str, float]:
        """An instant query's values by one label (missing label: "")."""
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.instant(expr)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(app: web.Application, started: threading.Event, box: dict[str, Any]) -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
    box["port"] = runner.addresses[0][1]
    box["loop"], box["runner"] = loop, runner
    started.set()
    loop.run_forever()
    loop.close()


@pytest.fixture(scope="session")
def argus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Argus]:
    root = tmp_path_factory.mktemp("argus")
    settings = Settings(shared_root=str(root / "shared"), db_path=str(root / "argus.db"),
                        scheduler=SchedulerSettings(tick_s=0.2, max_attempts=1))
    cluster = WallClockCluster()
    token = secrets.token_urlsafe(24)
    app = build_service(settings, token, cluster)
    started, box = threading.Event(), {}
    thread = threading.Thread(target=_serve, args=(app, started, box), daemon=True)
    thread.start()
    assert started.wait(30), "argus-api did not start"
    yield Argus(f"http://127.0.0.1:{box['port']}", token, root / "shared", cluster)
    loop, runner = box["loop"], box["runner"]
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)


@pytest.fixture(scope="session")
def scraper_token(argus: Argus) -> str:
    """A plain user's token: what an operator gives Prometheus (any user reads /metrics)."""
    argus.call("POST", "/api/v2/users", {"name": "prometheus", "role": "user"})
    return argus.call("POST", "/api/v2/users/prometheus/tokens", {"label": "scrape"})["token"]


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory, argus: Argus,
               scraper_token: str) -> Iterator[Prometheus]:
    if PROMETHEUS is None:
        pytest.skip("prometheus not installed (Debian package prometheus; "
                    "scripts/bootstrap.sh installs it as root)")
    root = tmp_path_factory.mktemp("prometheus")
    (root / "token").write_text(scraper_token)
    target = urllib.parse.urlsplit(argus.url).netloc
    (root / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
        "scrape_configs:\n  - job_name: argus\n    metrics_path: /metrics\n"
        f"    authorization:\n      type: Bearer\n      credentials_file: {root / 'token'}\n"
        f"    static_configs:\n      - targets: ['{target}']\n")
    port = _free_port()
    log = root / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={root / 'prometheus.yml'}",
             f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT)
    prom = Prometheus(f"http://127.0.0.1:{port}", process, log)

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited:\n{log.read_text()[-3000:]}")
        try:
            return bool(urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2).status == 200)
        except OSError:
            return False

    try:
        wait_for("prometheus ready", ready)
        up = wait_for("the first scrape of argus-api",
                      lambda: prom.values('up{job="argus"}', "job").get("argus"))
        assert up == 1.0, prom.api("targets")
        yield prom
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
