"""Runtime tier: the task service as the head's supervisord program (``ARGUS_API_CONFIG``,
raypool/apiservice.py), the compose head's way, run here with a real ``argus-node run``
(supervisord + the head's programs) on this host, no Docker:

- the token never reaches supervisord's environment (nor Ray's), only a 0600 file;
- ``scripts/22_status_api.sh --local`` says the head's supervisord holds it;
- a ``kill -9`` of the service is restarted by the node within 10 s;
- ``21_stop_api.sh`` stops the program, ``20_start_api.sh`` starts it again;
- the node stopped (what ``docker stop`` sends PID 1) stops the service quietly, and the
  node started again (a ``docker restart``) brings it back with no script.

Ray's head may or may not come up here (the node's watchdog keeps trying): the service
answers either way, which is all this test asks of it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .waiting import poll

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
TOKEN = "head-program-t0ken"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Head:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.run_dir = tmp / "run"
        self.port = free_port()
        shared = tmp / "shared"
        config = tmp / "argus.yaml"
        config.write_text(yaml.safe_dump({
            "ray": {"head_json": str(shared / "ray" / "discovery" / "argus-t" / "head.json"),
                    "shared_root": str(shared)},
            "v2": {"api": {"host": "127.0.0.1", "port": self.port},
                   "auth": {"token_env": "ARGUS_API_TOKEN"}, "scheduler": {"tick_s": 1}},
        }))
        self.log = shared / "common" / "logs" / "hd" / "argus-api.log"
        bindir = os.path.dirname(sys.executable)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")},
            "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "ARGUS_ROLE": "head", "ARGUS_NODE_IP": "127.0.0.1", "ARGUS_NODE_NAME": "hd",
            "ARGUS_CLUSTER_NAME": "argus-t", "ARGUS_SHARED_ROOT": str(shared),
            "ARGUS_RUN_DIR": str(self.run_dir), "ARGUS_RAY_TEMP_DIR": str(tmp / "ray"),
            "ARGUS_RAY_PORT": str(free_port()), "ARGUS_DASHBOARD_PORT": str(free_port()),
            "ARGUS_GCS_STORE": "memory", "ARGUS_HEALTH_INTERVAL_S": "0",
            "ARGUS_API_CONFIG": str(config), "ARGUS_API_REPO": str(ROOT),
            "ARGUS_API_TOKEN": TOKEN,
        }
        self.node: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.tmp / "node.out", "ab") as out:
            self.node = subprocess.Popen(
                [sys.executable, "-m", "raypool.cli", "run"], env=self.env, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        if self.node is not None and self.node.poll() is None:
            self.node.send_signal(signal.SIGTERM)
            try:
                self.node.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.node.pid, signal.SIGKILL)
                self.node.wait(10)

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def service_pid(self) -> int | None:
        out = subprocess.run([str(Path(sys.executable).parent / "supervisorctl"), "-c",
                              str(self.run_dir / "supervisord.conf"), "pid", "argus_api"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return int(out) if out.isdigit() and out != "0" else None

    def script(self, name: str) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "ARGUS_API_HOST": "127.0.0.1", "ARGUS_API_PORT": str(self.port)}
        return subprocess.run([str(SCRIPTS / name), "--local"], env=env, capture_output=True,
                              text=True, timeout=120, cwd=ROOT)

    def explain(self) -> str:
        out = (self.tmp / "node.out").read_text(errors="replace")[-3000:]
        return out + "\n" + (self.log.read_text(errors="replace")[-3000:]
                             if self.log.exists() else "(no service log)")


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    h = Head(tmp_path)
    try:
        yield h
    finally:
        h.stop()


def test_the_head_supervises_the_task_service(head):
    head.start()
    poll(lambda: head.service_pid() is not None and head.answers(), 90,
         "the head's program answers", head.explain)
    assert head.node is not None
    with open(f"/proc/{head.node.pid}/environ", "rb") as f:
        assert TOKEN.encode() not in f.read(), "supervisord (and Ray under it) never hold it"
    token_file = head.run_dir / "argus-api.token"
    assert token_file.read_text() == TOKEN and token_file.stat().st_mode & 0o777 == 0o600

    status = head.script("22_status_api.sh")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "supervised by the head's supervisord (program argus_api)" in status.stdout

    pid = head.service_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    took = poll(lambda: head.service_pid() not in (None, pid) and head.answers(), 60,
                "the service back under a new pid", head.explain)
    assert took <= 10, f"kill -9 -> answering took {took:.1f} s"

    stop = head.script("21_stop_api.sh")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert head.script("22_status_api.sh").returncode == 3
    assert not head.answers()
    start = head.script("20_start_api.sh")
    assert start.returncode == 0, start.stdout + start.stderr
    assert "supervised by the head's supervisord" in start.stdout

    head.stop()  # docker stop: TERM to PID 1
    assert head.node is not None and head.node.returncode is not None
    assert head.service_pid() is None and not head.answers()
    head.start()  # docker restart: the same environment, PID 1 again
    poll(lambda: head.answers(), 90, "the service back with the node", head.explain)
    log = head.log.read_text(errors="replace")
    assert log.count("SIGTERM: stopping") >= 2, log[-3000:]
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
