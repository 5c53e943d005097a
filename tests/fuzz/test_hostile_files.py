"""The hostile-files tier: a job stand-in plants what a job can write in its owner's tree
at every path the service reads or writes there, before, during and after the attempt,
with two users; no other user's bytes, no file outside the root and no secret may appear
in any API answer, console page, event, webhook payload or log line, nothing may be
written outside the root, and the service answers no 5xx.

Bob is the hostile user; alice's finished task holds ``ALICE_MARK`` in her log, her
checkpoint and her exit marker; a file outside the root holds ``OUTSIDE_MARK``; the
service's own process environment is ``/proc/self/environ`` (``HOME=/``, ``PATH=/``).
Bob runs a pipeline whose second stage resolves ``{{stages.a.latest_checkpoint}}``, his
first stage's supervisor is lost (the exit marker decides), and every read route, the
progress follower and the console run against what he planted. The real app, store,
scheduler and follower on the fake cluster (injected clock, no sleeps), one world per
case.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from service.cluster.fake import FakeCluster
from service.config import SchedulerSettings, Settings, UserSettings
from service.domain.states import RayStatus
from service.domain.users import Role
from service.engine.artifacts import Artifacts
from service.engine.progress_follower import LogFollower
from service.engine.scheduler import Scheduler
from service.store.writer import Store
from service.web.app import create_app
from service.web.metrics import ServiceMetrics

T0 = 1_766_000_000.0
BOOTSTRAP = "bootstrap-admin-token-SECRET-4d1f"
ALICE_MARK = "ALICE-PRIVATE-7c1e"
OUTSIDE_MARK = "OUTSIDE-SECRET-93ab"
BOB_MARK = "bob-own-line"
HUGE = 80 << 20  # over the archive's read cap (64 MiB), sparse
PUBLIC_HOOK = "https://93.184.215.14/hook"  # a public IP literal: no DNS, never called
PLANTED_MARK = "bob-planted-bytes"  # what bob's job wrote in a file: his to read, no one else's
# the first entry of this process's environment: what a link to /proc/self/environ shows
ENVIRON_HEAD = next((e for e in Path("/proc/self/environ").read_bytes().decode(
    "utf-8", "replace").split("\0") if len(e) >= 8), "HOME=/")
FORBIDDEN = (ALICE_MARK, OUTSIDE_MARK, BOOTSTRAP, "HOME=/", "PATH=/", ENVIRON_HEAD)
SUPERVISOR_LOST = "Job supervisor actor died: The actor died unexpectedly"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    tmp: Path
    shared: Path
    outside: Path
    store: Store
    cluster: FakeCluster
    scheduler: Scheduler
    follower: LogFollower
    settings: Settings
    clock: Clock = field(default_factory=Clock)
    tokens: dict[str, str] = field(default_factory=dict)

    def tick(self) -> None:
        self.clock.now += 1.0
        self.cluster.clock = self.clock.now
        self.scheduler.tick(self.clock.now)
        self.follower.poll(self.clock.now)

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


def make_world(tmp: Path) -> World:
    shared, outside = tmp / "shared", tmp / "outside"
    outside.mkdir()
    (outside / "secret").write_text(f"{OUTSIDE_MARK}\n")
    (outside / "0").write_text("0\n")
    # one attempt: bob's first stage ends at its lost supervisor, so his second stage is
    # released and resolves the first's checkpoint reference in the same run
    settings = Settings(shared_root=str(shared), users=UserSettings(
        bootstrap_admin="root", default_user="root"),
        scheduler=SchedulerSettings(max_attempts=1))
    store = Store(str(tmp / "db.sqlite3"))
    cluster = FakeCluster(clock=T0)
    cluster.add_node("n1", gpus=8, cpus=32)
    artifacts = Artifacts(settings.shared_root)
    world = World(tmp, shared, outside, store, cluster,
                  Scheduler(store, cluster, settings, artifacts),
                  LogFollower(store, cluster, artifacts, max_points=500,
                              max_read_chars=1 << 20), settings)
    world.tokens["root"] = BOOTSTRAP
    for name in ("alice", "bob"):
        store.users.create_user(name, Role.USER, T0)
        world.tokens[name] = store.users.create_token(name, "t", None, T0, max_live=10).secret
    return world


def spec(world: World) -> dict:
    return {"workload": "sft", "code_path": f"{world.shared}/code", "model_id": "org/model",
            "train_file": f"{world.shared}/train.parquet", "val_file": None, "nnodes": 1,
            "n_gpus_per_node": 1}


# -- what bob's job plants -------------------------------------------------------------
# Targets in bob's tree: (name, path template, kind, when it exists). ``{a}`` is his
# first stage's task id, ``{sid}`` its first attempt's submission id.
FILE_TARGETS = {
    "driver.log": "jobs/{sid}/driver.log",
    "submit.json": "jobs/{sid}/submit.json",
    "jobspec.yaml": "jobs/{sid}/jobspec.yaml",
    "exit_code": "jobs/{sid}/exit_code",
    "tracker": "checkpoints/{a}/latest_checkpointed_iteration.txt",
    "lock": "locks/{a}.lock",
    "stop-request": "locks/{a}.lock.stop",
}
DIR_TARGETS = {
    "tree": "",
    "jobs": "jobs",
    "attempt": "jobs/{sid}",
    "checkpoints": "checkpoints",
    "checkpoint": "checkpoints/{a}",
    "step": "checkpoints/{a}/global_step_1",
    "locks": "locks",
}
NEEDS_IDS = ("{a}", "{sid}")


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    """Whatever is at ``path`` (file, link or directory tree) is swapped for ``make``."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        path.rename(path.with_name(path.name + ".moved-by-job"))
    path.parent.mkdir(parents=True, exist_ok=True)
    make(path)


def alice_twin(world: World, bob_path: Path, ids: dict[str, str]) -> Path:
    """Alice's file or directory at the same place in her tree."""
    rel = bob_path.relative_to(world.shared / "users" / "bob").as_posix()
    for key, value in ids.items():
        rel = rel.replace(value, world.alice_ids[key])  # type: ignore[attr-defined]
    return world.shared / "users" / "alice" / rel


FILE_PLANTS: dict[str, Callable[[World, Path, dict[str, str]], None]] = {
    "link-to-alice": lambda w, p, ids: _replace(
        p, lambda q: q.symlink_to(alice_twin(w, p, ids))),
    "link-to-environ": lambda w, p, ids: _replace(
        p, lambda q: q.symlink_to("/proc/self/environ")),
    "link-outside": lambda w, p, ids: _replace(
        p, lambda q: q.symlink_to(w.outside / ("0" if p.name == "exit_code" else "secret"))),
    "fifo": lambda w, p, ids: _replace(p, lambda q: os.mkfifo(q)),
    "huge": lambda w, p, ids: _replace(p, lambda q: os.truncate(_touch(q), HUGE)),
    "not-utf8": lambda w, p, ids: _replace(
        p, lambda q: q.write_bytes(b"\xff\xfe1\x00\x9b[2J" + PLANTED_MARK.encode())),
    "a-directory": lambda w, p, ids: _replace(p, lambda q: q.mkdir()),
    "hard-link-to-alice": lambda w, p, ids: _replace(
        p, lambda q: _hard_link(alice_twin(w, p, ids), q)),
}
DIR_PLANTS: dict[str, Callable[[World, Path, dict[str, str]], None]] = {
    "link-to-alice": lambda w, p, ids: _replace(
        p, lambda q: q.symlink_to(alice_twin(w, p, ids))),
    "link-outside": lambda w, p, ids: _replace(p, lambda q: q.symlink_to(w.outside)),
    "a-file": lambda w, p, ids: _replace(p, lambda q: q.write_text(OUTSIDE_MARK)),
    "fifo": lambda w, p, ids: _replace(p, lambda q: os.mkfifo(q)),
}


def _touch(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def _hard_link(target: Path, link: Path) -> None:
    with contextlib.suppress(OSError):  # a missing twin, or protected hard links
        os.link(target, link)


CASES = [(name, plant, when) for name in FILE_TARGETS for plant in FILE_PLANTS
         for when in ("during", "after")]
CASES += [(name, plant, when) for name, path in DIR_TARGETS.items() for plant in DIR_PLANTS
          for when in (("during", "after") if any(k in path for k in NEEDS_IDS)
                       else ("before", "during", "after"))
          if not (name == "tree" and plant == "link-to-alice")]  # users/bob -> users/alice
CASES += [("tree", "link-to-alice", "before")]


def outside_root_state(world: World) -> dict[str, bytes | None]:
    """Every path under the test's directory but the shared root and the database."""
    state: dict[str, bytes | None] = {}
    for path in sorted(world.tmp.rglob("*")):
        rel = path.relative_to(world.tmp).as_posix()
        if rel.startswith("shared") or rel.startswith("db.sqlite3"):
            continue
        state[rel] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return state


async def run_alice(client, world: World) -> None:
    """Alice's finished task: her log, checkpoint, exit marker and lock, all private."""
    resp = await client.post("/api/v2/tasks", json=spec(world), headers=world.auth("alice"))
    assert resp.status == 201, await resp.text()
    task = (await resp.json())["task_id"]
    sid = f"{task}--a01"
    world.tick()
    world.cluster.write_log(sid, f"step:1 - loss:0.5 {ALICE_MARK}\n")
    ckpt = world.shared / "users" / "alice" / "checkpoints" / task
    (ckpt / "global_step_1").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("1")
    attempt = world.shared / "users" / "alice" / "jobs" / sid
    attempt.mkdir(parents=True, exist_ok=True)
    (attempt / "exit_code").write_text("0\n")
    (world.shared / "users" / "alice" / "locks").mkdir(parents=True, exist_ok=True)
    (world.shared / "users" / "alice" / "locks" / f"{task}.lock").write_text(
        f"{sid} on {ALICE_MARK} pid 1 since 2026-01-01T00:00:00Z\n")
    (world.shared / "users" / "alice" / "locks" / f"{task}.lock.stop").write_text(ALICE_MARK)
    world.tick()
    world.cluster.finish(sid, log=f"{ALICE_MARK} done\n")
    world.tick()
    world.alice_ids = {"{a}": task, "{sid}": sid}  # type: ignore[attr-defined]
    world.alice_task = task  # type: ignore[attr-defined]


async def register_hooks(client, world: World) -> None:
    for who in ("alice", "bob"):
        resp = await client.post("/api/v2/webhooks", headers=world.auth(who), json={
            "url": PUBLIC_HOOK, "events": ["task.succeeded", "task.failed", "task.canceled",
                                           "task.retried", "pipeline.ended"]})
        assert resp.status == 201, await resp.text()


async def start_bob(client, world: World) -> dict[str, str]:
    body = {"name": "hostile", "stages": {
        "a": {"jobspec": spec(world)},
        "b": {"after": {"any": ["a"]},
              "jobspec": {**spec(world), "model_id": "{{stages.a.latest_checkpoint}}"}}}}
    resp = await client.post("/api/v2/pipelines", json=body, headers=world.auth("bob"))
    assert resp.status == 201, await resp.text()
    created = await resp.json()
    a = created["stages"]["a"]
    world.bob_pipeline = created["pipeline_id"]  # type: ignore[attr-defined]
    world.bob_tasks = list(created["stages"].values())  # type: ignore[attr-defined]
    world.tick()
    return {"{a}": a, "{sid}": f"{a}--a01"}


def bob_writes_as_a_job_would(world: World, ids: dict[str, str]) -> None:
    """What a well-behaved job leaves: a checkpoint, a log line, a lock record (not
    through a link it planted itself: what the job writes outside is its own doing)."""
    bob = world.shared / "users" / "bob"
    if not os.path.realpath(bob).startswith(os.path.realpath(world.shared / "users")):
        return
    ckpt = bob / "checkpoints" / ids["{a}"]
    with contextlib.suppress(OSError):
        if os.path.realpath(ckpt).startswith(os.path.realpath(bob)):
            (ckpt / "global_step_1").mkdir(parents=True, exist_ok=True)
            (ckpt / "latest_checkpointed_iteration.txt").write_text("1")
    with contextlib.suppress(OSError):
        if os.path.realpath(bob / "locks").startswith(os.path.realpath(bob)):
            (bob / "locks").mkdir(parents=True, exist_ok=True)
            (bob / "locks" / f"{ids['{a}']}.lock").write_text(
                f"{ids['{sid}']} on node-1 pid 7 since 2026-01-01T00:00:00Z\n")
    world.cluster.write_log(ids["{sid}"], f"step:1 - loss:0.25\n{BOB_MARK}\n")


async def everything_seen(client, world: World) -> list[tuple[str, str, int, str]]:
    """(who, what, status, text) of every read route, for both users and the admin."""
    seen = []
    tasks = [*world.bob_tasks, world.alice_task]  # type: ignore[attr-defined]
    paths = ["/api/v2/tasks?user=all", "/api/v2/queue", "/api/v2/pipelines",
             f"/api/v2/pipelines/{world.bob_pipeline}", "/api/v2/webhooks",  # type: ignore
             "/api/v2/usage", "/metrics"]
    for task in tasks:
        paths += [f"/api/v2/tasks/{task}{s}" for s in (
            "", "/events", "/attempts", "/logs", "/logs?offset=0", "/logs?tail=3",
            "/logs?attempt=1", "/metrics")]
    for who in ("alice", "bob", "root"):
        for path in paths:
            resp = await client.get(path, headers=world.auth(who))
            seen.append((who, path, resp.status, await resp.text(errors="replace")))
        hooks = (await (await client.get("/api/v2/webhooks", headers=world.auth(who))).json())
        for hook in hooks.get("webhooks", []):
            path = f"/api/v2/webhooks/{hook['id']}/deliveries"
            resp = await client.get(path, headers=world.auth(who))
            seen.append((who, path, resp.status, await resp.text(errors="replace")))
        client.session.cookie_jar.clear()
        resp = await client.post("/ui/signin", data={"token": world.tokens[who],
                                                     "next": "/ui/queue"},
                                 allow_redirects=False)
        assert resp.status == 303, await resp.text()
        for path in ["/ui/queue", "/ui/pipelines", *[f"/ui/tasks/{t}" for t in tasks]]:
            resp = await client.get(path, allow_redirects=False)
            seen.append((who, path, resp.status, await resp.text(errors="replace")))
    return seen


def foreign(who: str, path: str, text: str, alice_task: str) -> list[str]:
    """The forbidden markers in ``text``; alice's own task's answers to alice (and the
    admin) may hold her own bytes."""
    own = who in ("alice", "root") and (alice_task in path or path.startswith(
        ("/api/v2/tasks?", "/api/v2/queue", "/ui/queue", "/api/v2/webhooks")))
    found = [m for m in FORBIDDEN if m in text and not (own and m == ALICE_MARK)]
    # bob's planted bytes are his log's, for him and the admin to read, nowhere else
    if PLANTED_MARK in text and not (who in ("bob", "root") and "/logs" in path):
        found.append(PLANTED_MARK)
    return found


@pytest.mark.parametrize("target,plant,when", CASES)
async def test_what_a_job_plants_never_reaches_anyone_else(
        aiohttp_client, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        target: str, plant: str, when: str) -> None:
    caplog.set_level(logging.DEBUG)
    world = make_world(tmp_path)
    try:
        client = await aiohttp_client(create_app(
            world.settings, world.store, world.cluster, Artifacts(world.settings.shared_root),
            token=BOOTSTRAP, clock=world.clock,
            metrics=ServiceMetrics(world.store.tasks.counts_by_state, users=world.store)))
        await register_hooks(client, world)
        await run_alice(client, world)
        before = outside_root_state(world)
        template = {**FILE_TARGETS, **DIR_TARGETS}[target]
        plants = FILE_PLANTS if target in FILE_TARGETS else DIR_PLANTS
        bob = world.shared / "users" / "bob"

        def plant_now(ids: dict[str, str]) -> None:
            rel = template
            for key, value in ids.items():
                rel = rel.replace(key, value)
            plants[plant](world, bob / rel if rel else bob, ids)

        if when == "before":
            plant_now({})
        ids = await start_bob(client, world)
        bob_writes_as_a_job_would(world, ids)
        if when == "during":
            plant_now(ids)
        world.tick()
        world.cluster.finish(ids["{sid}"], RayStatus.FAILED, message=SUPERVISOR_LOST)
        world.tick()
        if when == "after":
            plant_now(ids)
        world.tick()
        world.tick()
        b = await (await client.get(f"/api/v2/tasks/{world.bob_tasks[1]}",  # type: ignore
                                    headers=world.auth("bob"))).json()
        assert b["state"] not in ("BLOCKED", "QUEUED"), b  # the reference was resolved
        seen = await everything_seen(client, world)
        errors = [(who, path, status) for who, path, status, _ in seen if status >= 500]
        assert not errors, errors
        leaks = [(who, path, found) for who, path, _, text in seen
                 if (found := foreign(who, path, text, world.alice_task))]  # type: ignore
        assert not leaks, leaks
        logged = [m for m in (*FORBIDDEN, PLANTED_MARK) if m in caplog.text]
        assert not logged, [ln for ln in caplog.text.splitlines()
                            if any(m in ln for m in logged)][:5]
        with sqlite3.connect(world.tmp / "db.sqlite3") as db:
            payloads = db.execute("SELECT w.owner, d.data_json FROM webhook_deliveries d "
                                  "JOIN webhooks w USING (hook_id)").fetchall()
        assert {owner for owner, _ in payloads} == {"alice", "bob"}
        leaked = [(owner, found) for owner, data in payloads
                  if (found := [m for m in (*FORBIDDEN, PLANTED_MARK) if m in data
                                and not (owner == "alice" and m == ALICE_MARK)])]
        assert not leaked, leaked
        after = outside_root_state(world)
        assert after == before, sorted(set(after.items()) ^ set(before.items()))[:5]
        # bob's own answers still work: his tasks are listed and readable
        resp = await client.get(f"/api/v2/tasks/{ids['{a}']}", headers=world.auth("bob"))
        assert resp.status == 200
    finally:
        world.store.close()


def test_the_case_list_covers_every_target_and_plant() -> None:
    assert {t for t, _, _ in CASES} == set(FILE_TARGETS) | set(DIR_TARGETS)
    assert {p for t, p, _ in CASES if t in FILE_TARGETS} == set(FILE_PLANTS)
    assert {p for t, p, _ in CASES if t in DIR_TARGETS} == set(DIR_PLANTS)
    assert {w for _, _, w in CASES} == {"before", "during", "after"}
    assert len(CASES) == len(set(CASES))


def test_the_service_process_shows_no_token_in_its_environment(argus) -> None:
    """The token is read at start, then cleared from what ``/proc/<pid>/environ`` shows
    (``service.main.scrub_secret``): a file read that ends there finds nothing."""
    environ = Path(f"/proc/{argus.pid}/environ").read_bytes()
    assert argus.token.encode() not in environ
    assert b"ARGUS_API_TOKEN=" not in environ
    assert re.search(rb"(^|\0)PATH=", environ)  # the rest of the environment is there
