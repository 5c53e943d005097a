"""The service finds Ray through head.json only, on a cluster of its own, and follows the
head without a restart: first a head restarted in place (a new generation at the same
address), then a head that moved (new GCS and dashboard ports: another address).

The record is written by the node runtime's own publisher (``raypool.head.HeadPublisher``,
with its real health check of the local GCS), ticked by a thread here as supervisord's
program would run it. The GCS is never on 6379 (ports are picked free), so a service that
guessed "job server host + 6379" would wait forever.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from pathlib import Path

import pytest

from raypool.config import load_node_settings
from raypool.head import HeadPublisher, write_generation
from raypool.headrecord import new_generation

from .conftest import ArgusService, ray_job
from .localray import LocalRayCluster, wait_until

pytestmark = pytest.mark.timeout(500)


class Publisher:
    """The head's publisher for the local cluster's current head, on a thread."""

    def __init__(self, cluster: LocalRayCluster, head_json: Path) -> None:
        self.cluster = cluster
        self.head_json = head_json
        self.run_dir = cluster.root / "pub"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def new_head(self) -> None:
        """What the head watchdog does before every start: a new generation. Then publish
        for the head at the cluster's current ports (a moved head has its own publisher)."""
        self.stop()
        settings = load_node_settings({
            "ARGUS_ROLE": "head", "ARGUS_NODE_IP": "127.0.0.1",
            "ARGUS_SHARED_ROOT": str(self.cluster.root), "ARGUS_CLUSTER_NAME": "argus-it",
            "ARGUS_HEAD_IP_FILE": str(self.head_json), "ARGUS_RUN_DIR": str(self.run_dir),
            "ARGUS_LOG_DIR": str(self.cluster.root / "logs"),
            "ARGUS_RAY_PORT": str(self.cluster.gcs_port),
            "ARGUS_DASHBOARD_PORT": str(self.cluster.dashboard_port),
            "ARGUS_TTL_S": "10", "ARGUS_REFRESH_S": "1",
        })
        write_generation(settings.generation_file, new_generation(), time.time())
        publisher = HeadPublisher(settings, logging.getLogger("test.publisher"))
        self._stop = threading.Event()

        def loop() -> None:
            while not self._stop.is_set():
                publisher.tick(time.time(), time.monotonic())
                self._stop.wait(0.5)

        self._thread = threading.Thread(target=loop, name="head-publisher", daemon=True)
        self._thread.start()

    def record(self) -> dict:
        return json.loads(self.head_json.read_text())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None


def _published(pub: Publisher, cluster: LocalRayCluster, *, not_generation: str = "") -> str:
    """Wait until head.json names the cluster's current head; its generation."""
    def current() -> str | None:
        rec = pub.record()
        ok = rec["gcs_port"] == cluster.gcs_port and rec["generation"] != not_generation
        return rec["generation"] if ok else None

    return str(wait_until(current, 60, "head.json to name the current head"))


def _head_goes_down(cluster: LocalRayCluster, argus: ArgusService) -> None:
    for worker in list(cluster.workers):
        cluster.remove_worker(worker)
    cluster.stop_head()
    assert argus.proc is not None
    cluster.kill_orphans(keep=(argus.proc.pid,))


def _runs_on_current_head(argus: ArgusService, cluster: LocalRayCluster, tid: str) -> None:
    task = argus.wait_state(tid, "SUCCEEDED", timeout=180)
    attempts = argus.attempts(tid)
    assert len(attempts) == 1, attempts
    sid = task["latest_attempt"]["ray_submission_id"]
    assert str(ray_job(cluster, sid).status.value) == "SUCCEEDED", "ran on another head"


def test_service_finds_ray_through_head_json_and_follows_the_head():
    cluster = LocalRayCluster()
    pub = None
    argus = None
    try:
        cluster.start_head()
        cluster.add_worker(gpus=4)
        assert cluster.gcs_port != 6379
        head_json = cluster.root / "discovery" / "head.json"
        pub = Publisher(cluster, head_json)
        pub.new_head()
        first = _published(pub, cluster)

        root = Path(tempfile.mkdtemp(prefix="argus-it-", dir=cluster.root))
        argus = ArgusService(cluster, root, head_json=head_json, ray_timeout_s=5)
        config = argus.config_path.read_text()
        assert "address" not in config, "the service must know Ray only from head.json"
        argus.start()
        pid = argus.proc.pid if argus.proc else None
        _runs_on_current_head(argus, cluster, argus.submit(nnodes=1, gpus=4, duration_s=1))

        # The head restarts in place: the same ports, a new cluster, a new generation.
        _head_goes_down(cluster, argus)
        waiting = argus.submit(nnodes=1, gpus=4, duration_s=1)
        argus.wait_for(waiting, lambda t: "unreachable" in (t["pending_reason"] or ""), 60,
                       "to wait because Ray is unreachable")
        cluster.start_head(same_address=True)
        pub.new_head()
        second = _published(pub, cluster, not_generation=first)
        cluster.add_worker(gpus=4)
        _runs_on_current_head(argus, cluster, waiting)

        # The head moves: another GCS port and job server address.
        old_gcs = cluster.gcs_port
        _head_goes_down(cluster, argus)
        pub.stop()
        cluster.start_head()
        assert cluster.gcs_port != old_gcs
        pub.new_head()
        third = _published(pub, cluster, not_generation=second)
        cluster.add_worker(gpus=4)
        _runs_on_current_head(argus, cluster, argus.submit(nnodes=1, gpus=4, duration_s=1))

        assert argus.proc is not None and argus.proc.pid == pid, "the service restarted"
        log = argus.log_tail(200_000)
        for generation in (first, second, third):
            assert f"generation {generation}" in log, f"never followed {generation}:\n{log}"
    finally:
        if pub is not None:
            pub.stop()
        if argus is not None:
            argus.stop()
        cluster.stop()
        assert cluster.leftovers() == []
        cluster.cleanup_files()
