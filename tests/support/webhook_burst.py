"""A burst of webhook events from a real ``argus-api`` (``tests/fuzz/serve.py``: the
production wiring on a fake cluster), optionally killed with SIGKILL mid-burst and
started again on the same database, and a local receiver that verifies every delivery
with the independent ``standardwebhooks`` package.

Shared by the outbox-across-kill test (``tests/integration/test_webhook_kill.py``) and
``bench/bench_webhooks.py``. Each event is a cancel of a waiting task (``task.canceled``);
the events expected are read from the database afterwards, so an event committed just
before the kill counts even when its HTTP answer never arrived.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "tests" / "fuzz" / "serve.py"
TOKEN = "burst-token"
CANCELED = "task.canceled"


@dataclass
class Arrival:
    msg_id: str
    event_id: int
    latency_s: float  # receipt minus the event's own time (the state change)


@dataclass
class Receiver:
    """An HTTP receiver on 127.0.0.1 in its own thread and event loop."""

    delay_s: float = 0.0  # each answer waits this long (deliveries pile up in flight)
    secret: str | None = None
    arrivals: list[Arrival] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # signature checks that failed
    port: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def __enter__(self) -> Receiver:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the receiver did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def event_ids(self) -> set[int]:
        with self._lock:
            return {a.event_id for a in self.arrivals}

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            doc = Webhook(self.secret or "").verify(body, dict(request.headers))
        except (WebhookVerificationError, ValueError) as exc:
            with self._lock:
                self.refused.append(repr(exc))
            return web.Response(status=400)
        stamp = doc["timestamp"].replace("Z", "+00:00")
        from datetime import datetime

        latency = time.time() - datetime.fromisoformat(stamp).timestamp()
        with self._lock:
            self.arrivals.append(Arrival(request.headers["webhook-id"],
                                         doc["data"]["event_id"], latency))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)  # the receiver is slow, not the test
        return web.Response(status=204)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())


class Api:
    """The service process and plain HTTP calls to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shared = root / "shared"
        (self.shared / "code").mkdir(parents=True, exist_ok=True)
        self.config = root / "config.yaml"
        self.config.write_text(
            f"ray: {{shared_root: {self.shared}}}\n"
            "v2:\n  scheduler: {tick_s: 0.5}\n"
            "  webhooks: {allow_networks: ['127.0.0.0/8']}\n")
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def db(self) -> Path:
        return self.shared / "common" / "db" / "mvp_v2.sqlite3"

    def start(self, wait_s: float = 60.0) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVE), "--config", str(self.config), "--port",
             str(self.port)], stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "ARGUS_API_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)})
        log.close()
        deadline = time.monotonic() + wait_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited:\n{self.log()}")
            try:
                if self.call("GET", "/healthz", timeout_s=2)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the service did not start:\n{self.log()}")
            time.sleep(0.05)  # polling a process that is starting

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")

    def call(self, method: str, path: str, body: str | None = None,
             content_type: str = "application/json", timeout_s: float = 10.0
             ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            if body is not None:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def submit_waiting(self) -> str:
        """A task that never fits the fake cluster's 8-GPU node: it waits until canceled."""
        spec = (f"workload: sft\ncode_path: {self.shared}/code\nmodel_id: org/model\n"
                f"train_file: {self.shared}/train.parquet\nval_file: null\nnnodes: 1\n"
                "n_gpus_per_node: 16\n")
        status, body = self.call("POST", "/api/v2/tasks", spec, "application/yaml")
        if status != 201:
            raise RuntimeError(f"submit: {status} {body[:300]!r}")
        return json.loads(body)["task_id"]

    def canceled_event_ids(self) -> set[int]:
        """Every task.canceled event the database holds (read-only, after the fact)."""
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT id, payload_json FROM events "
                                "WHERE event_type = 'STATE_TRANSITION'").fetchall()
        finally:
            conn.close()
        return {i for i, p in rows if json.loads(p).get("to") == "CANCELED"}


@dataclass
class BurstResult:
    expected: set[int]
    received: set[int]
    arrivals: list[Arrival]
    refused: list[str]
    deliveries: int  # HTTP requests that arrived (duplicates included)

    @property
    def lost(self) -> set[int]:
        return self.expected - self.received


def burst(root: Path, *, events: int = 200, kill_after: int | None = None,
          receiver_delay_s: float = 0.0, wait_s: float = 60.0) -> BurstResult:
    """``events`` task.canceled events to one hook; with ``kill_after``, SIGKILL the
    service after that many cancels were answered, start it again on the same database
    and cancel the rest. Waits (polling, up to ``wait_s``) until the receiver has every
    event the database holds."""
    api = Api(root)
    with Receiver(delay_s=receiver_delay_s) as receiver:
        api.start()
        try:
            status, body = api.call("POST", "/api/v2/webhooks", json.dumps(
                {"url": receiver.url, "events": [CANCELED]}))
            if status != 201:
                raise RuntimeError(f"register: {status} {body[:300]!r}")
            receiver.secret = json.loads(body)["secret"]
            tasks = [api.submit_waiting() for _ in range(events)]
            left = list(tasks)
            for i, task in enumerate(tasks):
                if kill_after is not None and i == kill_after:
                    api.kill9()
                    api.start()
                try:
                    status, _ = api.call("POST", f"/api/v2/tasks/{task}:cancel")
                except OSError:
                    continue
                if status in (200, 409):
                    left.remove(task)
            for task in left:  # a cancel cut off by the kill: its answer never came
                api.call("POST", f"/api/v2/tasks/{task}:cancel")
            deadline = time.monotonic() + wait_s
            expected = api.canceled_event_ids()
            while not expected <= receiver.event_ids() and time.monotonic() < deadline:
                time.sleep(0.05)  # polling the receiver, with a deadline
        finally:
            api.stop()
        return BurstResult(expected, receiver.event_ids(), list(receiver.arrivals),
                           list(receiver.refused), len(receiver.arrivals))
