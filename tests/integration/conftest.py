"""Fixtures of the integration tier: a real local Ray cluster (fake GPUs), the real
``argus-api`` as a subprocess, an HTTP client for it, and GPUs taken outside Argus.

One cluster serves the whole session (Ray start costs ~10 s here); each test gets a
fresh service (own shared root and database) and leaves the cluster idle for the next.

The store's engine: a test that uses ``service_store`` (``@pytest.mark.usefixtures``) runs
twice, its services on their own SQLite file (``[sqlite]``) and on a fresh database of the
session's throwaway PostgreSQL server (``[postgresql]``, marked ``postgres``; ``pg_server``
in tests/conftest.py); every other test runs on SQLite. Everything that differs between
the engines is in the store, so one run of each flow on PostgreSQL is what matters, not a
second run of the Ray faults; and the tier must stay short (CI under 60 min). On both:
- test_flow.py: a gang waiting in PENDING_RESOURCES then admitted (SUCCEEDED), the
  fail-fast race and its retry, a gang that can never fit (pending reason, cancel while
  waiting), cancel of a running task, a run past its time limit (FAILED, TIME_LIMIT);
- test_pipelines.py: the example pipeline end to end (dependencies, a model resolved from
  SFT's checkpoint);
- test_preemption.py: a preemption and the preempted run's resume (users made by the API);
- test_flow.py's kill -9 of the service with a task queued, one caught mid-submit and one
  running, then its restart (what the store kept is all it has: never a second Ray job).
Those add ~4 min here (2 cores): 212 and 215 s in two runs with ``--durations`` before
the kill -9 joined them (27 s on PostgreSQL), the server's start included. Left on
SQLite: the serial gangs (the same admission as the gang test), logs (read from Ray and
the files), the failing pipelines (~105 s), two users through the CLI (~46 s), the Ray
faults. Each of those passed on PostgreSQL too when measured (all but the Ray faults).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from .jobproxy import JobServerProxy
from .localray import MARKER_ENV, LocalRayCluster, wait_until

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "examples" / "standin-verl"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELED"}
GPUS_PER_WORKER = 4
# Fast ticks and retries keep the tier short; ``scheduler={}`` gives the defaults.
TEST_SCHEDULER = {"tick_s": 0.5, "retry_interval_s": 5, "retry_min_backoff_s": 5}


# -- the cluster --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LocalRayCluster]:
    cluster = LocalRayCluster()
    try:
        cluster.start_head()
        cluster.add_worker(gpus=GPUS_PER_WORKER)
        yield cluster
    finally:
        cluster.stop()
        assert cluster.leftovers() == [], "Ray processes of the test cluster survived"
        cluster.cleanup_files()


def free_gpus(cluster: LocalRayCluster) -> dict[str, float]:
    """Free GPUs per alive node, read from the GCS as the service reads them."""
    from ray._raylet import GcsClient

    gcs = GcsClient(address=cluster.gcs_address)
    usage = gcs.get_all_resource_usage(timeout=10).resource_usage_data.batch
    return {u.node_id.hex(): float(u.resources_available.get("GPU", 0.0)) for u in usage}


def ensure_workers(cluster: LocalRayCluster, count: int) -> list[str]:
    """Exactly ``count`` 4-GPU workers, every GPU free (the previous test left it idle)."""
    while len(cluster.workers) < count:
        cluster.add_worker(gpus=GPUS_PER_WORKER)
    while len(cluster.workers) > count:
        cluster.remove_worker(sorted(cluster.workers)[-1])
    wait_until(lambda: sum(free_gpus(cluster).values()) == GPUS_PER_WORKER * count
               and len(cluster.alive_nodes()) == count + 1, 60, "an idle cluster")
    return sorted(cluster.workers)


# -- GPUs taken outside Argus ---------------------------------------------------------------

class GpuHolder:
    """A separate Ray driver (tests/integration/gpu_holder.py) holding GPUs on nodes."""

    def __init__(self, cluster: LocalRayCluster, holds: dict[str, float],
                 cpus: dict[str, float] | None = None) -> None:
        """``holds``: node id -> GPUs; ``cpus``: node id -> CPUs held beside them."""
        args = [f"{node}:{gpus}" + (f":{cpus[node]}" if cpus and node in cpus else "")
                for node, gpus in holds.items()]
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("gpu_holder.py")),
             cluster.gcs_address, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=dict(cluster.env()), text=True,
        )
        self._lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        wait_until(lambda: "HOLDING" in self._lines or self.proc.poll() is not None, 60,
                   "the GPU holder to take its GPUs")
        assert self.proc.poll() is None, "the GPU holder died before taking its GPUs"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line.strip())

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def hold_gpus(ray_cluster: LocalRayCluster) -> Iterator[Any]:
    holders: list[GpuHolder] = []

    def take(holds: dict[str, float], cpus: dict[str, float] | None = None) -> GpuHolder:
        holder = GpuHolder(ray_cluster, holds, cpus)
        holders.append(holder)
        return holder

    yield take
    for holder in holders:
        holder.release()


# -- the service --------------------------------------------------------------------------

class ArgusService:
    """``python -m service.main`` (argus-api) on a temp config, plus an HTTP client."""

    def __init__(self, cluster: LocalRayCluster, root: Path, *, ray_address: str | None = None,
                 head_json: Path | None = None, ray_timeout_s: float = 10,
                 scheduler: dict[str, Any] | None = None, store_url: str | None = None) -> None:
        """Ray at ``ray_address`` (and the cluster's GCS), or only through ``head_json``;
        the store in ``store_url`` (``v2.store.url``: a PostgreSQL database), or with None
        the SQLite file under the service's shared root (the default a config without a
        store gets)."""
        self.cluster = cluster
        self.store_url = store_url
        self.root = root
        self.shared_root = root / "shared"
        self.code_path = self.shared_root / "code" / "standin-verl"
        if not self.code_path.exists():
            shutil.copytree(STANDIN, self.code_path)
        self.token = secrets.token_hex(16)
        self.port = cluster.ports.one()
        self.config_path = root / "argus.yaml"
        where: dict[str, str] = {"head_json": str(head_json)} if head_json else {
            "address": ray_address or cluster.dashboard_url, "gcs_address": cluster.gcs_address}
        self.config_path.write_text(yaml.safe_dump({
            "ray": {
                **where,
                "shared_root": str(self.shared_root),
                "entrypoint_num_cpus": 1,
                "entrypoint_resources": {"worker_node": 1},
                "runtime_env": {"env_vars": {"PYTHONUNBUFFERED": "1"}},
                "timeout_s": ray_timeout_s,
            },
            "v2": {
                "api": {"host": "127.0.0.1", "port": self.port},
                "auth": {"token_env": "ARGUS_API_TOKEN"},
                "jobspec": {"allowed_roots": [str(self.shared_root)]},
                "scheduler": TEST_SCHEDULER if scheduler is None else scheduler,
                "progress": {"poll_s": 0.5},
                **({"store": {"url": store_url}} if store_url else {}),
            },
        }))
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {self.token}"
        self.proc: subprocess.Popen | None = None
        self.log_path = root / "argus-api.log"

    # -- process --------------------------------------------------------------------------
    def start(self) -> None:
        env = {**os.environ, "ARGUS_API_TOKEN": self.token, MARKER_ENV: self.cluster.marker}
        env.pop("ARGUS_STORE_URL", None)  # the config's store, never the caller's shell's
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service.main", "--config", str(self.config_path)],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        wait_until(self._healthy, 30, f"argus-api to answer (log: {self.log_path})")

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"argus-api exited {self.proc.returncode}: {self.log_tail()}")
        return requests.get(f"{self.url}/healthz", timeout=2).status_code == 200

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, as in a crash."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc = None

    def log_tail(self, n: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    # -- API ------------------------------------------------------------------------------
    def jobspec(self, *, nnodes: int = 1, gpus: int = 4, duration_s: float = 3,
                check_delay_s: float = 0, workload: str = "ppo", **fields: Any) -> str:
        """The stand-in's JobSpec; ``fields``: more JobSpec fields (e.g. max_runtime_s)."""
        data = self.shared_root / "data"
        return yaml.safe_dump({
            **fields,
            "workload": workload,
            "code_path": str(self.code_path),
            "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
            "train_file": str(data / "train.parquet"),
            "val_file": str(data / "val.parquet"),
            "nnodes": nnodes,
            "n_gpus_per_node": gpus,
            "overrides": [f"+argus_demo.duration_s={duration_s}",
                          f"+argus_demo.check_delay_s={check_delay_s}"],
        })

    def submit(self, **kw: Any) -> str:
        r = self.http.post(f"{self.url}/api/v2/tasks", data=self.jobspec(**kw),
                           headers={"Content-Type": "application/yaml"}, timeout=10)
        assert r.status_code == 201, r.text
        return r.json()["task_id"]

    def task(self, task_id: str) -> dict[str, Any]:
        r = self.http.get(f"{self.url}/api/v2/tasks/{task_id}", timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    def attempts(self, task_id: str) -> list[dict[str, Any]]:
        r = self.http.get(f"{self.url}/api/v2/tasks/{task_id}/attempts", timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["attempts"]

    def cancel(self, task_id: str) -> requests.Response:
        return self.http.post(f"{self.url}/api/v2/tasks/{task_id}:cancel", timeout=30)

    def logs(self, task_id: str, attempt: str = "latest") -> requests.Response:
        return self.http.get(f"{self.url}/api/v2/tasks/{task_id}/logs",
                             params={"attempt": attempt}, timeout=30)

    def list_tasks(self) -> list[dict[str, Any]]:
        r = self.http.get(f"{self.url}/api/v2/tasks", params={"limit": 200}, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["tasks"]

    def wait_for(self, task_id: str, pred: Any, timeout: float, what: str) -> dict[str, Any]:
        """Poll the task until ``pred(task)`` holds; the service log on failure."""
        try:
            return wait_until(lambda: (t := self.task(task_id)) and pred(t) and t,
                              timeout, f"{task_id} {what}", interval=0.25)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; last view {self.task(task_id)}\n"
                                 f"--- argus-api log ---\n{self.log_tail()}") from None

    def wait_state(self, task_id: str, states: str | set[str], timeout: float = 90
                   ) -> dict[str, Any]:
        wanted = {states} if isinstance(states, str) else states
        return self.wait_for(task_id, lambda t: t["state"] in wanted, timeout,
                             f"to reach {sorted(wanted)}")

    def assert_tasks_in_its_store(self) -> None:
        """The tasks the API lists are the rows of the PostgreSQL database the service was
        given (never of a SQLite file beside it); nothing to check on SQLite."""
        if self.store_url is None:
            return
        import psycopg

        with psycopg.connect(self.store_url) as conn:
            rows = {r[0] for r in conn.execute("SELECT task_id FROM tasks")}
        assert rows == {t["task_id"] for t in self.list_tasks()}, "tasks outside its store"

    def drain(self) -> None:
        """Cancel whatever is still alive and wait until every task has ended."""
        if self.proc is None:
            return
        for t in self.list_tasks():
            if t["state"] not in TERMINAL:
                self.cancel(t["task_id"])
        for t in self.list_tasks():
            self.wait_state(t["task_id"], TERMINAL, timeout=60)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def service_store(request: pytest.FixtureRequest) -> str | None:
    """The store of the test's services (see the module docstring): None, each service's
    own SQLite file; or a fresh, empty database on the session's PostgreSQL server, whose
    schema the service builds at start as a new installation's does."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("pg_server").database()


@pytest.fixture
def argus_factory(ray_cluster: LocalRayCluster, request: pytest.FixtureRequest
                  ) -> Iterator[Any]:
    """Make services on the session cluster (optionally behind a job-server proxy), on the
    engine of ``service_store`` where the test uses it, else on SQLite."""
    made: list[tuple[ArgusService, JobServerProxy | None]] = []
    store_url = (request.getfixturevalue("service_store")
                 if "service_store" in request.fixturenames else None)

    def make(*, proxy: bool = False, cluster: LocalRayCluster | None = None,
             **kw: Any) -> tuple[ArgusService, JobServerProxy | None]:
        target = cluster or ray_cluster
        prox = None
        if proxy:
            prox = JobServerProxy(target.dashboard_url)
            prox.start()
        root = Path(tempfile.mkdtemp(prefix="argus-it-", dir=target.root))
        kw.setdefault("store_url", store_url)
        svc = ArgusService(target, root, ray_address=prox.url if prox else target.dashboard_url,
                           **kw)
        made.append((svc, prox))
        svc.start()
        return svc, prox

    yield make
    for svc, prox in made:
        try:
            svc.drain()
            if svc.proc is not None:
                svc.assert_tasks_in_its_store()
        finally:
            svc.stop()
            if prox is not None:
                prox.stop()


@pytest.fixture
def argus(argus_factory: Any) -> ArgusService:
    return argus_factory()[0]


def ray_job(cluster: LocalRayCluster, submission_id: str) -> Any:
    """Ray's own record of a job (JobDetails), straight from the job server."""
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(cluster.dashboard_url).get_job_info(submission_id)


FENCE_PREFIX = "argus-fence-"


def live_fences(cluster: LocalRayCluster) -> list:
    """The fence jobs (``service.cluster.fence``) on Ray that have not ended, whoever
    started them."""
    from ray.job_submission import JobSubmissionClient

    return [j for j in JobSubmissionClient(cluster.dashboard_url).list_jobs()
            if (j.submission_id or "").startswith(FENCE_PREFIX) and not j.status.is_terminal()]


def stop_fences(cluster: LocalRayCluster) -> None:
    """Whatever a test left on the session's cluster (a fence outlives the service that
    started it): the next test wants an idle cluster."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(cluster.dashboard_url)
    for job in live_fences(cluster):
        client.stop_job(job.submission_id)
    wait_until(lambda: not live_fences(cluster), 60, "the fences to end")
