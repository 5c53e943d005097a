"""``bench_failover.py --mode leader``: two ``argus-api`` instances on one PostgreSQL
database behind one address, the leader killed each round (issue 54, item 3).

- The database: a throwaway PostgreSQL server (``tests/support/postgres.py``: local, the
  bench's own directory, durability off as in the tests).
- Instance A: the quick start's own service (``ARGUS_STORE_URL`` given to
  ``quickstart.sh up``), under its supervisord: killed, it is back within seconds.
- Instance B: the same command line and environment on another port, in a UTS namespace
  of its own (``unshare --uts``, host name ``argus-b``) so that it is another host to the
  lease (its death is seen when its lease expires, never by its pid); killed, the bench
  starts it again at once, as a supervisor would.
- ``Proxy``: one address for the clients, a TCP forwarder that takes each new connection
  to the next instance that accepts it (a dead one refuses: a client's retry lands on the
  other), as a load balancer with a connect check does.

Each round reads which instance leads (``/readyz``'s ``instance.role``), SIGKILLs it, and
measures kill -> a probe submitted through the proxy is admitted (by the other instance,
once it took the lease; or by A itself when A was killed and its supervisor's restart,
finding its former pid gone on this host, takes the lease back first).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STANDBY_HOST = "argus-b"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Proxy:
    """A TCP forwarder on one port to the first of ``ports`` (in turn) that accepts."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._turn = 0
        self._server = socket.create_server(("127.0.0.1", self.port), backlog=256)
        threading.Thread(target=self._accept, daemon=True, name="proxy").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._turn += 1
        for n in range(len(self.ports)):
            port = self.ports[(self._turn + n) % len(self.ports)]
            try:
                backend = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                continue
            backend.settimeout(None)
            threading.Thread(target=_pump, args=(backend, client), daemon=True).start()
            _pump(client, backend)
            return
        client.close()  # nobody accepts: the client sees a connection error and retries

    def close(self) -> None:
        self._server.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def instance_of(port: int) -> dict | None:
    """``/readyz``'s ``instance`` of the service on ``port`` (None: it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return json.loads(resp.read())["instance"]
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read()).get("instance")
    except (OSError, ValueError):
        return None


class Pair:
    """Instance A (the quick start's, supervised) and instance B (started here)."""

    def __init__(self, a_pid: Callable[[], int | None], a_port: int, token: str,
                 log_path: Path) -> None:
        self.a_pid = a_pid
        self.a_port = a_port
        self.b_port = free_port()
        self.token = token
        self.log_path = log_path
        self.b: subprocess.Popen[bytes] | None = None
        pid = a_pid()
        if pid is None:
            raise RuntimeError("the quick start's supervisord names no service pid")
        self.argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        env = Path(f"/proc/{pid}/environ").read_bytes().rstrip(b"\0").split(b"\0")
        self.env = dict(e.decode().split("=", 1) for e in env if b"=" in e)

    def start_b(self) -> None:
        argv = [a.decode() for a in self.argv]
        argv[argv.index("--port") + 1] = str(self.b_port)
        script = f'hostname {STANDBY_HOST} && exec "$@"'
        with open(self.log_path, "ab") as log:
            self.b = subprocess.Popen(
                ["unshare", "--uts", "sh", "-c", script, "sh", *argv],
                env={**self.env, "ARGUS_API_TOKEN": self.token}, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def b_answers(self) -> bool:
        return instance_of(self.b_port) is not None

    def leader(self) -> str | None:
        """``a`` or ``b``: the instance whose ``/readyz`` says it leads."""
        for name, port in (("a", self.a_port), ("b", self.b_port)):
            seen = instance_of(port)
            if seen is not None and seen["role"] == "leader":
                return name
        return None

    def kill(self, name: str) -> str:
        """SIGKILL ``name``; '' or why it could not be."""
        if name == "a":
            pid = self.a_pid()
            if pid is None:
                return "supervisord names no pid for A"
            os.kill(pid, signal.SIGKILL)
            return ""
        assert self.b is not None
        os.killpg(self.b.pid, signal.SIGKILL)
        self.b.wait(10)
        self.start_b()  # as its supervisor would
        return ""

    def stop(self) -> None:
        if self.b is not None and self.b.poll() is None:
            os.killpg(self.b.pid, signal.SIGTERM)
            try:
                self.b.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.b.pid, signal.SIGKILL)


def pg_server():
    sys.path.insert(0, str(ROOT / "tests"))
    from support.postgres import running_server

    return running_server()
