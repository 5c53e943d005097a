"""Container tier: the argus-ray-node image and the compose cluster on a real Docker engine.

``scripts/container_env.sh setup`` (the README's command) installs the engine and compose
when missing, builds the local base image and the node image; the tests then run
docker-compose.yaml + docker-compose.cpu.yaml (head + 2 workers with fake GPUs) under a
project of their own, inject every fault through the fault scripts' docker branches, and
check that each heals with no orphaned process in any container. One cluster serves the
module, in file order; each test leaves it healed, which is what it asserts.

A host that cannot run Docker at all (the setup script exits 3 and says why) skips the
tier with that reason; any other setup failure fails it.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from .compose import (
    REPO,
    ComposeCluster,
    HostCannotRunDocker,
    poll,
    setup,
)

pytestmark = [pytest.mark.container, pytest.mark.timeout(1500)]

TOKEN = f"ct-{secrets.token_hex(8)}"
STOP_GRACE_S = 30  # stop_grace_period in docker-compose.yaml


@pytest.fixture(scope="module")
def image() -> str:
    try:
        setup()
    except HostCannotRunDocker as exc:
        pytest.skip(str(exc))
    return "argus/argus-ray-node:cpu"


@pytest.fixture(scope="module")
def cluster(image: str) -> Iterator[ComposeCluster]:
    c = ComposeCluster()
    try:
        c.up()
        yield c
    finally:
        c.compose("down", "--remove-orphans", "--timeout", "10", check=False)
        c.remove_shared()


def wait_healed(c: ComposeCluster, since: float, *containers: str, timeout_s: float = 60
                ) -> float:
    took = poll(lambda: c.rejoined(containers, since), timeout_s,
                f"{', '.join(containers) or 'every worker'} back in the cluster")
    try:
        poll(c.clean, 30, "no orphaned process; one GCS, one raylet per worker")
    except TimeoutError as exc:
        pytest.fail(f"{exc}\n{c.describe()}")
    return took


# -- the cluster comes up -----------------------------------------------------------------


def test_compose_up_publishes_head_json_and_both_workers_join(cluster):
    record = cluster.head_record()
    assert record is not None, "no head.json on the shared volume"
    assert record.head_ip == cluster.ip(cluster.head)
    nodes = cluster.nodes()
    head = [n for n in nodes if n.alive and n.is_head]
    assert len(head) == 1
    assert head[0].resources.get("CPU", 0) == 0 and head[0].resources.get("GPU", 0) == 0
    workers = [n for n in nodes if n.alive and not n.is_head]
    assert sorted(w.ip for w in workers) == sorted(cluster.ip(w) for w in cluster.workers)
    for worker in workers:
        assert worker.resources["GPU"] == 4, "fake GPUs from ARGUS_WORKER_NUM_GPUS"
        assert worker.resources["CPU"] == 16
        assert worker.resources["worker_node"] == 100
    assert cluster.up_s is not None and cluster.up_s < 120, f"cluster took {cluster.up_s:.1f}s"
    print(f"compose up -> both workers joined: {cluster.up_s:.1f}s")


def test_argus_node_status_is_healthy_in_every_container(cluster):
    def status(container: str) -> dict:
        done = cluster.exec(container, "argus-node", "status", "--json", check=False)
        result = json.loads(done.stdout)
        assert done.returncode == (0 if result["ok"] else 1), done.stderr
        return result

    # A node's own view may lag this host's by a poll (a program still STARTING).
    try:
        poll(lambda: all(status(c)["ok"] for c in cluster.containers), 30,
             "argus-node status ok in every container", 1.0)
    except TimeoutError:
        pytest.fail(f"{[status(c) for c in cluster.containers]}")
    record = cluster.head_record()
    assert record is not None
    for container in cluster.containers:
        node = status(container)
        assert node["ok"], (container, node)
        assert node["head_record"]["generation"] == record.generation
        expected = "healthy" if container == cluster.head else "joined"
        assert node["ray"] == expected, (container, node)
        assert node["programs"] and set(node["programs"].values()) == {"RUNNING"}


def test_docker_healthcheck_reports_healthy(cluster):
    def healthy() -> bool:
        return all(cluster.inspect(c, "{{.State.Health.Status}}") == "healthy"
                   for c in cluster.containers)

    poll(healthy, 90, "Docker's HEALTHCHECK says healthy for every container", 1.0)
    probe = json.loads(cluster.inspect(cluster.head, "{{json .Config.Healthcheck.Test}}"))
    assert probe == ["CMD", "argus-node", "status", "--json"], "the image's own probe"


def test_logs_reach_docker_logs_and_the_shared_volume(cluster):
    def docker_logs(container: str) -> str:
        out = cluster.docker_cmd("logs", container)
        return out.stdout + out.stderr

    assert "head-watchdog" in docker_logs(cluster.head)
    # The watchdog logs "registered" once it sees itself in the GCS, which may be a moment
    # after this host saw it there.
    for worker in cluster.workers:
        poll(lambda w=worker: "registered" in docker_logs(w), 30, f"{worker}: join in docker logs")
    logs = cluster.shared / "common" / "logs"
    assert "registered" in (logs / "ray-worker-0" / "worker-watchdog.log").read_text()
    assert (logs / "ray-head" / "head-watchdog.log").stat().st_size > 0
    assert (logs / "ray-head" / "head-publisher.log").stat().st_size > 0


# -- the task service inside the head container -----------------------------------------


def api(cluster: ComposeCluster, method: str, path: str, body: bytes | None = None,
        content_type: str = "application/json") -> dict:
    request = urllib.request.Request(
        cluster.api_url + path, data=body, method=method,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def api_text(cluster: ComposeCluster, path: str) -> str:
    request = urllib.request.Request(cluster.api_url + path,
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def test_task_service_in_the_head_runs_a_demo_task_on_a_worker(cluster):
    from ray.job_submission import JobSubmissionClient

    code = cluster.shared / "code" / "standin-verl"
    shutil.copytree(REPO / "examples" / "standin-verl", code,
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {"ARGUS_API_TOKEN": TOKEN, "ARGUS_API_CONTAINER": cluster.head}
    start = cluster.script("20_start_api.sh", env=env)
    assert "argus-api: running" in start.stdout, start.stdout + start.stderr
    try:
        assert cluster.script("22_status_api.sh", env=env).returncode == 0
        spec = (REPO / "examples" / "demo-ppo.yaml").read_text().replace("@SHARED@", "/private")
        task_id = api(cluster, "POST", "/api/v2/tasks", spec.encode(),
                      "application/yaml")["task_id"]

        def ended() -> bool:
            return api(cluster, "GET", f"/api/v2/tasks/{task_id}")["state"] in (
                "SUCCEEDED", "FAILED", "CANCELED")

        poll(ended, 180, f"task {task_id} ends", 0.5)
        task = api(cluster, "GET", f"/api/v2/tasks/{task_id}")
        assert task["state"] == "SUCCEEDED", task

        nodes = cluster.nodes()
        head_id = next(n.node_id for n in nodes if n.alive and n.is_head)
        worker_ids = {n.node_id for n in nodes if n.alive and not n.is_head}
        job = JobSubmissionClient(cluster.job_server_url).get_job_info(f"{task_id}--a01")
        assert job.driver_node_id in worker_ids, "the driver runs on a worker"
        log = api_text(cluster, f"/api/v2/tasks/{task_id}/logs")
        placed = [line.split("node ", 1)[1].split()[0] for line in log.splitlines()
                  if "worker ready: node " in line]
        assert len(placed) == 4, log
        assert not any(head_id.startswith(p) for p in placed), "a GPU task ran on the head"
        assert all(any(w.startswith(p) for w in worker_ids) for p in placed)
    finally:
        stop = cluster.script("21_stop_api.sh", env=env, check=False)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert cluster.script("22_status_api.sh", env=env, check=False).returncode == 3


# -- faults, through the fault scripts' docker branches ---------------------------------


def supervisor_pid(c: ComposeCluster, container: str, program: str) -> int:
    out = c.exec(container, "supervisorctl", "-c", "/run/argus-node/supervisord.conf",
                 "pid", program, check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


def test_killed_watchdog_is_restarted_and_the_worker_rejoins(cluster):
    worker = cluster.workers[0]
    old = supervisor_pid(cluster, worker, "argus_worker_watchdog")
    assert old > 0
    since = time.time()
    cluster.script("fault_kill_watchdog.sh", "docker", worker)
    poll(lambda: supervisor_pid(cluster, worker, "argus_worker_watchdog") not in (0, old), 10,
         "supervisord restarts the watchdog")
    wait_healed(cluster, since, worker)


def test_ray_stop_force_in_a_worker_heals_and_kills_the_orphaned_driver(cluster):
    from ray.job_submission import JobSubmissionClient

    marker = f"argus-orphan-probe-{secrets.token_hex(3)}"
    client = JobSubmissionClient(cluster.job_server_url)
    job_id = client.submit_job(entrypoint=f"python3 -c 'import time; time.sleep(900)' {marker}",
                               entrypoint_resources={"worker_node": 1})

    def driver_container() -> str | None:
        for worker in cluster.workers:
            if any(marker in p.args for p in cluster.processes(worker)):
                return worker
        return None

    poll(lambda: driver_container() is not None, 90, "the job's driver runs on a worker", 0.5)
    worker = driver_container()
    assert worker is not None
    since = time.time()
    cluster.script("fault_ray_stop.sh", "docker", worker, "--force")
    wait_healed(cluster, since, worker)
    poll(lambda: driver_container() is None, 15, "the orphaned driver is gone")
    client.stop_job(job_id)


def head_fault_keeps_the_workers(cluster, fault: Callable[[], object], what: str) -> None:
    """After ``fault`` the head comes back as the same cluster on its GCS store: the
    workers keep their raylets (same pids) and nothing is left over."""
    before = cluster.head_record()
    assert before is not None and before.cluster_id
    raylets = cluster.raylet_pids()
    fault()
    poll(lambda: cluster.same_cluster_back(before), 90,
         f"{what}: the same cluster back with both workers")
    assert cluster.raylet_pids() == raylets, "a worker restarted its raylet"
    poll(cluster.clean, 30, "no orphaned process; one GCS, one raylet per worker")


def test_killed_head_gcs_comes_back_as_the_same_cluster(cluster):
    head_fault_keeps_the_workers(
        cluster, lambda: cluster.script("fault_kill_head_ray.sh", "docker", cluster.head),
        "GCS killed")


def test_restarted_head_container_comes_back_as_the_same_cluster(cluster):
    head_fault_keeps_the_workers(
        cluster, lambda: cluster.docker_cmd("restart", cluster.head,
                                            timeout_s=STOP_GRACE_S + 30),
        "docker restart of the head")


def test_recreated_head_container_comes_back_as_the_same_cluster(cluster):
    """An upgrade: the head container recreated from the image, the same shared volume
    (the GCS store); the workers joined through the service name follow it."""
    head_fault_keeps_the_workers(
        cluster, lambda: cluster.compose("up", "-d", "--no-deps", "--force-recreate",
                                         "ray-head", timeout_s=STOP_GRACE_S + 60),
        "the head container recreated")


def test_killed_worker_container_rejoins_when_started_again(cluster):
    worker = cluster.workers[1]
    cluster.docker_cmd("kill", worker)
    poll(lambda: cluster.alive_worker_count() == 1, 60, "the GCS sees the killed worker leave")
    since = time.time()
    cluster.docker_cmd("start", worker)
    took = wait_healed(cluster, since, worker)
    print(f"worker container started -> joined: {took:.1f}s")


def test_stale_head_json_keeps_a_worker_out_until_fresh(cluster):
    worker = cluster.workers[1]
    cluster.script("fault_stale_head.sh", "docker", cluster.head)
    try:
        assert cluster.alive_worker_count() == 2, "joined workers keep their connection"
        cluster.script("fault_ray_stop.sh", "docker", worker, "--force")
        poll(lambda: cluster.ray_process_count(worker, "raylet") == 0, 20, "its Ray is gone")
        poll(lambda: cluster.alive_worker_count() == 1, 60, "the GCS sees the worker leave")
        # With only a stale record the worker must not join: watch a few poll periods.
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            assert cluster.alive_worker_count() == 1, "joined through a stale head.json"
            time.sleep(0.5)
    finally:
        since = time.time()
        cluster.script("fault_stale_head.sh", "docker", cluster.head, "--restore")
    wait_healed(cluster, since, worker)


# -- stopping ---------------------------------------------------------------------------


def test_compose_stop_and_down_within_the_grace_period(cluster):
    start = time.monotonic()
    cluster.compose("stop", timeout_s=STOP_GRACE_S + 60)
    took = time.monotonic() - start
    states = {c: cluster.inspect(c, "{{.State.Status}} {{.State.ExitCode}}")
              for c in cluster.containers}
    assert all(s.split()[0] == "exited" for s in states.values()), states
    # 137 = SIGKILL: Docker gave up waiting, so the grace period did not suffice.
    assert all(s.split()[1] != "137" for s in states.values()), states
    assert took < STOP_GRACE_S, f"stop took {took:.1f}s"
    cluster.down()
    assert cluster.leftover_containers() == []
    print(f"compose stop: {took:.1f}s")


# -- docker run with environment variables only (a platform's way) ---------------------


def test_docker_run_with_env_only_forms_a_cluster(image: str):
    c = ComposeCluster(prefix="argus-ctrun")
    net = f"{c.prefix}-net"
    names = [f"{c.prefix}-head", f"{c.prefix}-worker"]
    common = ["--network", net, "--shm-size", "512m", "-v", f"{c.shared}:/private",
              "-e", "ARGUS_RAY_EXTRA_ARGS=--object-store-memory=134217728"]
    try:
        c.docker_cmd("network", "create", net)
        c.docker_cmd("run", "-d", "--name", names[0], "--hostname", "run-head", *common,
                     "-e", "ARGUS_ROLE=head", image)
        c.docker_cmd("run", "-d", "--name", names[1], "--hostname", "run-worker", *common,
                     "-e", "ARGUS_ROLE=worker", "-e", "ARGUS_WORKER_NUM_GPUS=2",
                     "-e", "ARGUS_WORKER_NUM_CPUS=8", image)
        c.head = names[0]
        poll(lambda: c.alive_worker_count() == 1, 120, "the worker joins the head", 0.5)
        (worker,) = [n for n in c.nodes() if n.alive and not n.is_head]
        assert worker.ip == c.ip(names[1]) and worker.resources["GPU"] == 2
        def node_ok(name: str) -> bool:
            done = c.exec(name, "argus-node", "status", "--json", check=False)
            return done.returncode == 0 and json.loads(done.stdout)["ok"]

        poll(lambda: all(node_ok(n) for n in names), 30, "argus-node status ok on both", 1.0)
        start = time.monotonic()
        c.docker_cmd("stop", *names, timeout_s=STOP_GRACE_S + 30)
        assert time.monotonic() - start < 15, "supervisord stops the node on SIGTERM"
    finally:
        c.docker_cmd("rm", "-f", *names, check=False)
        c.docker_cmd("network", "rm", net, check=False)
        c.remove_shared()


@pytest.mark.parametrize(
    ("env", "code", "message"),
    [([], 64, "ARGUS_ROLE is not set"),
     (["-e", "ARGUS_ROLE=boss"], 64, "must be 'head', 'worker' or 'api', got 'boss'"),
     (["-e", "ARGUS_ROLE=worker", "-e", "ARGUS_RAY_PORT=70000"], 2,
      "ARGUS_RAY_PORT='70000': expected a TCP port 1..65535")],
)
def test_docker_run_refuses_bad_settings(image: str, env: list[str], code: int,
                                         message: str) -> None:
    c = ComposeCluster(prefix="argus-ctbad")
    try:
        done = c.docker_cmd("run", "--rm", *env, image, check=False)
    finally:
        c.remove_shared()
    assert done.returncode == code, done.stdout + done.stderr
    assert message in done.stderr
