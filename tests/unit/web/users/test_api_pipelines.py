"""Dependencies and pipelines through the HTTP API: a real app and Store, the fake cluster
and the real scheduler ticked with an injected clock (no sleeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from users_world import app_of, jobspec, submit_as

from service.domain.states import RayStatus


@pytest.fixture
async def client(aiohttp_client, world):
    return await aiohttp_client(app_of(world))


def _pipeline(shared: Path, eval_after: str = "any") -> dict[str, Any]:
    spec = yaml.safe_load(jobspec(shared))
    return {"name": "sft-then-eval", "stages": {
        "sft": {"jobspec": spec},
        "eval": {"after": {eval_after: ["sft"]},
                 "jobspec": {**spec, "model_id": "{{stages.sft.checkpoint_dir}}"}}}}


async def test_a_dependent_task_waits_saying_why_and_bad_parents_are_400(
        client, world) -> None:
    parent = await submit_as(client, world, "alice")
    world.tick()
    body = jobspec(world.shared) + f"after: {{ok: [{parent}]}}\n"
    headers = {**world.auth("alice"), "Content-Type": "application/yaml"}
    resp = await client.post("/api/v2/tasks", data=body, headers=headers)
    assert resp.status == 201 and (await resp.json())["state"] == "BLOCKED"
    child = (await resp.json())["task_id"]
    got = await (await client.get(f"/api/v2/tasks/{child}", headers=headers)).json()
    assert got["state"] == "BLOCKED"
    assert got["waiting_on"] == got["pending_reason"] == f"after {parent} (SUBMITTED)"
    assert got["after"] == [{"task_id": parent, "condition": "ok", "state": "SUBMITTED"}]
    listed = await (await client.get("/api/v2/tasks?state=BLOCKED", headers=headers)).json()
    assert [(t["task_id"], t["pending_reason"]) for t in listed["tasks"]] == [
        (child, f"after {parent} (SUBMITTED)")]
    world.cluster.finish(f"{parent}--a01", RayStatus.SUCCEEDED)
    world.tick()
    got = await (await client.get(f"/api/v2/tasks/{child}", headers=headers)).json()
    assert got["state"] == "SUBMITTED" and got["waiting_on"] is None
    # bob may not wait on alice's task; a malformed after is named
    bob = {**world.auth("bob"), "Content-Type": "application/yaml"}
    resp = await client.post("/api/v2/tasks", data=body, headers=bob)
    assert resp.status == 400
    assert (await resp.json())["error"]["details"] == [{"field": "after", "message": (
        f"task {parent} not found (a parent must exist and be yours)")}]
    resp = await client.post("/api/v2/tasks", headers=headers,
                             data=jobspec(world.shared) + "after: {sometimes: [x]}\n")
    assert resp.status == 400
    assert (await resp.json())["error"]["details"][0]["field"] == "after"


async def test_pipeline_create_read_list_cancel(client, world) -> None:
    headers = world.auth("alice")
    resp = await client.post("/api/v2/pipelines", json=_pipeline(world.shared),
                             headers=headers)
    assert resp.status == 201, await resp.text()
    created = await resp.json()
    pid, stages = created["pipeline_id"], created["stages"]
    world.tick()
    got = await (await client.get(f"/api/v2/pipelines/{pid}", headers=headers)).json()
    assert got["state"] == "RUNNING"
    assert [(s["stage"], s["state"]) for s in got["stages"]] == [
        ("sft", "SUBMITTED"), ("eval", "BLOCKED")]
    assert got["edges"] == [{"from": "sft", "to": "eval", "condition": "any"}]
    task = await (await client.get(f"/api/v2/tasks/{stages['eval']}",
                                   headers=headers)).json()
    assert task["pipeline"] == {"pipeline_id": pid, "stage": "eval"}
    listed = await (await client.get("/api/v2/pipelines", headers=world.auth("bob"))).json()
    assert listed == {"pipelines": []}
    listed = await (await client.get("/api/v2/pipelines", headers=headers)).json()
    assert [p["pipeline_id"] for p in listed["pipelines"]] == [pid]
    resp = await client.post(f"/api/v2/pipelines/{pid}/cancel", headers=world.auth("bob"))
    assert resp.status == 403
    resp = await client.post(f"/api/v2/pipelines/{pid}/cancel", headers=headers)
    assert resp.status == 200
    assert sorted((await resp.json())["canceled"]) == sorted(stages.values())
    world.tick()  # the stop of sft completes; the pipeline ends CANCELED
    world.tick()
    got = await (await client.get(f"/api/v2/pipelines/{pid}", headers=headers)).json()
    assert got["state"] == "CANCELED", got
    assert {s["state"] for s in got["stages"]} == {"CANCELED"}


@pytest.mark.parametrize(("doc", "status", "field"), [
    ({"name": "x", "stages": {"a": {"jobspec": {"workload": "ppo"}}}}, 400,
     "stages.a.jobspec.code_path"),
    ({"name": "x", "stages": {"a": {"jobspec": {}, "after": {"ok": ["b"]}},
                              "b": {"jobspec": {}, "after": {"ok": ["a"]}}}}, 400, "stages"),
])
async def test_bad_pipelines_are_400_and_create_nothing(client, world, doc, status,
                                                        field) -> None:
    resp = await client.post("/api/v2/pipelines", json=doc, headers=world.auth("alice"))
    assert resp.status == status
    assert field in [d["field"] for d in (await resp.json())["error"]["details"]]
    assert world.store.tasks.list_tasks(limit=5)[0] == []
