"""What a job can write in its owner's tree never reaches another user, nor leaves the
shared root: the reproductions of the hostile-files report, each played by a job
stand-in (``ln -s`` and ``echo`` in bob's tree) against the real app, store and
scheduler on the fake cluster (injected clock, no sleeps)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import yaml
from users_world import BOOTSTRAP, app_of, jobspec, submit_as

from service.domain.states import RayStatus

SECRET = "ARGUS_API_TOKEN=sec-admin-token\x00SHELL=/b"


@pytest.fixture
async def client(aiohttp_client, world):
    return await aiohttp_client(app_of(world))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A place outside the shared root: another user's file, the service's secrets."""
    place = tmp_path / "outside"
    place.mkdir()
    (place / "environ").write_text(SECRET)
    return place


def user_tree(world, user: str) -> Path:
    return world.shared / "users" / user


async def everything_alice_sees(client, world, task_ids: list[str]) -> str:
    """Every answer alice gets about these tasks (and the lists), as one text."""
    seen = []
    for path in ["/api/v2/tasks?user=all", "/api/v2/tasks?user=bob", "/api/v2/queue",
                 "/api/v2/pipelines"]:
        resp = await client.get(path, headers=world.auth("alice"))
        assert resp.status < 500
        seen.append(await resp.text())
    for task_id in task_ids:
        for suffix in ("", "/events", "/attempts"):
            resp = await client.get(f"/api/v2/tasks/{task_id}{suffix}",
                                    headers=world.auth("alice"))
            assert resp.status < 500
            seen.append(await resp.text())
    return "\n".join(seen)


async def test_a_tracker_symlinked_to_a_secret_is_not_quoted_to_anyone(
        client, world, outside: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Reproduction 1: stage b's ``{{stages.a.latest_checkpoint}}``, a's tracker a link
    to the service's environment; a canceled, b released with the reference."""
    spec = yaml.safe_load(jobspec(world.shared))
    body = {"name": "leak", "stages": {
        "a": {"jobspec": spec},
        "b": {"after": {"any": ["a"]},
              "jobspec": {**spec, "model_id": "{{stages.a.latest_checkpoint}}"}}}}
    resp = await client.post("/api/v2/pipelines", json=body, headers=world.auth("bob"))
    assert resp.status == 201, await resp.text()
    stages = (await resp.json())["stages"]
    world.tick()
    ckpt = user_tree(world, "bob") / "checkpoints" / stages["a"]
    ckpt.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").symlink_to(outside / "environ")
    caplog.set_level(logging.INFO)
    resp = await client.post(f"/api/v2/tasks/{stages['a']}:cancel", headers=world.auth("bob"))
    assert resp.status == 202
    world.cluster.finish(f"{stages['a']}--a01", RayStatus.STOPPED)
    world.tick()
    world.tick()
    got = await (await client.get(f"/api/v2/tasks/{stages['b']}",
                                  headers=world.auth("alice"))).json()
    assert got["state"] == "CANCELED"
    assert "latest_checkpointed_iteration.txt" in got["error_summary"]
    seen = await everything_alice_sees(client, world, list(stages.values()))
    assert "sec-admin-token" not in seen and "SHELL" not in seen
    assert "sec-admin-token" not in caplog.text


async def test_a_tracker_holding_anything_but_a_step_is_named_not_quoted(
        client, world) -> None:
    spec = yaml.safe_load(jobspec(world.shared))
    body = {"name": "junk", "stages": {
        "a": {"jobspec": spec},
        "b": {"after": {"any": ["a"]},
              "jobspec": {**spec, "model_id": "{{stages.a.latest_checkpoint}}"}}}}
    resp = await client.post("/api/v2/pipelines", json=body, headers=world.auth("bob"))
    stages = (await resp.json())["stages"]
    world.tick()
    ckpt = user_tree(world, "bob") / "checkpoints" / stages["a"]
    ckpt.mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_bytes(b"TOKEN=hunter2\xff\n")
    world.cluster.finish(f"{stages['a']}--a01", RayStatus.FAILED, message="boom")
    world.tick()
    world.tick()
    got = await (await client.get(f"/api/v2/tasks/{stages['b']}",
                                  headers=world.auth("alice"))).json()
    assert got["state"] == "CANCELED"
    assert "not a valid checkpoint tracker" in got["error_summary"]
    assert "hunter2" not in await everything_alice_sees(client, world, list(stages.values()))


@pytest.mark.parametrize("target", ["alice", "environ", "proc"])
async def test_the_log_route_serves_only_the_owners_own_archive(
        client, world, outside: Path, target: str) -> None:
    """Reproduction 2: after bob's task ended, his job's side re-points his archived
    ``driver.log`` at alice's log, or at the service's environment."""
    alice_task = await submit_as(client, world, "alice")
    bob_task = await submit_as(client, world, "bob")
    world.tick()
    world.cluster.finish(f"{alice_task}--a01", log="alice's private log line\n")
    world.cluster.finish(f"{bob_task}--a01", log="bob's own line\n")
    world.tick()
    bob_log = user_tree(world, "bob") / "jobs" / f"{bob_task}--a01" / "driver.log"
    alice_log = user_tree(world, "alice") / "jobs" / f"{alice_task}--a01" / "driver.log"
    assert alice_log.read_text() == "alice's private log line\n"
    assert bob_log.read_text() == "bob's own line\n"
    bob_log.unlink()
    bob_log.symlink_to({"alice": alice_log, "environ": outside / "environ",
                        "proc": Path("/proc/self/environ")}[target])
    world.cluster.forget_all_jobs()  # Ray's copy is gone (a new head): only the archive
    for query in ("", "?offset=0", "?tail=5"):
        resp = await client.get(f"/api/v2/tasks/{bob_task}/logs{query}",
                                headers=world.auth("bob"))
        text = await resp.text()
        assert resp.status == 404, text
        assert "alice" not in text and "sec-admin" not in text
        assert BOOTSTRAP not in text and "PATH=" not in text
    resp = await client.get(f"/api/v2/tasks/{alice_task}/logs", headers=world.auth("alice"))
    assert resp.status == 200 and await resp.text() == "alice's private log line\n"


async def test_a_users_jobs_dir_linked_outside_gets_no_write(
        client, world, tmp_path: Path) -> None:
    """Reproduction 3: ``users/bob/jobs`` a link to a directory outside the root; bob's
    next submit writes nothing there, and the task still runs."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (user_tree(world, "bob")).mkdir(parents=True)
    (user_tree(world, "bob") / "jobs").symlink_to(elsewhere)
    task = await submit_as(client, world, "bob")
    world.tick()
    assert list(elsewhere.iterdir()) == []
    got = await (await client.get(f"/api/v2/tasks/{task}", headers=world.auth("bob"))).json()
    assert got["state"] == "SUBMITTED"
    world.cluster.finish(f"{task}--a01", log="done\n")
    world.tick()  # the log archive is refused too
    assert list(elsewhere.iterdir()) == []


async def test_an_exit_marker_in_the_common_area_decides_nothing(client, world) -> None:
    """Reproduction 4: Ray lost the supervisor of alice's attempt and it left no marker in
    her tree; a ``0`` written at ``<root>/jobs/<sid>/exit_code`` (outside any user's
    tree) no longer turns it into SUCCEEDED: it is CLUSTER_LOST and retried."""
    task = await submit_as(client, world, "alice")
    world.tick()
    sid = f"{task}--a01"
    common = world.shared / "jobs" / sid
    common.mkdir(parents=True)
    (common / "exit_code").write_text("0\n")
    world.cluster.finish(sid, RayStatus.FAILED,
                         message="Job supervisor actor died: The actor died unexpectedly")
    world.tick()
    got = await (await client.get(f"/api/v2/tasks/{task}", headers=world.auth("alice"))).json()
    assert got["state"] != "SUCCEEDED"
    attempts = await (await client.get(f"/api/v2/tasks/{task}/attempts",
                                       headers=world.auth("alice"))).json()
    assert attempts["attempts"][0]["failure_kind"] == "CLUSTER_LOST"


async def test_an_exit_marker_that_is_a_link_is_no_evidence(
        client, world, outside: Path) -> None:
    task = await submit_as(client, world, "alice")
    world.tick()
    sid = f"{task}--a01"
    (outside / "zero").write_text("0\n")
    attempt = user_tree(world, "alice") / "jobs" / sid
    attempt.mkdir(parents=True, exist_ok=True)
    os.symlink(outside / "zero", attempt / "exit_code")
    world.cluster.finish(sid, RayStatus.FAILED, message="Unexpected error occurred: x")
    world.tick()
    attempts = await (await client.get(f"/api/v2/tasks/{task}/attempts",
                                       headers=world.auth("alice"))).json()
    assert attempts["attempts"][0]["failure_kind"] == "CLUSTER_LOST"
