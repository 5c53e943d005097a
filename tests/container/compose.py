"""The compose cluster (CPU profile) driven from this host, for the container tier and
bench/bench_heal_containers.py.

``scripts/container_env.sh setup`` prepares the host (engine, compose, images); this
module runs ``docker compose`` with a project and container prefix of its own, a private
shared directory and free host ports, so it never touches a cluster a user runs. The
cluster is observed the way the nodes see each other: head.json on the shared directory,
and the head's GCS (reachable from this host through the compose bridge).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from raypool import discovery
from raypool.health import HealthError, NodeView, alive_workers, list_nodes

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "container_env.sh"
CANNOT_RUN_DOCKER = 3  # container_env.sh's exit status when the host cannot run Docker
CONF_IN_CONTAINER = "/run/argus-node/supervisord.conf"
CLUSTER_NAME = "argus-ray"
CPU_FILES = ("docker-compose.yaml", "docker-compose.cpu.yaml")


class HostCannotRunDocker(RuntimeError):
    """``container_env.sh`` says this host cannot run Docker at all (the message says why)."""


def setup(*args: str, timeout_s: float = 1800) -> float:
    """Run ``container_env.sh setup [args]`` (``ha``: the PostgreSQL image too); returns its
    wall time. Raises HostCannotRunDocker (exit 3) or RuntimeError (any other failure,
    with the script's output)."""
    start = time.monotonic()
    # Without the caller's ARGUS_* settings: the image tag and base are the CPU profile's
    # defaults, the ones ComposeCluster runs.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    proc = subprocess.run([str(SETUP), "setup", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO, env=env)
    if proc.returncode == CANNOT_RUN_DOCKER:
        lines = [line for line in proc.stderr.splitlines() if "cannot run Docker" in line]
        raise HostCannotRunDocker(lines[-1] if lines else proc.stderr.strip())
    if proc.returncode != 0:
        raise RuntimeError(f"{SETUP} setup failed ({proc.returncode}):\n"
                           f"{proc.stdout}\n{proc.stderr}")
    return time.monotonic() - start


def standin_spec(steps: int) -> bytes:
    """A stand-in run's JobSpec (1 GPU, ``steps`` a second apart, a checkpoint every
    step) on the compose cluster's shared root, as a submit's body."""
    return yaml.safe_dump({
        "workload": "ppo", "code_path": "/private/code/standin-verl",
        "model_id": "org/model", "train_file": "/private/data/train.parquet",
        "val_file": "/private/data/val.parquet", "nnodes": 1, "n_gpus_per_node": 1,
        "total_training_steps": steps, "save_freq": 1,
        "overrides": [f"+argus_demo.duration_s={steps}"],
    }).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def poll(predicate: Callable[[], bool], timeout_s: float, what: str,
         interval_s: float = 0.2) -> float:
    """Seconds until ``predicate`` holds; TimeoutError naming ``what`` at the deadline."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(interval_s)
    raise TimeoutError(f"not within {timeout_s:g}s: {what}")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    stat: str
    args: str


class ComposeCluster:
    """Head + 2 workers of docker-compose.yaml + docker-compose.cpu.yaml under one prefix
    (``files``: other compose files layered the same way, e.g. docker-compose.ha.yaml)."""

    def __init__(self, prefix: str = "argus-ct", extra_env: dict[str, str] | None = None,
                 files: tuple[str, ...] = CPU_FILES):
        self.prefix = prefix
        self.files = files
        self.docker = shutil.which("docker") or "docker"
        self.shared = Path(tempfile.mkdtemp(prefix=f"{prefix}-shared-"))
        self.dashboard_port = free_port()
        self.api_port = free_port()
        self.head = f"{prefix}-ray-head"
        self.workers = (f"{prefix}-ray-worker-0", f"{prefix}-ray-worker-1")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
        self.env.update({
            "ARGUS_SHARED_DIR": str(self.shared), "ARGUS_CONTAINER_PREFIX": prefix,
            "ARGUS_COMPOSE_PROJECT": prefix,
            "ARGUS_DASHBOARD_HOST_PORT": str(self.dashboard_port),
            "ARGUS_API_HOST_PORT": str(self.api_port),
        })
        self.env.update(extra_env or {})
        self.up_s: float | None = None  # compose up -> both workers joined, once up() ran

    # -- plumbing ---------------------------------------------------------------------

    @property
    def containers(self) -> tuple[str, ...]:
        return (self.head, *self.workers)

    @property
    def head_file(self) -> Path:
        return self.shared / "ray" / "discovery" / CLUSTER_NAME / "head.json"

    @property
    def job_server_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def run(self, *argv: str, check: bool = True, timeout_s: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              cwd=REPO, env=env or self.env)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n"
                               f"{proc.stdout}\n{proc.stderr}")
        return proc

    def docker_cmd(self, *args: str, check: bool = True, timeout_s: float = 120
                   ) -> subprocess.CompletedProcess[str]:
        return self.run(self.docker, *args, check=check, timeout_s=timeout_s)

    def compose(self, *args: str, check: bool = True, timeout_s: float = 180
                ) -> subprocess.CompletedProcess[str]:
        files = [arg for name in self.files for arg in ("-f", name)]
        return self.run(self.docker, "compose", "-p", self.prefix, *files, *args, check=check,
                        timeout_s=timeout_s)

    def exec(self, container: str, *argv: str, check: bool = True, timeout_s: float = 60
             ) -> subprocess.CompletedProcess[str]:
        return self.docker_cmd("exec", container, *argv, check=check, timeout_s=timeout_s)

    def script(self, name: str, *args: str, env: dict[str, str] | None = None,
               check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run(str(REPO / "scripts" / name), *args, check=check, timeout_s=timeout_s,
                        env={**self.env, **(env or {})})

    def inspect(self, container: str, template: str) -> str:
        return self.docker_cmd("inspect", "-f", template, container).stdout.strip()

    def ip(self, container: str) -> str:
        return self.inspect(container, "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")

    # -- lifecycle --------------------------------------------------------------------

    def up(self, timeout_s: float = 120) -> float:
        """Start the cluster from the built image; seconds until both workers joined."""
        self.compose("down", "--remove-orphans", "--timeout", "5", check=False)
        start = time.monotonic()
        self.compose("up", "-d", "--no-build")
        poll(lambda: self.alive_worker_count() == len(self.workers), timeout_s,
             f"both workers join (docker logs {self.head})")
        self.up_s = time.monotonic() - start
        return self.up_s

    def down(self, timeout_s: float = 180) -> float:
        start = time.monotonic()
        self.compose("down", "--remove-orphans", timeout_s=timeout_s)
        return time.monotonic() - start

    def remove_shared(self) -> None:
        shutil.rmtree(self.shared, ignore_errors=True)

    def leftover_containers(self) -> list[str]:
        out = self.docker_cmd("ps", "-a", "--filter",
                              f"label=com.docker.compose.project={self.prefix}",
                              "--format", "{{.Names}} {{.Status}}").stdout
        return [line for line in out.splitlines() if line.strip()]

    # -- what the cluster looks like ------------------------------------------------

    def head_record(self) -> discovery.HeadRecord | None:
        return discovery.read_record(str(self.head_file), CLUSTER_NAME).record

    def nodes(self) -> list[NodeView]:
        record = self.head_record()
        if record is None:
            raise HealthError("no head record")
        return list_nodes(record.gcs_address, timeout_s=2.0)

    def alive_worker_count(self) -> int:
        try:
            return len(alive_workers(self.nodes()))
        except HealthError:
            return -1

    def rejoined(self, containers: tuple[str, ...], since: float) -> bool:
        """Both workers alive on the head that head.json names now, and each of
        ``containers`` registered anew after ``since`` (epoch s). A killed raylet stays
        "alive" in the GCS until its health checks fail, so being listed is not enough."""
        try:
            workers = alive_workers(self.nodes())
            ips = {self.ip(c) for c in containers}
        except (HealthError, RuntimeError):
            return False
        fresh = {w.ip for w in workers if w.ip in ips and w.start_time_s >= since}
        return len(workers) == len(self.workers) and fresh == ips

    def processes(self, container: str) -> list[Proc]:
        out = self.exec(container, "ps", "-eo", "pid=,ppid=,stat=,args=").stdout
        procs = []
        for line in out.splitlines():
            pid, ppid, stat, *args = line.split(None, 3)
            procs.append(Proc(int(pid), int(ppid), stat, args[0] if args else ""))
        # ps itself (and any other `docker exec` process) hangs off the runtime, ppid 0
        return [p for p in procs if p.pid == 1 or p.ppid != 0]

    def orphans(self, container: str) -> list[Proc]:
        """Zombies, and children of PID 1 (supervisord) that are not its programs: what
        a dead Ray leaves re-parented to PID 1 when nobody cleans up."""
        programs = {int(pid) for pid in self.exec(
            container, "supervisorctl", "-c", CONF_IN_CONTAINER, "pid", "all",
            check=False).stdout.split() if pid.isdigit()}
        return [p for p in self.processes(container)
                if "Z" in p.stat or (p.ppid == 1 and p.pid not in programs)]

    def raylet_pids(self) -> dict[str, list[int]]:
        """The raylet pids of every worker container (a kept raylet keeps its pid)."""
        return {w: [p.pid for p in self.processes(w) if "raylet" in p.args.split(" ", 1)[0]]
                for w in self.workers}

    def same_cluster_back(self, before: discovery.HeadRecord) -> bool:
        """head.json names a new generation of the same cluster (its store kept the id)
        and the GCS lists both workers alive."""
        record = self.head_record()
        return (record is not None and record.generation != before.generation
                and record.cluster_id == before.cluster_id
                and self.alive_worker_count() == len(self.workers))

    def ray_process_count(self, container: str, needle: str) -> int:
        return sum(needle in p.args.split(" ", 1)[0] for p in self.processes(container))

    def clean(self) -> bool:
        """No orphans anywhere, one GCS on the head and one raylet on each worker."""
        try:
            return (all(not self.orphans(c) for c in self.containers)
                    and self.ray_process_count(self.head, "gcs_server") == 1
                    and all(self.ray_process_count(w, "raylet") == 1 for w in self.workers))
        except RuntimeError:
            return False

    def describe(self) -> str:
        """Every container's process table, for a failure message."""
        parts = []
        for c in self.containers:
            with contextlib.suppress(RuntimeError):
                parts.append(f"-- {c}\n" + "\n".join(
                    f"{p.pid:>6} {p.ppid:>6} {p.stat:5} {p.args[:110]}"
                    for p in self.processes(c)))
        return "\n".join(parts)
