"""A request's cost in instructions, the same from run to run: to tell whether a change made
the API dearer on a shared host, where ``bench_api.py``'s CPU per request moves by a
quarter with what else runs.

The measured process builds a store of ``--tasks`` (20) ended tasks of two users, each
attempt's driver log archived in its owner's tree (64 KiB), and serves the app in-process
(aiohttp's test server and client: the client's instructions are counted too, the same in
both revisions); then it asks each route ``FEW`` and ``MANY`` times, under valgrind's
callgrind, and prints the difference over ``MANY - FEW``: one request, setup left out.

* ``GET /tasks/{id}`` by its owner, and by another user (who sees the job's words cut);
* ``GET /tasks/{id}/logs`` of an ended attempt: the archive, read from the owner's tree;
* ``GET /tasks/{id}/events``;
* ``POST /tasks``: the JobSpec above as JSON (``submit``), or as YAML (``submit-yaml``), by
  its owner: parsed, validated, written and answered 201.

Each route runs once outside valgrind first, so that neither count pays for compiling the
modules (a fresh worktree has no ``__pycache__``: the first run wrote it, and the FEW run's
count came out above the MANY run's).

``--code DIR`` imports the service from another checkout (a ``git worktree`` of the revision
before), so both are counted on one host; counts repeat on one host, not across hosts.
Needs valgrind (Debian's ``valgrind``). About a minute a route and revision.

    .venv/bin/python bench/bench_request_instructions.py [--code DIR] [--tasks 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hostinfo import host_line

FEW, MANY = 10, 210
ROUTES = ("task-owner", "task-other", "logs", "events", "submit", "submit-yaml")
T0 = 1_766_000_000.0


async def _serve(code: str, tasks: int, route: str, requests: int) -> None:
    sys.path.insert(0, code)
    from aiohttp.test_utils import TestClient, TestServer

    from service.cluster.fake import FakeCluster
    from service.config import Settings, UserSettings
    from service.domain.states import RayStatus
    from service.domain.users import Role
    from service.engine.artifacts import Artifacts
    from service.engine.scheduler import Scheduler
    from service.store.writer import Store
    from service.web.app import create_app

    tmp = Path(tempfile.mkdtemp(prefix="argus-bench-req-"))
    shared = tmp / "shared"
    settings = Settings(shared_root=str(shared), users=UserSettings(
        bootstrap_admin="root", default_user="root"))
    store = Store(str(tmp / "db.sqlite3"))
    cluster = FakeCluster(clock=T0)
    cluster.add_node("n1", gpus=8, cpus=64)
    artifacts = Artifacts(str(shared))
    scheduler = Scheduler(store, cluster, settings, artifacts)
    tokens = {}
    for name in ("alice", "bob"):
        store.users.create_user(name, Role.USER, T0)
        tokens[name] = store.users.create_token(name, "t", None, T0, max_live=10).secret
    clock = [T0]
    app = create_app(settings, store, cluster, artifacts, token="root-token-bench",
                     clock=lambda: clock[0])
    client = TestClient(TestServer(app))
    await client.start_server()
    spec = {"workload": "sft", "code_path": f"{shared}/code", "model_id": "org/m",
            "train_file": f"{shared}/t.parquet", "val_file": None, "nnodes": 1,
            "n_gpus_per_node": 1}
    log = "step:1 - loss:0.5 " + "x" * 46 + "\n"
    ids = []
    for i in range(tasks):
        who = ("alice", "bob")[i % 2]
        resp = await client.post("/api/v2/tasks", json=spec,
                                 headers={"Authorization": f"Bearer {tokens[who]}"})
        ids.append((await resp.json())["task_id"])
        for step in range(2):  # submitted to the fake cluster, then ended and archived
            if step:
                cluster.finish(f"{ids[-1]}--a01", RayStatus.FAILED, message="boom",
                               log=log * 1024)
            clock[0] += 1
            cluster.clock = clock[0]
            scheduler.tick(clock[0])
    target = ids[0]  # alice's
    archive = Path(str(artifacts.attempt_dir(f"{target}--a01", "alice"))) / "driver.log"
    assert archive.stat().st_size > 60_000, "the attempt's log was not archived"
    if route.startswith("submit"):
        await _submit(client, spec, tokens["alice"], requests, yaml=route == "submit-yaml")
    else:
        await _get(client, route, target, tokens, requests)
    await client.close()
    store.close()
    shutil.rmtree(tmp, ignore_errors=True)


async def _submit(client: Any, spec: dict[str, Any], token: str, requests: int, *,
                  yaml: bool) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    text = "".join(f"{k}: {'null' if v is None else v}\n" for k, v in spec.items())
    for _ in range(requests):
        if yaml:
            resp = await client.post("/api/v2/tasks", data=text, headers={
                **headers, "Content-Type": "application/yaml"})
        else:
            resp = await client.post("/api/v2/tasks", json=spec, headers=headers)
        assert resp.status == 201, await resp.text()
        await resp.read()


async def _get(client: Any, route: str, target: str, tokens: dict[str, str],
               requests: int) -> None:
    path, who = {"task-owner": (f"/api/v2/tasks/{target}", "alice"),
                 "task-other": (f"/api/v2/tasks/{target}", "bob"),
                 "logs": (f"/api/v2/tasks/{target}/logs", "alice"),
                 "events": (f"/api/v2/tasks/{target}/events", "alice")}[route]
    headers = {"Authorization": f"Bearer {tokens[who]}"}
    for _ in range(requests):
        resp = await client.get(path, headers=headers)
        assert resp.status == 200, await resp.text()
        await resp.read()


def _instructions(valgrind: str | None, code: str, tasks: int, route: str,
                  requests: int) -> int:
    """The instructions of one run of the measured process (``valgrind`` None: the run
    outside valgrind that compiles the modules; 0)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [sys.executable, __file__, "--inner", route, str(requests), "--code", code,
           "--tasks", str(tasks)]
    if valgrind is None:
        subprocess.run(cmd, capture_output=True, check=True, env=env)
        return 0
    cmd = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    found = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", default=str(Path(__file__).resolve().parents[1]))
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--routes", default=",".join(ROUTES))
    p.add_argument("--inner", nargs=2, metavar=("ROUTE", "REQUESTS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    code = str(Path(args.code).resolve())
    if args.inner:
        asyncio.run(_serve(code, args.tasks, args.inner[0], int(args.inner[1])))
        return
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    print(host_line())
    print(f"code {code}; {args.tasks} tasks; instructions a request "
          f"(({MANY} requests) - ({FEW} requests)) / {MANY - FEW}")
    for route in args.routes.split(","):
        _instructions(None, code, args.tasks, route, FEW)  # compiles what the counts import
        few = _instructions(valgrind, code, args.tasks, route, FEW)
        many = _instructions(valgrind, code, args.tasks, route, MANY)
        print(f"{route:12s} {(many - few) / (MANY - FEW) / 1e6:8.3f} M instructions")


if __name__ == "__main__":
    main()
