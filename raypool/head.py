"""Head side: the watchdog that keeps ``ray start --head --block`` alive, and the publisher
that writes head.json while that head is healthy.

The two talk through one local file, ``<run dir>/head.generation.json``, which the
watchdog rewrites with a new generation before every start; the publisher only ever
publishes the generation in that file, so a restarted head shows a new generation. Next to
it the publisher puts the cluster id it reads from the GCS: on the embedded store
(:mod:`raypool.gcsstore`) a restart keeps it, and workers keep their runs.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from raypool import discovery
from raypool.atomicfile import write_atomic
from raypool.config import NodeSettings, ray_identity_args
from raypool.gcsstore import StoreLock, StoreLocked
from raypool.headrecord import HeadRecord, new_generation
from raypool.health import HealthError, cluster_id, gcs_alive
from raypool.loop import SignalLoop
from raypool.policy import Action, Limits, bootstrap_record_blocks_head, decide_head
from raypool.watchdog import RayWatchdog, ray_executable


def head_argv(settings: NodeSettings) -> list[str]:
    return [
        ray_executable(), "start", "--head", "--num-cpus=0", "--num-gpus=0",
        f"--port={settings.ray_port}", "--dashboard-host=0.0.0.0",
        f"--dashboard-port={settings.dashboard_port}",
        f"--node-ip-address={settings.node_ip}", f"--temp-dir={settings.ray_temp_dir}",
        "--disable-usage-stats", "--log-color=false", "--block",
        *ray_identity_args(settings), *settings.ray_extra_args,
    ]


def local_gcs_address(settings: NodeSettings) -> str:
    host = f"[{settings.node_ip}]" if ":" in settings.node_ip else settings.node_ip
    return f"{host}:{settings.ray_port}"


# Where `ray start` records the last cluster it started or joined (ray._common.utils).
RAY_ADDRESS_FILE = "ray_current_cluster"


def clear_bootstrap_record(settings: NodeSettings, log: logging.Logger) -> bool:
    """Remove ``<ray temp dir>/ray_current_cluster`` when it names this head's own GCS
    address (:func:`~raypool.policy.bootstrap_record_blocks_head`): with it, a worker raylet
    on this host still pointing at the killed GCS makes ``ray start --head`` refuse. The
    head's ``ray start`` writes it again once started. True when it was removed."""
    path = os.path.join(settings.ray_temp_dir, RAY_ADDRESS_FILE)
    try:
        with open(path) as f:
            recorded: str | None = f.read()
    except FileNotFoundError:
        recorded = None
    except OSError as exc:
        log.warning("cannot read %s (ray start --head may refuse to start): %s", path, exc)
        return False
    address = local_gcs_address(settings)
    if not bootstrap_record_blocks_head(recorded, address):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("cannot remove %s (ray start --head may refuse to start): %s", path, exc)
        return False
    log.info("removed %s (it named %s: with a raylet of this host still joined to that "
             "address, ray start --head would refuse to start)", path, address)
    return True


def write_generation(path: str, generation: str, now: float) -> None:
    write_atomic(path, json.dumps({"generation": generation, "started_at": now}))


def read_generation(path: str) -> str | None:
    try:
        with open(path) as f:
            value = json.load(f).get("generation")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


class HeadWatchdog(RayWatchdog):
    def __init__(self, settings: NodeSettings, logger: logging.Logger):
        super().__init__(settings, logger)
        self.store_lock = StoreLock(settings.gcs_store_lock)
        self._last_wait = ""

    def store_problem(self) -> str | None:
        """Why the GCS store cannot be opened now; None when it can (the lock is held
        from the first start until the watchdog exits)."""
        if self.settings.gcs_store != "rocksdb":
            return None
        try:
            self.store_lock.acquire()
        except (StoreLocked, OSError) as exc:
            return str(exc)
        return None

    def tick(self) -> bool:
        s = self.settings
        child = self.child_state()
        healthy = False
        if child.running and child.exit_code is None:
            healthy = gcs_alive(local_gcs_address(s), timeout_s=3.0)
            self.mark_ok(healthy)
            child = self.child_state()
        problem = None if child.running else self.store_problem()
        decision = decide_head(child, healthy, Limits(s.start_timeout_s, s.unhealthy_s),
                               problem)
        if decision.action is Action.STOP:
            self.stop_child(decision.reason)
            return True
        if decision.action is Action.WAIT and decision.reason != self._last_wait:
            self.log.warning(decision.reason)
        self._last_wait = decision.reason if decision.action is Action.WAIT else ""
        if decision.action is Action.START:
            generation = new_generation()
            write_generation(s.generation_file, generation, time.time())
            self.log.info("new head generation %s", generation)
            clear_bootstrap_record(s, self.log)
            self.start_child(head_argv(s))
        return False


def run_head_watchdog(settings: NodeSettings, logger: logging.Logger) -> int:
    os.makedirs(settings.run_dir, exist_ok=True)
    watchdog = HeadWatchdog(settings, logger)
    try:
        return watchdog.run()
    finally:
        watchdog.store_lock.release()


@dataclass(frozen=True)
class PublishState:
    generation: str | None = None
    seq: int = 0
    written_mono: float = float("-inf")
    cluster_id: str = ""


def should_publish(healthy: bool, generation: str | None, state: PublishState,
                   mono: float, refresh_s: float) -> bool:
    """Publish only for a healthy head: at once for a new generation, else every refresh."""
    if not healthy or generation is None:
        return False
    return generation != state.generation or mono - state.written_mono >= refresh_s


class HeadPublisher:
    tick_s = 1.0

    def __init__(self, settings: NodeSettings, logger: logging.Logger,
                 healthy: Callable[[], bool] | None = None,
                 read_cluster_id: Callable[[], str] | None = None):
        self.settings = settings
        self.log = logger
        self._healthy = healthy or (lambda: gcs_alive(local_gcs_address(settings), 3.0))
        self._cluster_id = read_cluster_id or (
            lambda: cluster_id(local_gcs_address(settings), 3.0))
        self.state = self._resume()
        self._was_healthy = True

    def _resume(self) -> PublishState:
        """Continue the sequence of an existing record of the same generation."""
        s = self.settings
        existing = discovery.read_record(s.head_ip_file, s.cluster_name).record
        generation = read_generation(s.generation_file)
        if existing and existing.generation == generation and existing.head_ip == s.node_ip:
            return PublishState(generation, existing.seq, cluster_id=existing.cluster_id)
        return PublishState()

    def record(self, generation: str, seq: int, now: float, cluster: str) -> HeadRecord:
        s = self.settings
        return HeadRecord(
            cluster_name=s.cluster_name, head_ip=s.node_ip, gcs_port=s.ray_port,
            dashboard_port=s.dashboard_port, job_server_url=s.job_server_url,
            generation=generation, seq=seq, written_at=now, ttl_s=s.ttl_s,
            hostname=socket.gethostname(), pid=os.getpid(), cluster_id=cluster)

    def _identity(self, generation: str) -> str | None:
        """The cluster id for this generation: read once from the GCS (a generation is one
        GCS process); None while the GCS does not tell it (nothing is published then)."""
        if generation == self.state.generation and self.state.cluster_id:
            return self.state.cluster_id
        try:
            return self._cluster_id()
        except HealthError as exc:
            self.log.info("cluster id not readable yet: %s", exc)
            return None

    def tick(self, now: float, mono: float) -> None:
        generation = read_generation(self.settings.generation_file)
        healthy = generation is not None and self._healthy()
        if healthy != self._was_healthy:
            self.log.info("local head %s", "healthy: publishing" if healthy
                          else "not healthy: not publishing (head.json goes stale)")
            self._was_healthy = healthy
        if not should_publish(healthy, generation, self.state, mono, self.settings.refresh_s):
            return
        assert generation is not None
        cluster = self._identity(generation)
        if cluster is None:
            return
        seq = self.state.seq + 1 if generation == self.state.generation else 1
        discovery.write_record(self.settings.head_ip_file,
                               self.record(generation, seq, now, cluster))
        if generation != self.state.generation:
            self.log.info("published generation %s of cluster %s at %s", generation, cluster,
                          local_gcs_address(self.settings))
        self.state = PublishState(generation, seq, mono, cluster)

    def run(self) -> int:
        """Tick every ``tick_s`` until SIGTERM."""
        def step() -> bool:
            self.tick(time.time(), time.monotonic())
            return False

        SignalLoop(self.tick_s, self.log).run(step)
        return 0
