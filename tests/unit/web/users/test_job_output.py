"""A job's words reach its task's owner and admins only, like its logs: bob's failed task,
whose Ray message and driver log hold a marker (a secret the job printed), shows alice the
failure kind and Argus's words in every answer and page, and bob and the admins the
marker as before."""

from __future__ import annotations

import pytest
import yaml
from users_world import jobspec, submit_as

from service.domain.states import RayStatus

MARK = "WANDB_API_KEY=wk-marker-4711"
RAY_MESSAGE = ("Job entrypoint command failed with exit code 1, last available logs "
               f"(truncated to 20,000 chars):\nprint-secret: {MARK}\n"
               f"RuntimeError: CUDA error: out of memory ({MARK})")
LOG = f"step:1 - loss:2.0\nTraceback (most recent call last):\nRuntimeError: {MARK}\n"


async def failed_task_of_bob(client, world) -> str:
    """Bob's task, FAILED (RUNTIME_ERROR) with the marker in Ray's message and its log;
    and a task of bob's running beside it (the queue's running part)."""
    task_id = await submit_as(client, world, "bob")
    world.tick()
    world.cluster.finish(f"{task_id}--a01", RayStatus.FAILED, message=RAY_MESSAGE, log=LOG)
    world.tick()
    await submit_as(client, world, "bob")
    world.tick()
    return task_id


async def api_answers(client, world, who: str, task_id: str) -> dict[str, str]:
    answers = {}
    for path in ["/api/v2/tasks?user=all", "/api/v2/tasks?user=bob",
                 "/api/v2/tasks?state=FAILED", "/api/v2/queue", f"/api/v2/tasks/{task_id}",
                 f"/api/v2/tasks/{task_id}/attempts", f"/api/v2/tasks/{task_id}/events"]:
        resp = await client.get(path, headers=world.auth(who))
        assert resp.status == 200, (who, path, resp.status)
        answers[path] = await resp.text()
    return answers


async def console_pages(client, world, who: str, task_id: str) -> dict[str, str]:
    client.session.cookie_jar.clear()
    resp = await client.post("/ui/signin", data={"token": world.tokens[who],
                                                 "next": "/ui/queue"}, allow_redirects=False)
    assert resp.status == 303, await resp.text()
    pages = {}
    for path in ["/ui/queue", "/ui/queue?state=finished", "/ui/queue?fragment=1",
                 f"/ui/tasks/{task_id}", f"/ui/tasks/{task_id}?fragment=1"]:
        resp = await client.get(path, allow_redirects=False)
        assert resp.status == 200, (who, path, resp.status)
        pages[path] = await resp.text()
    return pages


async def test_another_user_sees_argus_words_not_the_jobs(client, world) -> None:
    task_id = await failed_task_of_bob(client, world)
    seen = {**await api_answers(client, world, "alice", task_id),
            **await console_pages(client, world, "alice", task_id)}
    leaks = [path for path, text in seen.items() if "marker-4711" in text]
    assert not leaks, leaks
    task = await (await client.get(f"/api/v2/tasks/{task_id}",
                                   headers=world.auth("alice"))).json()
    assert task["state"] == "FAILED" and task["error_summary"] == "RUNTIME_ERROR"
    listed = await (await client.get("/api/v2/tasks?user=bob",
                                     headers=world.auth("alice"))).json()
    assert {t["task_id"]: t["error_summary"] for t in listed["tasks"]}[task_id] == (
        "RUNTIME_ERROR")
    attempts = await (await client.get(f"/api/v2/tasks/{task_id}/attempts",
                                       headers=world.auth("alice"))).json()
    (attempt,) = attempts["attempts"]
    assert attempt["message"] is None and attempt["message_hidden"] is True
    assert attempt["failure_kind"] == "RUNTIME_ERROR" and attempt["ray_status"] == "FAILED"
    page = seen[f"/ui/tasks/{task_id}"]
    assert "RUNTIME_ERROR" in page and "its owner's and admins' to read" in page
    assert "RUNTIME_ERROR" in seen["/ui/queue?state=finished"]
    # her own tasks' words are hers: the rule is the owner's, not the reader's role
    own = await submit_as(client, world, "alice")
    world.tick()
    world.cluster.finish(f"{own}--a01", RayStatus.FAILED, message=RAY_MESSAGE, log=LOG)
    world.tick()
    mine = await (await client.get(f"/api/v2/tasks/{own}", headers=world.auth("alice"))).json()
    assert "marker-4711" in mine["error_summary"]


@pytest.mark.parametrize("who", ["bob", "ada", "bootstrap"])
async def test_the_owner_and_admins_see_the_jobs_words(client, world, who: str) -> None:
    task_id = await failed_task_of_bob(client, world)
    api = await api_answers(client, world, who, task_id)
    task = await (await client.get(f"/api/v2/tasks/{task_id}", headers=world.auth(who))).json()
    assert task["error_summary"].startswith("RUNTIME_ERROR: ") and MARK in task["error_summary"]
    assert MARK in api["/api/v2/tasks?user=bob"]
    attempts = await (await client.get(f"/api/v2/tasks/{task_id}/attempts",
                                       headers=world.auth(who))).json()
    (attempt,) = attempts["attempts"]
    assert attempt["message"] == RAY_MESSAGE and attempt["message_hidden"] is False
    pages = await console_pages(client, world, who, task_id)
    assert MARK in pages[f"/ui/tasks/{task_id}"] and MARK in pages["/ui/queue?state=finished"]


async def test_a_stage_s_resolved_jobspec_is_its_owners(client, world) -> None:
    """The event that releases a pipeline stage records its JobSpec, resolved: the owner's
    and the admins' (the console shows anyone else no JobSpec either)."""
    spec = yaml.safe_load(jobspec(world.shared))
    body = {"name": "two", "stages": {
        "a": {"jobspec": spec},
        "b": {"after": {"ok": ["a"]},
              "jobspec": {**spec, "model_id": "{{stages.a.checkpoint_dir}}"}}}}
    resp = await client.post("/api/v2/pipelines", json=body, headers=world.auth("bob"))
    assert resp.status == 201, await resp.text()
    stages = (await resp.json())["stages"]
    world.tick()
    world.cluster.finish(f"{stages['a']}--a01", RayStatus.SUCCEEDED)
    world.tick()
    world.tick()

    async def payloads(who: str) -> list[dict]:
        resp = await client.get(f"/api/v2/tasks/{stages['b']}/events", headers=world.auth(who))
        return [e["payload"] for e in (await resp.json())["events"]]

    assert any("resolved" in p for p in await payloads("bob"))
    assert any("resolved" in p for p in await payloads("ada"))
    theirs = await payloads("alice")
    assert any(p.get("reason") == "dependencies met" for p in theirs)
    assert not any("resolved" in p for p in theirs)
