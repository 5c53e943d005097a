"""A running ``argus-api`` (``tests/fuzz/serve.py``) and raw HTTP exchanges with it.

Shared by the fuzz tier and ``bench/bench_hostile.py``. Plain sockets and threads: the
hostile requests are bytes no HTTP client library would send, and the process under
test is a separate one, so a crash of it (or a leak) shows and cannot take the test
runner down.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fuzz-token"
SERVE = Path(__file__).with_name("serve.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Exchange:
    """One request and what came back."""

    status: int | None  # None: closed without an answer
    raw: bytes
    seconds: float

    @property
    def head(self) -> bytes:
        return self.raw.partition(b"\r\n\r\n")[0]

    @property
    def body(self) -> bytes:
        return self.raw.partition(b"\r\n\r\n")[2]

    def json(self) -> object:
        return json.loads(self.body)


def exchange(port: int, data: bytes, *, timeout_s: float = 10.0) -> Exchange:
    """Send ``data`` on a new connection and read the final answer (after any ``100
    Continue``): up to its ``Content-Length``, or until the server closes. ``seconds`` is
    the time until the answer was complete (a server may linger a moment before it
    closes a connection whose body it did not read)."""
    started = time.perf_counter()
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        # a 413 may answer and close before the whole body went out
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        sock.settimeout(timeout_s)
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while not _complete(out, head_only=data.startswith(b"HEAD ")):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                out += chunk
    seconds = time.perf_counter() - started
    out = _final(out)
    status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.") else None
    return Exchange(status, out, seconds)


def _final(raw: bytes) -> bytes:
    """``raw`` without the interim (1xx) answers in front of the final one."""
    while raw.startswith(b"HTTP/1.") and raw.split(b" ", 2)[1:2] == [b"100"]:
        raw = raw.partition(b"\r\n\r\n")[2]
    return raw


def _complete(raw: bytes, *, head_only: bool) -> bool:
    answer = _final(raw)
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    if head_only:
        return True
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False  # no length: the answer ends when the server closes


@dataclass
class Service:
    """The server process; ``stop()`` ends it (SIGTERM, then kill)."""

    proc: subprocess.Popen
    port: int
    root: Path
    log_path: Path
    token: str = TOKEN
    shared: Path = field(init=False)

    def __post_init__(self) -> None:
        self.shared = self.root / "shared"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def auth(self) -> bytes:
        return f"Authorization: Bearer {self.token}\r\n".encode()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def get(self, path: str, *, auth: bool = True, timeout_s: float = 10.0
            ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def rss_kb(self) -> int:
        return _status_kb(self.pid, "VmRSS")

    def peak_rss_kb(self) -> int:
        return _status_kb(self.pid, "VmHWM")

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def api_call(port: int, method: str, path: str, token: str | None, body: str | None = None,
         content_type: str = "application/json") -> tuple[int, dict[str, str], bytes]:
    """One request to the service on ``port`` (``token`` None: anonymous): status,
    headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        if body is not None:
            headers["Content-Type"] = content_type
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def plain_user_token(argus: Service, name: str, label: str) -> str:
    """A token of ``name``, a plain user the admin creates through the API."""
    status, _, body = api_call(argus.port, "POST", "/api/v2/users", argus.token,
                           json.dumps({"name": name, "role": "user"}))
    assert status == 201, body
    status, _, body = api_call(argus.port, "POST", f"/api/v2/users/{name}/tokens", argus.token,
                           json.dumps({"label": label}))
    assert status == 201, body
    return json.loads(body)["token"]


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def start_service(root: Path, *, api: dict[str, float] | None = None,
                  user_limits: dict[str, int] | None = None, wait_s: float = 30.0) -> Service:
    """Start the server with its database and shared root under ``root``; ``api``: more
    ``v2.api`` settings (timeouts, connection cap); ``user_limits``: every user's
    ``v2.users.limits``."""
    shared = root / "shared"
    (shared / "code").mkdir(parents=True, exist_ok=True)
    api_yaml = ", ".join(f"{k}: {v}" for k, v in (api or {}).items())
    limits_yaml = ", ".join(f"{k}: {v}" for k, v in (user_limits or {}).items())
    config = root / "config.yaml"
    config.write_text(f"ray: {{shared_root: {shared}}}\n"
                      f"v2:\n  scheduler: {{tick_s: 0.5}}\n  api: {{{api_yaml}}}\n"
                      f"  users: {{limits: {{{limits_yaml}}}}}\n")
    port = free_port()
    log_path = root / "server.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, str(SERVE), "--config", str(config), "--port", str(port)],
            stdout=log_file, stderr=subprocess.STDOUT,
            env={**os.environ, "ARGUS_API_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)},
        )
    service = Service(proc, port, root, log_path)
    deadline = time.monotonic() + wait_s
    while True:
        if not service.alive():
            raise RuntimeError(f"the service exited at start-up:\n{service.log()}")
        try:
            if service.get("/healthz", auth=False, timeout_s=2)[0] == 200:
                return service
        except OSError:
            pass
        if time.monotonic() > deadline:
            service.stop()
            raise RuntimeError(f"the service did not answer /healthz:\n{service.log()}")
        time.sleep(0.05)  # polling a process that is starting


def good_spec(shared: Path, *overrides: str) -> str:
    """A JobSpec the service accepts (with ``overrides`` if given)."""
    text = (f"workload: sft\ncode_path: {shared}/code\nmodel_id: org/model\n"
            f"train_file: {shared}/train.parquet\nval_file: null\nnnodes: 1\n"
            "n_gpus_per_node: 1\n")
    if overrides:
        text += "overrides:\n" + "".join(f"  - {json.dumps(o)}\n" for o in overrides)
    return text


class HealthProbe:
    """Polls ``/healthz`` from a thread every ``interval_s`` and keeps each latency."""

    def __init__(self, service: Service, interval_s: float = 0.01) -> None:
        import threading

        self._service = service
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        conn: http.client.HTTPConnection | None = None
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self._service.port,
                                                      timeout=10)
                conn.request("GET", "/healthz")
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    self.failures.append(f"status {resp.status}")
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(repr(exc))
                conn = None
                continue
            self.latencies.append(time.perf_counter() - started)
            self._stop.wait(self._interval)

    def p99(self) -> float:
        return percentile(self.latencies, 99)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started
