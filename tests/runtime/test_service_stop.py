"""Runtime tier: the real ``argus-api`` process stops cleanly on SIGTERM (what a
supervisor's stop, ``scripts/21_stop_api.sh`` and an upgrade send): exit 0 within its
grace, no ERROR line and no traceback, every loop stopped (no "exiting without waiting"
for a thread) and the store closed (SQLite removes the WAL when its last connection
closes cleanly).

Ray is not needed: the service starts without it (the cluster is unavailable, which is
not an error) and the background tasks whose cleanup used to fail (the console's change
feed, the webhook delivery worker) run all the same.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from .waiting import poll

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 10.0  # scripts/21_stop_api.sh's default before it sends KILL


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_service_cleanly(tmp_path, signum):
    port = free_port()
    shared = tmp_path / "shared"
    config = tmp_path / "argus.yaml"
    config.write_text(yaml.safe_dump({
        "ray": {"address": f"http://127.0.0.1:{free_port()}", "shared_root": str(shared),
                "timeout_s": 2},
        "v2": {"api": {"host": "127.0.0.1", "port": port},
               "auth": {"token_env": "ARGUS_API_TOKEN"},
               "scheduler": {"tick_s": 0.2}, "progress": {"poll_s": 0.2}},
    }))
    log_path = tmp_path / "argus-api.log"
    env = {**os.environ, "ARGUS_API_TOKEN": "t0ken-for-the-stop-test"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "service.main", "--config", str(config)],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        poll(lambda: proc.poll() is not None or answers(f"http://127.0.0.1:{port}/healthz"),
             60, "argus-api to answer", lambda: log_path.read_text(errors="replace"))
        assert proc.poll() is None, log_path.read_text(errors="replace")
        db = shared / "common" / "db" / "mvp_v2.sqlite3"
        assert Path(f"{db}-wal").exists(), "the running service holds the WAL open"
        sent = time.monotonic()
        proc.send_signal(signum)
        took = poll(lambda: proc.poll() is not None, GRACE_S, "argus-api to exit",
                    lambda: log_path.read_text(errors="replace"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    out = log_path.read_text(errors="replace")
    assert proc.returncode == 0, out
    assert time.monotonic() - sent <= GRACE_S and took <= GRACE_S
    assert "Traceback" not in out and " ERROR " not in out, out
    assert "exiting without waiting" not in out, "every loop stopped: " + out
    assert f"{signal.Signals(signum).name}: stopping" in out
    assert not Path(f"{db}-wal").exists(), "the store was closed: " + out
