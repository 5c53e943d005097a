"""scripts/20_start_api.sh, 21_stop_api.sh, 22_status_api.sh in host mode (--local): the
service under a supervisord of its own (the real one, from the lock).

Most tests put a small stand-in ``argus-api`` first on PATH (it serves /healthz, or
fails, or never answers, or ignores SIGTERM, or crashes at start while a file exists) so
the scripts' own logic and the supervision are tested in seconds each; the
``integration`` test at the end runs the real service. Every wait is a poll with a
deadline.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = REPO / "scripts"
START, STOP, STATUS = (SCRIPTS / n for n in
                       ("20_start_api.sh", "21_stop_api.sh", "22_status_api.sh"))
LIBRARY = SCRIPTS / "_api_common.sh"
TOKEN = "test-token-不是秘密"

FAKE_API = f"""#!{sys.executable}
# Stand-in argus-api: FAKE_API_MODE = serve | exit | mute | stubborn
# (any mode: exits at once while the file FAKE_API_CRASH names exists)
import http.server, os, signal, sys, time
args = sys.argv[1:]
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
mode = os.environ.get("FAKE_API_MODE", "serve")
print("fake argus-api pid", os.getpid(), " ".join(args), flush=True)
if mode == "exit" or os.path.exists(os.environ.get("FAKE_API_CRASH", "/nonexistent")):
    sys.exit("fake argus-api: refusing to start")
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "mute":
    while True:
        signal.pause()

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{{"status": "ok", "fake": true}}'
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.ThreadingHTTPServer((host, port), Health).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def wait_gone(pid: int, deadline_s: float = 15.0) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


class Env:
    """Environment and run dir of one test; kills whatever it started, by pid."""

    def __init__(self, tmp: Path, *, fake_mode: str | None):
        self.tmp = tmp
        self.port = free_port()
        self.run_dir = tmp / "run"
        path = os.environ["PATH"]
        if fake_mode is not None:
            bindir = tmp / "bin"
            bindir.mkdir()
            (bindir / "argus-api").write_text(FAKE_API)
            (bindir / "argus-api").chmod(0o755)
            path = f"{bindir}:{path}"
        config = tmp / "config.yaml"
        config.write_text(
            "ray:\n"
            f"  address: http://127.0.0.1:{free_port()}\n"  # nothing listens on these
            f"  gcs_address: 127.0.0.1:{free_port()}\n"
            f"  shared_root: {tmp / 'shared'}\n"
            "  timeout_s: 1\n"
            "v2:\n"
            f"  sqlite: {{db_path: {tmp / 'db' / 'argus.sqlite3'}}}\n"
            "  scheduler: {tick_s: 0.5}\n"
        )
        self.vars = {
            "PATH": path,
            "HOME": str(tmp),
            "ARGUS_API_TOKEN": TOKEN,
            "ARGUS_CONFIG": str(config),
            "ARGUS_API_HOST": "127.0.0.1",
            "ARGUS_API_PORT": str(self.port),
            "ARGUS_API_RUN_DIR": str(self.run_dir),
            "ARGUS_SHARED_ROOT": str(tmp / "shared"),
            "ARGUS_API_START_TIMEOUT_S": "30",
            "ARGUS_API_STOP_TIMEOUT_S": "10",
            # this checkout's service, whatever checkout a shared .venv was installed from
            "PYTHONPATH": str(REPO),
        }
        if fake_mode is not None:
            self.vars["FAKE_API_MODE"] = fake_mode

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "argus-api.pid"

    def pid(self) -> int:
        """The service's supervisord (what the pid file names)."""
        return int(self.pid_file.read_text().split()[0])

    def service_pid(self) -> int | None:
        """The service's pid under its supervisord (None while it does not run)."""
        out = subprocess.run([str(REPO / ".venv" / "bin" / "supervisorctl"), "-c",
                              str(self.run_dir / "argus-api-supervisord.conf"), "pid",
                              "argus_api"], capture_output=True, text=True, timeout=30)
        pid = out.stdout.strip()
        return int(pid) if pid.isdigit() and pid != "0" else None

    def run(self, script: Path, *args: str, **overrides: str | None):
        env = dict(self.vars)
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return subprocess.run([str(script), *args], env=env, capture_output=True,
                              text=True, timeout=90, cwd=self.tmp)

    def cleanup(self) -> None:
        if self.pid_file.exists():
            pid, service = self.pid(), self.service_pid() if alive(self.pid()) else None
            for gone in (pid, service):
                if gone is not None and alive(gone):
                    os.killpg(gone, 9)
                    wait_gone(gone)


@pytest.fixture
def make_env(tmp_path: Path) -> Iterator:
    envs: list[Env] = []

    def make(fake_mode: str | None = "serve") -> Env:
        env = Env(tmp_path, fake_mode=fake_mode)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.cleanup()


# -- static -------------------------------------------------------------------------------


@pytest.mark.parametrize("script", [START, STOP, STATUS, LIBRARY], ids=lambda p: p.name)
def test_scripts_parse(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)


def test_scripts_pass_shellcheck() -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (scripts/bootstrap.sh installs it)")
    proc = subprocess.run(
        ["shellcheck", "-x", str(START), str(STOP), str(STATUS), str(LIBRARY)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout


def test_scripts_are_strict_and_executable() -> None:
    for script in (START, STOP, STATUS):
        assert os.access(script, os.X_OK), script
        assert "set -euo pipefail" in script.read_text(), script


# -- refusals -----------------------------------------------------------------------------


def test_start_refuses_without_a_token(make_env) -> None:
    env = make_env()
    proc = env.run(START, "--local", ARGUS_API_TOKEN=None)
    assert proc.returncode == 2
    assert "ARGUS_API_TOKEN is not set" in proc.stderr
    assert not env.run_dir.exists(), "nothing may start"


def test_start_checks_the_token_variable_the_config_names(make_env) -> None:
    env = make_env()
    proc = env.run(START, "--local", ARGUS_API_TOKEN_ENV="MY_TOKEN")
    assert proc.returncode == 2
    assert "MY_TOKEN is not set" in proc.stderr
    proc = env.run(START, "--local", ARGUS_API_TOKEN_ENV="BAD NAME; x")
    assert proc.returncode == 2
    assert "must be an environment variable name" in proc.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"ARGUS_CONFIG": "no/such.yaml"}, f"config file not found: {REPO}/no/such.yaml"),
     ({"ARGUS_API_PORT": "80a"}, "ARGUS_API_PORT must be a port number 1..65535, got '80a'"),
     ({"ARGUS_API_PORT": "70000"}, "got '70000'"),
     ({"ARGUS_API_START_TIMEOUT_S": "0"}, "ARGUS_API_START_TIMEOUT_S must be a positive")],
)
def test_start_refuses_bad_settings(make_env, overrides: dict, message: str) -> None:
    env = make_env()
    proc = env.run(START, "--local", **overrides)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not env.pid_file.exists()


def test_unknown_arguments_are_refused(make_env) -> None:
    env = make_env()
    for script in (START, STOP, STATUS):
        proc = env.run(script, "--lokal")
        assert proc.returncode == 2
        assert "unknown argument '--lokal'" in proc.stderr


FAKE_DOCKER = """#!/bin/sh
# Stand-in docker CLI: FAKE_DOCKER_MODE = no-engine | stopped | running
# (running: `docker exec ... CONTAINER bash SCRIPT --local` runs the script on this host)
log=${FAKE_DOCKER_LOG:-/dev/null}
echo "docker $*" >>"$log"
case "$FAKE_DOCKER_MODE:$1" in
    no-engine:*) echo "Cannot connect to the Docker daemon" >&2; exit 1 ;;
    *:info) exit 0 ;;
    stopped:inspect) echo false; exit 0 ;;
    running:inspect) echo true; exit 0 ;;
    running:exec)
        shift
        while [ "$1" != bash ]; do
            case "$1" in -e) echo "passes $2" >>"$log"; shift ;; esac
            shift
        done
        exec "$@" ;;
esac
echo "fake docker: unexpected: $*" >&2
exit 99
"""


def fake_docker_path(env: Env, mode: str) -> str:
    """PATH with a stand-in docker first: the tests hold with or without a real engine."""
    bindir = env.tmp / f"docker-{mode}"
    bindir.mkdir()
    (bindir / "docker").write_text(FAKE_DOCKER)
    (bindir / "docker").chmod(0o755)
    env.vars["FAKE_DOCKER_MODE"] = mode
    env.vars["FAKE_DOCKER_LOG"] = str(env.tmp / "docker.log")
    return f"{bindir}:{env.vars['PATH']}"


def test_explicit_container_needs_a_docker_engine(make_env) -> None:
    env = make_env()
    # The named container cannot be reached without an engine: no fallback to this host.
    path = fake_docker_path(env, "no-engine")
    proc = env.run(STATUS, ARGUS_API_CONTAINER="argus-ray-head", PATH=path)
    assert proc.returncode == 2
    assert "no docker engine answers" in proc.stderr


def test_explicit_container_must_be_running(make_env) -> None:
    env = make_env()
    path = fake_docker_path(env, "stopped")
    proc = env.run(START, ARGUS_API_CONTAINER="my-head", PATH=path)
    assert proc.returncode == 2
    assert "container 'my-head' is not running" in proc.stderr
    assert not env.run_dir.exists(), "nothing may start on this host instead"


def test_the_docker_branch_reruns_the_script_inside_the_container(make_env) -> None:
    env = make_env("serve")
    path = fake_docker_path(env, "running")
    # The stand-in docker runs `bash <repo>/scripts/<script> --local` here; the repo the
    # container would mount is this one.
    over = {"PATH": path, "ARGUS_API_REPO_IN_CONTAINER": str(REPO)}
    start = env.run(START, **over)
    assert start.returncode == 0, start.stderr
    assert f"supervised by supervisord (pid {env.pid()};" in start.stdout
    log = (env.tmp / "docker.log").read_text()
    assert "docker exec -i -e ARGUS_CONFIG -e ARGUS_API_HOST -e ARGUS_API_PORT" in log
    assert f"argus-ray-head bash {REPO}/scripts/20_start_api.sh --local" in log
    assert TOKEN not in log, "the token goes by name only, never on a command line"
    assert "passes ARGUS_API_TOKEN" in log
    assert env.run(STATUS, **over).returncode == 0
    assert env.run(STOP, **over).returncode == 0
    assert env.run(STATUS, "--local").returncode == 3


def test_start_refuses_a_port_someone_else_answers_on(make_env) -> None:
    env = make_env()

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", env.port), Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        proc = env.run(START, "--local")
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 2
    assert "something else already answers" in proc.stderr
    assert not env.pid_file.exists()


# -- lifecycle with the stand-in ------------------------------------------------------------


def test_start_status_stop(make_env) -> None:
    env = make_env("serve")
    proc = env.run(START, "--local")
    assert proc.returncode == 0, proc.stderr
    sup, pid = env.pid(), env.service_pid()
    assert pid is not None and pid != sup
    assert f"running (pid {pid}) at http://127.0.0.1:{env.port}" in proc.stdout
    assert f"supervised by supervisord (pid {sup};" in proc.stdout
    assert '"fake": true' in proc.stdout
    assert alive(pid) and alive(sup)
    log = (env.run_dir / "argus-api.log").read_text()
    assert f"--config {env.vars['ARGUS_CONFIG']} --host 127.0.0.1 --port {env.port}" in log
    assert TOKEN not in (env.run_dir / "argus-api-supervisord.conf").read_text(), \
        "the token reaches the service through the environment only"

    again = env.run(START, "--local")
    assert again.returncode == 0
    assert f"already running (pid {pid})" in again.stdout
    assert f"supervised by supervisord (pid {sup})" in again.stdout

    status = env.run(STATUS, "--local")
    assert status.returncode == 0
    assert f"running (pid {pid})" in status.stdout
    assert f"supervised by supervisord (pid {sup})" in status.stdout
    assert '"status": "ok"' in status.stdout

    stop = env.run(STOP, "--local", ARGUS_API_STOP_TIMEOUT_S="5")
    assert stop.returncode == 0, stop.stderr
    assert f"stopped (pid {pid}) and its supervisord (pid {sup})" in stop.stdout
    assert wait_gone(pid) and wait_gone(sup)
    assert not env.pid_file.exists()

    status = env.run(STATUS, "--local")
    assert status.returncode == 3
    assert "not running" in status.stdout
    assert env.run(STOP, "--local").stdout.strip() == "argus-api: not running"


def test_start_reports_a_service_that_exits(make_env) -> None:
    env = make_env("exit")
    proc = env.run(START, "--local")
    assert proc.returncode == 1
    assert "exited during start-up" in proc.stderr
    assert "fake argus-api: refusing to start" in proc.stderr, "the log tail is shown"
    assert not env.pid_file.exists()


def test_start_gives_up_on_a_service_that_never_answers(make_env) -> None:
    env = make_env("mute")
    proc = env.run(START, "--local", ARGUS_API_START_TIMEOUT_S="1")
    assert proc.returncode == 1
    assert "no answer on" in proc.stderr
    assert not env.pid_file.exists()
    log = (env.run_dir / "argus-api.log").read_text().splitlines()
    assert len([line for line in log if line.startswith("== ")]) == 1
    (pid,) = [int(line.split()[3]) for line in log if line.startswith("fake argus-api pid")]
    assert not alive(pid), "the service that never answered must be stopped"


def test_stop_kills_a_service_that_ignores_term(make_env) -> None:
    env = make_env("stubborn")
    assert env.run(START, "--local", ARGUS_API_STOP_TIMEOUT_S="1").returncode == 0
    pid = env.service_pid()
    assert pid is not None
    stop = env.run(STOP, "--local", ARGUS_API_STOP_TIMEOUT_S="1")
    assert stop.returncode == 0, stop.stderr
    assert wait_gone(pid)
    sup_log = (env.run_dir / "argus-api-supervisord.log").read_text()
    assert f"killing 'argus_api' ({pid}) with SIGKILL" in sup_log


def poll(predicate, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.1)
    pytest.fail(f"not within {timeout_s:g}s: {what}")


def test_a_killed_service_is_restarted_by_its_supervisord(make_env) -> None:
    env = make_env("serve")
    assert env.run(START, "--local").returncode == 0
    pid = env.service_pid()
    assert pid is not None
    os.kill(pid, 9)
    poll(lambda: env.service_pid() not in (None, pid) and env.run(STATUS, "--local")
         .returncode == 0, 15, "the service back under a new pid")
    assert f"running (pid {env.service_pid()})" in env.run(STATUS, "--local").stdout


def test_a_crash_at_start_up_is_retried_with_a_growing_pause(make_env) -> None:
    env = make_env("serve")
    crash = env.tmp / "crash"
    env.vars["FAKE_API_CRASH"] = str(crash)
    assert env.run(START, "--local").returncode == 0
    pid = env.service_pid()
    assert pid is not None
    crash.touch()  # from now on every start fails at once
    os.kill(pid, 9)
    sup_log = env.run_dir / "argus-api-supervisord.log"
    poll(lambda: sup_log.read_text().count("spawned: 'argus_api'") >= 5, 30,
         "four restarts that fail")
    status = env.run(STATUS, "--local")
    assert status.returncode == 1 and "BACKOFF under supervisord" in status.stdout
    spawned = [line.split(" INFO")[0] for line in sup_log.read_text().splitlines()
               if "spawned: 'argus_api'" in line]
    times = [time.mktime(time.strptime(t.split(",")[0], "%Y-%m-%d %H:%M:%S"))
             + int(t.split(",")[1]) / 1000 for t in spawned[1:5]]
    pauses = [b - a for a, b in itertools.pairwise(times)]
    # supervisord's backoff (1, 2, 3 ... s) is kept on its own 1 s tick, and a loaded host
    # stretches each start (neighbours came out equal or swapped, 4.13 then 4.07 s): a
    # load only lengthens pauses, so the growth is judged by its floor, never its shape
    # (a fixed 1 s retry gives ~3 s in all)
    assert min(pauses) >= 1.0 and sum(pauses) >= 5.0, pauses
    crash.unlink()
    poll(lambda: env.run(STATUS, "--local").returncode == 0, 30, "the service back")


def test_a_reused_pid_is_not_mistaken_for_the_service(make_env) -> None:
    env = make_env()
    env.run_dir.mkdir()
    # This test's own pid is alive, but its start time is not the one recorded.
    env.pid_file.write_text(f"{os.getpid()} 1\n")
    status = env.run(STATUS, "--local")
    assert status.returncode == 3
    stop = env.run(STOP, "--local")
    assert stop.returncode == 0
    assert "not running" in stop.stdout
    assert alive(os.getpid())
    assert not env.pid_file.exists(), "the stale pid file is cleared"


@pytest.mark.parametrize("mode", ["no-engine", "stopped"])
def test_without_a_head_container_the_scripts_fall_back_to_this_host(make_env, mode) -> None:
    env = make_env("serve")
    # No --local, and no engine or no running argus-ray-head: host mode.
    path = fake_docker_path(env, mode)
    proc = env.run(START, PATH=path)
    assert proc.returncode == 0, proc.stderr
    assert f"supervised by supervisord (pid {env.pid()};" in proc.stdout
    assert env.run(STOP, PATH=path).returncode == 0
    assert "docker exec" not in (env.tmp / "docker.log").read_text()


# -- the real service ---------------------------------------------------------------------


@pytest.mark.integration
def test_real_api_starts_without_ray_and_stops(make_env) -> None:
    env = make_env(fake_mode=None)
    proc = env.run(START, "--local")
    log = env.run_dir / "argus-api.log"
    assert proc.returncode == 0, proc.stderr + (log.read_text() if log.exists() else "")
    assert '"status": "ok"' in proc.stdout
    pid = env.service_pid()

    status = env.run(STATUS, "--local")
    assert status.returncode == 0, status.stdout
    assert f"running (pid {pid})" in status.stdout

    stop = env.run(STOP, "--local", ARGUS_API_STOP_TIMEOUT_S="5")
    assert stop.returncode == 0, stop.stderr
    assert f"stopped (pid {pid})" in stop.stdout
    assert wait_gone(pid)
    log = (env.run_dir / "argus-api.log").read_text()
    assert "Traceback" not in log and " ERROR " not in log, log
    assert env.run(STATUS, "--local").returncode == 3


# -- scripts/container_env.sh: what it says on a host that cannot run Docker --------------

CONTAINER_ENV = SCRIPTS / "container_env.sh"


def test_container_env_parses_and_passes_shellcheck() -> None:
    subprocess.run(["bash", "-n", str(CONTAINER_ENV)], check=True, timeout=30)
    assert os.access(CONTAINER_ENV, os.X_OK)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (scripts/bootstrap.sh installs it)")
    proc = subprocess.run(["shellcheck", "-x", str(CONTAINER_ENV)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout


def run_container_env(tmp_path: Path, *args: str, uid: str = "1000", system: str = "Linux",
                      engine: bool = False, extra_env: dict[str, str] | None = None
                      ) -> subprocess.CompletedProcess[str]:
    """container_env.sh with stand-ins for docker (engine answers or not), id and uname."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    stubs = {"docker": f"#!/bin/sh\nexit {0 if engine else 1}\n",
             "id": f"#!/bin/sh\necho {uid}\n", "uname": f"#!/bin/sh\necho {system}\n"}
    for name, text in stubs.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path),
           "ARGUS_DOCKER": str(bindir / "docker"), **(extra_env or {})}
    return subprocess.run([str(CONTAINER_ENV), *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)


@pytest.mark.parametrize(
    ("uid", "system", "reason"),
    [("1000", "Linux", "no Docker engine answers and this user is not root"),
     ("0", "Darwin", "needs a Linux host (got Darwin)")],
)
def test_container_env_says_when_a_host_cannot_run_docker(tmp_path: Path, uid: str,
                                                          system: str, reason: str) -> None:
    for command in ("check", "setup"):
        proc = run_container_env(tmp_path, command, uid=uid, system=system)
        assert proc.returncode == 3, proc.stderr
        assert "container_env: cannot run Docker here: " in proc.stderr
        assert reason in proc.stderr


def test_container_env_check_passes_where_an_engine_answers(tmp_path: Path) -> None:
    proc = run_container_env(tmp_path, "check", engine=True)
    assert proc.returncode == 0, proc.stderr
    assert "this host can run Docker" in proc.stderr


def test_container_env_refuses_unknown_commands_and_profiles(tmp_path: Path) -> None:
    proc = run_container_env(tmp_path, "launch")
    assert proc.returncode == 1 and "unknown command 'launch'" in proc.stderr
    proc = run_container_env(tmp_path, "up", "tpu", engine=True)
    assert proc.returncode == 1 and \
        "profile must be cpu, gpu, cpu-ha or gpu-ha, got 'tpu'" in proc.stderr


@pytest.mark.parametrize("profile", ["cpu-ha", "gpu-ha"])
def test_container_env_up_ha_needs_the_token_and_the_database_password(tmp_path: Path,
                                                                      profile: str) -> None:
    """Both secrets come from the environment (never a file); missing, nothing starts."""
    proc = run_container_env(tmp_path, "up", profile, engine=True)
    assert proc.returncode == 1
    assert f"{profile}: set ARGUS_API_TOKEN" in proc.stderr
    proc = run_container_env(tmp_path, "up", profile, engine=True,
                             extra_env={"ARGUS_API_TOKEN": "t"})
    assert proc.returncode == 1
    assert f"{profile}: set ARGUS_POSTGRES_PASSWORD" in proc.stderr
