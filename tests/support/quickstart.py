"""A quick start of a test's (or a bench's) own: ``scripts/quickstart.sh`` with its own state
directory and API port, brought up and torn down, and what every driver of it reads (the
token, the supervised service's pid, whether it answers, its log).

Used by the runtime tier's quick-start tests and by ``bench/bench_failover.py``. The quick
start's PID namespace per node needs root and ``unshare`` (``usable()`` says why not).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scripts" / "quickstart.sh"
SUPERVISORCTL = ROOT / ".venv" / "bin" / "supervisorctl"


def usable() -> str | None:
    """None when this host can run a quick start; else why not."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "the quick start's PID namespace per node needs root and `unshare` here"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class QuickStartRun:
    """One quick start: its state directory (``/tmp/<prefix><hex>``) and port; the
    caller's environment without its ``ARGUS_*`` variables (``env`` may take more before
    ``up``)."""

    def __init__(self, prefix: str = "arq-") -> None:
        self.state = Path(f"/tmp/{prefix}{secrets.token_hex(3)}")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.run_dir = self.state / "shared" / "common" / "run"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
        self.env.update(ARGUS_QUICKSTART_DIR=str(self.state), ARGUS_API_PORT=str(self.port))
        self.token = ""

    def script(self, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        """``quickstart.sh ARGS`` on this run's state directory and port."""
        return subprocess.run([str(QUICKSTART), *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout_s, cwd=ROOT)

    def up(self, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        """Bring it up with its service supervised; ``RuntimeError`` with the script's
        output otherwise."""
        done = self.script("up", timeout_s=timeout_s)
        if done.returncode != 0 or "supervised by supervisord" not in done.stdout:
            raise RuntimeError(f"quickstart.sh up failed ({done.returncode}):\n"
                               + done.stdout[-4000:] + done.stderr[-4000:])
        self.token = (self.state / "api-token").read_text().strip()
        return done

    def down(self, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        """Tear it down and remove its state directory; the script's outcome."""
        try:
            return self.script("down", timeout_s=timeout_s)
        finally:
            shutil.rmtree(self.state, ignore_errors=True)

    def supervisorctl(self, *argv: str) -> str:
        """``supervisorctl`` of the supervisord that runs this quick start's service."""
        return subprocess.run([str(SUPERVISORCTL), "-c",
                               str(self.run_dir / "argus-api-supervisord.conf"), *argv],
                              capture_output=True, text=True, timeout=60).stdout

    def service_pid(self) -> int | None:
        pid = self.supervisorctl("pid", "argus_api").strip()
        return int(pid) if pid.isdigit() and pid != "0" else None

    def answers(self) -> bool:
        """``/healthz`` answers 200."""
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def log_tail(self, chars: int = 6000) -> str:
        path = self.run_dir / "argus-api.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"
