"""Two users and an admin, through the ``argus`` CLI, on real local Ray (fake GPUs).

As a new user would: the admin (the service's bootstrap token) creates alice and bob,
each gets a token once; each submits a stand-in run; both see everyone's queue; alice
cannot cancel bob's task (403) nor read its logs, the admin can cancel it; each attempt's
files land in its owner's tree; ``argus usage`` shows GPU-seconds equal to the attempts'
runtimes x GPUs (and to Ray's own start and end times).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, ensure_workers, ray_job

pytestmark = pytest.mark.timeout(300)


def cli(argus: Any, token: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ARGUS_URL": argus.url, "ARGUS_API_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "argus_client.cli", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def ok_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_two_users_and_an_admin_through_the_cli(ray_cluster, argus, tmp_path: Path):
    ensure_workers(ray_cluster, 1)  # one worker, 4 fake GPUs: room for both 1x2 runs
    admin = argus.token
    tokens = {}
    for name in ("alice", "bob"):
        created = ok_json(cli(argus, admin, "--json", "user", "create", name))
        assert created["user"]["role"] == "user"
        tokens[name] = created["token"]["token"]
        assert ok_json(cli(argus, tokens[name], "--json", "me"))["name"] == name

    specs = {}
    for name, duration in (("alice", 4), ("bob", 120)):
        specs[name] = tmp_path / f"{name}.yaml"
        specs[name].write_text(argus.jobspec(gpus=2, duration_s=duration))
    a = ok_json(cli(argus, tokens["alice"], "--json", "submit", str(specs["alice"])))["task_id"]
    b = ok_json(cli(argus, tokens["bob"], "--json", "submit", str(specs["bob"])))["task_id"]
    assert a.startswith("mvp2-alice-ppo-") and b.startswith("mvp2-bob-ppo-")
    for tid in (a, b):
        argus.wait_for(tid, lambda t: t["state"] == "RUNNING", 90, "to run")

    # everyone sees everyone's queue; "mine" by default
    for name in ("alice", "bob"):
        everyone = ok_json(cli(argus, tokens[name], "--json", "queue", "--user", "all"))
        running = {t["task_id"]: t["user"] for t in everyone["running"]}
        assert running == {a: "alice", b: "bob"}
    mine = ok_json(cli(argus, tokens["alice"], "--json", "queue"))
    assert [t["task_id"] for t in mine["running"]] == [a]

    # alice can neither cancel bob's task nor read its logs; the admin can cancel it
    refused = cli(argus, tokens["alice"], "cancel", b)
    assert refused.returncode == 4 and "HTTP 403" in refused.stderr, refused.stderr  # auth
    refused = cli(argus, tokens["alice"], "logs", b)
    assert refused.returncode == 4 and "HTTP 403" in refused.stderr, refused.stderr  # auth
    assert argus.task(b)["state"] == "RUNNING"
    canceled = cli(argus, admin, "cancel", b)
    assert canceled.returncode == 0, canceled.stderr
    argus.wait_state(b, "CANCELED", timeout=60)
    assert argus.wait_state(a, "SUCCEEDED", timeout=120)["user"] == "alice"

    # each attempt's files in its owner's tree; the Hydra run dir too
    shared = Path(argus.shared_root)
    for name, tid in (("alice", a), ("bob", b)):
        files = shared / "users" / name / "jobs" / f"{tid}--a01"
        assert (files / "jobspec.yaml").read_text() == specs[name].read_text()
        argv = json.loads((files / "submit.json").read_text())["argv"]
        assert f"hydra.run.dir={files}" in argv
        assert f"trainer.default_local_dir={shared}/users/{name}/checkpoints/{tid}" in argv
    assert "done, exit code 0" in (
        shared / "users" / "alice" / "jobs" / f"{a}--a01" / "driver.log").read_text()
    assert not (shared / "jobs").exists()

    # usage: GPU-seconds = the attempts' runtimes x 2 GPUs, as Ray itself timed them
    usage = ok_json(cli(argus, tokens["bob"], "--json", "usage"))
    by_user = {u["user"]: u for u in usage["users"]}
    for name, tid in (("alice", a), ("bob", b)):
        (attempt,) = ok_json(cli(argus, tokens[name], "--json", "attempts", tid))["attempts"]
        runtime = epoch(attempt["end_time"]) - epoch(attempt["start_time"])
        assert runtime > 0
        assert by_user[name]["gpu_seconds"] == pytest.approx(runtime * 2, abs=0.01)
        job = ray_job(ray_cluster, attempt["ray_submission_id"])
        assert by_user[name]["gpu_seconds"] == pytest.approx(
            (job.end_time - job.start_time) / 1000 * 2, abs=0.01)
        assert by_user[name]["tasks"] == 1 and by_user[name]["running_attempts"] == 0
    table = cli(argus, tokens["alice"], "usage")
    assert table.returncode == 0 and "alice" in table.stdout and "bob" in table.stdout
