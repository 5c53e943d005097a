"""A real local Ray cluster for the integration tier and the dispatch benchmark.

Other people run their own Ray clusters on the same host, so this never calls a bare
``ray stop``: every node is a ``ray start --block`` child in its own process group, every
port is picked free at start (never Ray's defaults), and the cluster has its own short
``--temp-dir`` that all its nodes share (separate temp dirs break ``get_job_logs``).

Job drivers run in sessions of their own (Ray's job supervisor uses ``start_new_session``)
and survive a dead raylet, so killing process groups is not enough to leave nothing
behind. Every process started here inherits the environment marker ``ARGUS_LOCALRAY=<id>``
(Ray passes its environment down to workers and drivers); ``stop()`` kills every process
that carries this cluster's marker and ``leftovers()`` lets a test assert none is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MARKER_ENV = "ARGUS_LOCALRAY"
_WORKER_PORT_SPAN = 60  # worker processes per node, each needs one port


def wait_until(pred: Callable[[], object], timeout: float, what: str,
               interval: float = 0.2) -> object:
    """Poll ``pred`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = pred()
            if value:
                return value
        except Exception as exc:  # a poll may fail while a thing is coming up
            last_exc = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


class _PortPool:
    """Free TCP ports, each handed out once per pool, all below the kernel's ephemeral
    range (32768+ here). A port picked by binding port 0 is an ephemeral one: between the
    pick and Ray's bind, any outgoing connection of the host (Ray's own gRPC clients
    first) may take it as its local port, and a dashboard that cannot bind never
    comes up. Below that range only a listener can hold a port, and ``_port_free``
    checks for one."""

    def __init__(self) -> None:
        self._used: set[int] = set()

    def one(self) -> int:
        for _ in range(1000):
            port = random.randrange(10000, 20000)
            if port not in self._used and _port_free(port):
                self._used.add(port)
                return port
        raise RuntimeError("no free port found in 10000-19999")

    def block(self, size: int) -> tuple[int, int]:
        """A contiguous range of free ports (20000-32000, apart from ``one``'s)."""
        for _ in range(200):
            start = random.randrange(20000, 32000 - size)
            ports = range(start, start + size)
            if self._used.intersection(ports) or not all(_port_free(p) for p in ports):
                continue
            self._used.update(ports)
            return start, start + size - 1
        raise RuntimeError("no free block of worker ports found")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class RayNode:
    name: str
    proc: subprocess.Popen
    node_manager_port: int
    log_path: Path

    @property
    def pgid(self) -> int:
        return self.proc.pid  # started with start_new_session: pid == pgid


@dataclass
class LocalRayCluster:
    """One head (``--num-cpus=0 --num-gpus=0``) plus workers added one after another."""

    root: Path = field(default_factory=lambda: Path(f"/tmp/ar-{secrets.token_hex(3)}"))
    ready_timeout_s: float = 90.0
    # Where job entrypoints find `python3` (first on the nodes' PATH): this venv by default.
    python_bin_dir: Path = field(default_factory=lambda: Path(sys.executable).parent)

    def __post_init__(self) -> None:
        self.marker = self.root.name
        self.ports = _PortPool()
        self.head: RayNode | None = None
        self.workers: dict[str, RayNode] = {}
        self.gcs_port = 0
        self.dashboard_port = 0
        self._seq = 0

    # -- addresses ------------------------------------------------------------------
    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def temp_dir(self) -> Path:
        return self.root / "ray"

    # -- lifecycle ------------------------------------------------------------------
    def _node_args(self) -> tuple[list[str], int]:
        lo, hi = self.ports.block(_WORKER_PORT_SPAN)
        nm_port = self.ports.one()
        return [
            f"--temp-dir={self.temp_dir}",
            "--node-ip-address=127.0.0.1",
            f"--node-manager-port={nm_port}",
            f"--object-manager-port={self.ports.one()}",
            f"--metrics-export-port={self.ports.one()}",
            f"--dashboard-agent-listen-port={self.ports.one()}",
            f"--dashboard-agent-grpc-port={self.ports.one()}",
            f"--runtime-env-agent-port={self.ports.one()}",
            f"--min-worker-port={lo}",
            f"--max-worker-port={hi}",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
            "--block",
        ], nm_port

    def _spawn(self, name: str, args: list[str], nm_port: int,
               extra_env: Mapping[str, str] | None = None) -> RayNode:
        log_path = self.root / f"{name}.log"
        # The venv first on PATH: job entrypoints run `python3 -m ...` as on a node image.
        path = f"{self.python_bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        env = {**os.environ, MARKER_ENV: self.marker, "RAY_USAGE_STATS_ENABLED": "0",
               "PATH": path, **(extra_env or {})}
        env.pop("RAY_ADDRESS", None)
        # `ray` of that Python too: workers and actors run on the Python of `ray start`,
        # which must be the one that has the workload (verl) installed, as on a node image.
        ray_bin = str(self.python_bin_dir / "ray")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [ray_bin, "start", *args], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                cwd=self.root,  # drivers inherit it: verl's Hydra writes outputs/ there
            )
        return RayNode(name, proc, nm_port, log_path)

    def start_head(self, *, same_address: bool = False) -> None:
        """Start the head and wait for it. ``same_address``: a restart on the GCS and
        dashboard ports of the previous head (a new cluster at the old address)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if not (same_address and self.gcs_port):
            self.gcs_port = self.ports.one()
            self.dashboard_port = self.ports.one()
        args, nm_port = self._node_args()
        args = [
            "--head", f"--port={self.gcs_port}", f"--dashboard-port={self.dashboard_port}",
            "--dashboard-host=127.0.0.1", "--include-dashboard=true",
            f"--ray-client-server-port={self.ports.one()}",
            "--num-cpus=0", "--num-gpus=0", *args,
        ]
        self.head = self._spawn("head", args, nm_port)
        head = self.head
        try:
            wait_until(lambda: self._dashboard_up(head), self.ready_timeout_s,
                       "the Ray dashboard/job server")
        except (TimeoutError, RuntimeError) as exc:
            raise type(exc)(f"{exc}\n{self._head_logs()}") from None
        wait_until(lambda: len(self.alive_nodes()) >= 1, self.ready_timeout_s, "the head node")

    def add_worker(self, *, gpus: int = 4, cpus: int = 16, worker_slots: int = 100,
                   env: Mapping[str, str] | None = None) -> str:
        """Start one more worker (fake GPUs) and wait until the GCS lists it alive. A
        worker whose Ray does not come up is started once more, as a node's watchdog
        would; the first try's logs stay in the run's warnings. ``env``: more environment
        for its ``ray start`` (its workers inherit it)."""
        assert self.head is not None, "start the head first"
        self._seq += 1
        name = f"w{self._seq}"
        failure = self._start_worker(name, gpus, cpus, worker_slots, env)
        if failure is not None:
            warnings.warn(f"worker {name} did not join on the first try, started again:\n"
                          f"{failure}", stacklevel=2)
            failure = self._start_worker(name, gpus, cpus, worker_slots, env)
            if failure is not None:
                raise RuntimeError(failure)
        return name

    def _start_worker(self, name: str, gpus: int, cpus: int, worker_slots: int,
                      env: Mapping[str, str] | None = None) -> str | None:
        """Start worker ``name`` and wait for it: None once it joined, else why not (its
        logs included; the node is stopped)."""
        args, nm_port = self._node_args()
        resources = json.dumps({"worker_node": worker_slots})
        args = [f"--address={self.gcs_address}", f"--num-gpus={gpus}",
                f"--num-cpus={cpus}", f"--resources={resources}", *args]
        node = self._spawn(name, args, nm_port, env)
        self.workers[name] = node
        try:
            # Joined means this node's manager port is alive in the GCS (not "one node
            # more": a dead node leaving the table at that moment would hide the join).
            state = wait_until(lambda: self._join_state(node), self.ready_timeout_s,
                               f"worker {name} to join")
        except TimeoutError as exc:
            why = str(exc)
        else:
            if state == "joined":
                return None
            why = f"worker {name}'s `ray start` exited with {node.proc.returncode}"
        logs = self._node_logs(node)
        self.remove_worker(name)
        return f"{why}\n{logs}"

    def _join_state(self, node: RayNode) -> str | None:
        if node.proc.poll() is not None:
            return "exited"
        ports = {n["NodeManagerPort"] for n in self.alive_nodes()}
        return "joined" if node.node_manager_port in ports else None

    def node_id_of(self, name: str) -> str:
        """The Ray node id (hex) of a worker started here, found by its manager port."""
        port = self.workers[name].node_manager_port
        for node in self.alive_nodes():
            if node["NodeManagerPort"] == port:
                return node["NodeID"]
        raise KeyError(f"worker {name} is not alive in the GCS")

    def remove_worker(self, name: str) -> None:
        node = self.workers.pop(name)
        _kill_group(node.proc)

    def stop_head(self) -> None:
        """Kill the head (job server and GCS with it): what a head crash looks like."""
        if self.head is not None:
            _kill_group(self.head.proc)
            self.head = None

    def stop(self) -> None:
        """Stop every node and every process carrying this cluster's marker."""
        for name in list(self.workers):
            self.remove_worker(name)
        self.stop_head()
        for proc in self.leftovers():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        wait_until(lambda: not self.leftovers(), 30, "every Ray process of the test cluster "
                   "to exit")

    def kill_orphans(self, keep: tuple[int, ...] = ()) -> None:
        """Kill what dead nodes left behind (job drivers live in sessions of their own),
        as a node's watchdog does before it starts Ray again; ``keep``: pids to spare."""
        for proc in self.leftovers():
            if proc.pid not in keep:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()

    def cleanup_files(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def leftovers(self) -> list[psutil.Process]:
        """Live processes started by this cluster (marker in their environment)."""
        found = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.environ().get(MARKER_ENV) == self.marker and \
                        proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    # -- views ----------------------------------------------------------------------
    def _dashboard_up(self, head: RayNode) -> bool:
        import urllib.request

        if head.proc.poll() is not None:
            raise RuntimeError(f"the head's `ray start` exited with {head.proc.returncode}")
        with urllib.request.urlopen(f"{self.dashboard_url}/api/version", timeout=2) as r:
            return r.status == 200

    def _newest_session_logs(self) -> Path | None:
        sessions = sorted(self.temp_dir.glob("session_2*"), key=lambda p: p.stat().st_mtime)
        return sessions[-1] / "logs" if sessions else None

    def _head_logs(self) -> str:
        """The end of the head's `ray start` output and of its newest session's dashboard
        log: what says why a head did not come up."""
        logs = [self.root / "head.log"]
        if (session := self._newest_session_logs()) is not None:
            logs += [session / "dashboard.log", session / "gcs_server.out"]
        return _tails(logs)

    def _node_logs(self, node: RayNode) -> str:
        """What says why a worker did not join, most telling first (a CI log may keep only
        the start): whether the head still runs, the end of the GCS's log and of the
        head's and the worker's `ray start` output, then the newest raylet logs."""
        head = self.head
        if head is None:
            status = "the head is stopped"
        elif (code := head.proc.poll()) is not None:
            status = f"the head's `ray start` exited with {code}: its Ray is gone"
        else:
            status = "the head's `ray start` still runs"
        logs: list[Path] = []
        raylets: list[Path] = []
        if (session := self._newest_session_logs()) is not None:
            logs.append(session / "gcs_server.out")
            raylets = sorted(session.glob("raylet*.out"), key=lambda p: p.stat().st_mtime)
        logs += [self.root / "head.log", node.log_path]
        return f"{status}\n{_tails(logs)}\n{_tails(raylets[-2:], tail=1500)}"

    def alive_nodes(self) -> list[dict]:
        from ray._private.internal_api import get_state_from_address

        state = get_state_from_address(self.gcs_address)
        try:
            return [n for n in state.node_table() if n["Alive"]]
        finally:
            state.disconnect()

    def env(self) -> Mapping[str, str]:
        """Environment for a process of the test that talks to this cluster."""
        return {**os.environ, MARKER_ENV: self.marker, "RAY_ADDRESS": self.gcs_address}


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the node's whole process group (raylet, GCS, workers): a crash, and fast."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _tails(paths: list[Path], tail: int = 4000) -> str:
    parts = []
    for path in paths:
        try:
            text = path.read_text(errors="replace")[-tail:]
        except OSError as exc:
            text = f"(unreadable: {exc})"
        parts.append(f"--- {path} (end) ---\n{text}")
    return "\n".join(parts)
