"""Runtime tier: the quick start end to end through a head fault. ``scripts/quickstart.sh``
brings up its cluster (ports mode, a PID namespace per node) and the real ``argus-api``;
``scripts/quickstart.sh head-fault`` runs a 60-step stand-in task, SIGKILLs the head's GCS
at step 5 with ``scripts/fault_kill_head_ray.sh local head`` and exits 0 only when the task
ends SUCCEEDED on attempt 1 with every step logged once.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scripts" / "quickstart.sh"

if os.geteuid() != 0 or not shutil.which("unshare"):
    pytest.skip("the quick start's PID namespace per node needs root and `unshare` here",
                allow_module_level=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def quickstart(env: dict[str, str], *args: str, timeout_s: float
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(QUICKSTART), *args], env=env, capture_output=True, text=True,
                          timeout=timeout_s, cwd=ROOT)


@pytest.fixture
def running_quickstart() -> Iterator[dict[str, str]]:
    state = f"/tmp/arq-{secrets.token_hex(3)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    env.update(ARGUS_QUICKSTART_DIR=state, ARGUS_API_PORT=str(free_port()))
    try:
        up = quickstart(env, "up", timeout_s=420)
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        yield env
    finally:
        down = quickstart(env, "down", timeout_s=120)
        shutil.rmtree(state, ignore_errors=True)
    assert down.returncode == 0, down.stdout + down.stderr


def test_a_quickstart_run_survives_the_head_fault_script(running_quickstart):
    done = quickstart(running_quickstart, "head-fault", timeout_s=420)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "killed GCS on head" in out
    assert "SUCCEEDED on attempt 1, every step once" in out
    assert "CLUSTER_BACK" in out, "the task's events show the outage"
