"""``bench_failover.py --mode leader``: two ``argus-api`` instances on one PostgreSQL
database behind one address, the leader killed each round (issue 54, item 3).

- The database: a throwaway PostgreSQL server (``tests/support/postgres.py``: local, the
  bench's own directory, durability off as in the tests).
- Instances A and B: the quick start's service (``ARGUS_STORE_URL`` given to
  ``quickstart.sh up``) is stopped, and its command line and environment run twice, each
  on a port of its own in a UTS namespace of its own (``unshare --uts``, host names
  ``argus-a``, ``argus-b``): two hosts to the lease, so a dead leader is seen when its
  lease expires, never by its pid (on one host a supervisor's restart, finding its
  former pid gone, takes the lease back at once: the ``sqlite-supervised`` mode measures
  that path). A killed leader stays down for the round, as a lost host would, and is
  started again after it (a standby from then on).
- ``Proxy``: one address for the clients, a TCP forwarder that takes each new connection
  to the next instance that accepts it (a dead one refuses: a client's retry lands on the
  other), as a load balancer with a connect check does.

Each round reads which instance leads (``/readyz``'s ``instance.role``), SIGKILLs it, and
measures kill -> a probe submitted through the proxy is admitted by the other instance,
once it took the lease.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import urllib.request
from pathlib import Path

from support.quickstart import free_port  # tests/ is on the path (bench_failover.py)

ROOT = Path(__file__).resolve().parents[1]


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

    def answers(self) -> bool:
        """Some instance behind the proxy answers ``/readyz``."""
        return instance_of(self.port) is not None

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
    """Instances A and B: the quick start's service's command line and environment, each
    on a port of its own and in a UTS namespace of its own (hosts ``argus-a``,
    ``argus-b``: two hosts to the lease), supervised by the bench."""

    def __init__(self, pid: int, token: str, run_dir: Path) -> None:
        self.argv = [a.decode() for a in
                     Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")]
        env = Path(f"/proc/{pid}/environ").read_bytes().rstrip(b"\0").split(b"\0")
        self.env = dict(e.decode().split("=", 1) for e in env if b"=" in e)
        self.env["ARGUS_API_TOKEN"] = token
        self.run_dir = run_dir
        self.ports = {"a": free_port(), "b": free_port()}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.down: list[str] = []  # killed, to be started again after the round
        self.restarts = 0  # exits of their own (a deposed leader stops) started again
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._supervise, daemon=True, name="supervise").start()

    def _supervise(self) -> None:
        """What a supervisor does: an instance that exited by itself is started again."""
        while not self._stop.wait(0.5):
            with self._lock:
                for name, proc in list(self.procs.items()):
                    if proc.poll() is not None and name not in self.down:
                        self.restarts += 1
                        self.start(name)

    def start(self, name: str) -> None:
        argv = list(self.argv)
        argv[argv.index("--port") + 1] = str(self.ports[name])
        script = f'hostname argus-{name} && exec "$@"'
        with open(self.run_dir / f"argus-api-{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                ["unshare", "--uts", "sh", "-c", script, "sh", *argv], env=self.env,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def answers(self, name: str) -> bool:
        return instance_of(self.ports[name]) is not None

    def leader(self) -> str | None:
        """``a`` or ``b``: the instance whose ``/readyz`` says it leads."""
        for name, port in self.ports.items():
            seen = instance_of(port)
            if seen is not None and seen["role"] == "leader":
                return name
        return None

    def kill(self, name: str, sig: int = signal.SIGKILL) -> str:
        """Signal ``name`` and wait for it to exit. SIGKILL: its host is gone for the
        round (``revive`` starts it again after it); SIGTERM: a clean stop, started again
        at once (a rolling upgrade's step). '' or why it could not be."""
        with self._lock:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                return f"{name} was not running"
            os.killpg(proc.pid, sig)
            proc.wait(30)
            if sig == signal.SIGKILL:
                self.down.append(name)
            else:
                self.start(name)
        return ""

    def revive(self) -> None:
        """Start what the last round killed (it comes back as a standby)."""
        with self._lock:
            while self.down:
                self.start(self.down.pop())

    def stop(self) -> None:
        self._stop.set()
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


def pg_server():
    from support.postgres import running_server

    return running_server()
