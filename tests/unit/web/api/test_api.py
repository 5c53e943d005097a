"""The HTTP API against a real Store (SQLite in tmp_path), the real Scheduler driven tick
by tick with an injected clock, and FakeCluster at the Ray boundary. No sleeps."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import replace
from typing import Any

import jsonschema
import pytest
from api_env import (
    AUTH,
    INSUFFICIENT,
    REPO,
    T0,
    TASK_ID_RE,
    TOKEN,
    YAML,
    FakeLoop,
    assert_error,
    get_json,
    jobspec,
    make_app,
    state_of,
    submit,
)
from prometheus_client.parser import text_string_to_metric_families

from service.cluster.fake import FakeCluster
from service.domain import reasons
from service.domain.states import RayStatus, TaskState
from service.store.writer import BulkTask
from service.usecases import tasks
from service.web.api.deps import DEPS
from service.web.api.waker import Waker
from service.web.app import ROUTES, create_app
from service.web.openapi import build_openapi


@pytest.mark.parametrize("content_type", [
    "application/yaml", "text/yaml", "application/x-yaml", "application/yaml; charset=utf-8",
])
async def test_submit_accepts_yaml_content_types(client, env, content_type):
    body = jobspec(env.shared)
    resp = await client.post("/api/v2/tasks", data=body,
                             headers={**AUTH, "Content-Type": content_type})
    assert resp.status == 201
    data = await resp.json()
    assert data["state"] == "QUEUED"
    assert TASK_ID_RE.fullmatch(data["task_id"])
    assert env.loop.wakes == 1
    assert env.store.tasks.task_exists(data["task_id"])


async def test_submit_stores_raw_yaml_as_received(client, env):
    env.cluster.add_node("n1", gpus=4)
    body = "# audit me\n" + jobspec(env.shared, total_epochs=3) + "# trailing comment\n"
    resp = await client.post("/api/v2/tasks", data=body.encode(), headers=YAML)
    task_id = (await resp.json())["task_id"]
    env.tick()  # submits: the raw text is archived with the attempt
    archived = (env.artifacts.attempt_dir(env.sid(task_id), "admin") / "jobspec.yaml").read_text()
    assert archived == body


async def test_get_task_aggregated_view(client, env):
    task_id = await submit(client, env, nnodes=2, n_gpus_per_node=4)
    view = await get_json(client, f"/api/v2/tasks/{task_id}")
    assert view["task_id"] == task_id
    assert view["state"] == "QUEUED" and view["workload"] == "ppo"
    assert view["desired_resources"] == {"nnodes": 2, "n_gpus_per_node": 4, "total_gpus": 8}
    assert view["latest_attempt"] is None and view["queue_position"] == 1

    env.tick()  # no nodes: waits with a reason
    view = await get_json(client, f"/api/v2/tasks/{task_id}")
    assert view["state"] == "PENDING_RESOURCES"
    assert re.search(r"needs 2\D4 GPUs", view["pending_reason"]), view["pending_reason"]


async def test_events_show_the_whole_path(client, env):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    env.cluster.start(env.sid(task_id))
    env.tick()
    env.cluster.finish(env.sid(task_id), RayStatus.SUCCEEDED)
    env.tick()
    data = await get_json(client, f"/api/v2/tasks/{task_id}/events")
    assert data["task_id"] == task_id
    moves = [(e["payload"]["from"], e["payload"]["to"])
             for e in data["events"] if e["type"] == "STATE_TRANSITION"]
    assert moves == [("QUEUED", "SUBMITTING"), ("SUBMITTING", "SUBMITTED"),
                     ("SUBMITTED", "RUNNING"), ("RUNNING", "SUCCEEDED")]
    assert data["events"][0]["type"] == "CREATED"
    ids = [e["id"] for e in data["events"]]
    assert ids == sorted(ids) and all(e["ts"].endswith("Z") for e in data["events"])
    resp = await client.get("/api/v2/tasks/mvp2-ppo-20250101-000000-beef/events",
                            headers=AUTH)
    assert resp.status == 404


async def test_attempts_after_a_retry(client, env):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    env.cluster.start(env.sid(task_id))
    env.cluster.finish(env.sid(task_id), RayStatus.FAILED, message=INSUFFICIENT)
    env.tick()
    env.tick(advance=env.settings.scheduler.retry_interval_s + 1)
    data = await get_json(client, f"/api/v2/tasks/{task_id}/attempts")
    assert data["task_id"] == task_id
    first, second = data["attempts"]
    assert first["attempt_no"] == 1 and first["ray_submission_id"] == env.sid(task_id)
    assert first["failure_kind"] == "INSUFFICIENT_RESOURCES"
    assert "Total available GPUs" in first["message"]
    assert first["start_time"] and first["end_time"]
    assert second["attempt_no"] == 2 and second["ray_submission_id"] == env.sid(task_id, 2)
    view = await get_json(client, f"/api/v2/tasks/{task_id}")
    assert view["latest_attempt"]["attempt_no"] == 2


async def test_queue_lists_pending_in_order_and_running(client, env):
    env.cluster.add_node("n1", gpus=2)
    first = await submit(client, env)  # takes the only 2 GPUs
    env.tick()
    second = await submit(client, env)
    third = await submit(client, env)
    env.tick()
    data = await get_json(client, "/api/v2/queue")
    assert [t["task_id"] for t in data["pending"]] == [second, third]
    assert [t["queue_position"] for t in data["pending"]] == [1, 2]
    assert all(t["pending_reason"] and t["next_run_at"] for t in data["pending"])
    assert [t["task_id"] for t in data["running"]] == [first]
    assert data["running"][0]["latest_attempt"]["ray_submission_id"] == env.sid(first)
    owner = data["running"][0]["user"]  # holds both GPUs of the cluster
    assert data["fair_share"] == [{"user": owner, "gpus": 2.0, "share": 1.0, "weight": 1.0,
                                   "weighted_share": 1.0}]


async def test_a_waiting_task_says_when_it_should_start_and_from_what(client, env):
    env.cluster.add_node("n1", gpus=2)
    first = await submit(client, env, max_runtime_s=600)  # takes the only 2 GPUs
    env.tick()
    env.cluster.start(env.sid(first), {"n1": 2})
    planned = await submit(client, env, max_runtime_s=600)
    await submit(client, env)  # no limit: once it starts, it holds the node for good
    unplanned = await submit(client, env, max_runtime_s=600)  # behind it: never planned
    env.tick()
    view = await get_json(client, f"/api/v2/tasks/{planned}")
    assert view["estimate_basis"] == "time_limits", view["pending_reason"]
    assert view["estimated_start"] == view["estimated_start_bound"] is not None
    queue = await get_json(client, "/api/v2/queue")
    listed = {t["task_id"]: t for t in (await get_json(client, "/api/v2/tasks"))["tasks"]}
    for shown in ({t["task_id"]: t for t in queue["pending"]}, listed):
        assert shown[planned]["estimated_start"] == view["estimated_start"]
        assert (shown[unplanned]["estimated_start"], shown[unplanned]["estimate_basis"]) == (
            None, "unknown")
    for running in (queue["running"][0], listed[first]):  # it does not wait
        assert running["estimated_start"] is running["estimate_basis"] is None


async def test_list_filters_by_state(client, env):
    a = await submit(client, env)
    b = await submit(client, env)
    await client.post(f"/api/v2/tasks/{a}:cancel", headers=AUTH)
    data = await get_json(client, "/api/v2/tasks", state="CANCELED")
    assert [t["task_id"] for t in data["tasks"]] == [a]
    data = await get_json(client, "/api/v2/tasks", state="queued")
    assert [t["task_id"] for t in data["tasks"]] == [b]
    assert data["next_cursor"] is None


async def test_reason_kind_and_the_reason_filter(client, env, monkeypatch):
    """The task JSON says the kind of a waiting task's reason; ``reason=`` filters by it
    on both lists, whatever the reason's wording (the renderer is changed here)."""
    monkeypatch.setattr(reasons, "_details_text", lambda details: "reworded")
    env.cluster.add_node("n1", gpus=2)
    running = await submit(client, env)
    env.tick()
    waiting = await submit(client, env)  # no room: the first holds both GPUs
    never = await submit(client, env, n_gpus_per_node=8)
    fresh_task = await submit(client, env)
    env.tick()
    late = await submit(client, env)  # not examined yet: new
    view = await get_json(client, f"/api/v2/tasks/{waiting}")
    assert (view["reason_kind"], view["pending_reason"]) == ("resources", "reworded")
    assert (await get_json(client, f"/api/v2/tasks/{running}"))["reason_kind"] is None
    data = await get_json(client, "/api/v2/tasks", reason="resources")
    assert [t["task_id"] for t in data["tasks"]] == [fresh_task, waiting]
    data = await get_json(client, "/api/v2/tasks", reason="never_fits", state="PENDING_RESOURCES")
    assert [t["task_id"] for t in data["tasks"]] == [never]
    data = await get_json(client, "/api/v2/queue", reason="new")
    assert [t["task_id"] for t in data["pending"]] == [late]
    assert data["pending"][0]["queue_position"] == 4 and data["blocked"] == []
    data = await get_json(client, "/api/v2/queue", reason="resources")
    assert [t["queue_position"] for t in data["pending"]] == [1, 3]
    body = await get_json(client, "/api/v2/queue", status=400, reason="no_such_kind")
    assert assert_error(body, "bad_request")["details"][0]["field"] == "reason"
    await get_json(client, "/api/v2/tasks", status=400, reason="Resources")


async def test_pagination_walks_every_task_once_newest_first(client, env):
    created = []
    for _ in range(23):
        created.append(await submit(client, env))
        env.clock.now += 1
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 5, **({"cursor": cursor} if cursor else {})}
        data = await get_json(client, "/api/v2/tasks", **params)
        assert len(data["tasks"]) <= 5
        seen += [t["task_id"] for t in data["tasks"]]
        pages += 1
        cursor = data["next_cursor"]
        if cursor is None:
            break
    assert pages == 5
    assert len(seen) == len(set(seen)) == 23
    assert seen == created[::-1]


async def test_list_default_limit_is_50(client, env):
    env.store.tasks.bulk_load(
        BulkTask(task_id=f"mvp2-sft-20251223-143200-{i:04x}", workload="sft",
                 state=TaskState.SUCCEEDED, created_at=T0 + i)
        for i in range(60)
    )
    data = await get_json(client, "/api/v2/tasks")
    assert len(data["tasks"]) == 50 and data["next_cursor"]


# -- cancel from every state -------------------------------------------------------------


async def cancel(client, task_id: str):
    resp = await client.post(f"/api/v2/tasks/{task_id}:cancel", headers=AUTH)
    return resp.status, await resp.json()


async def test_cancel_queued(client, env):
    task_id = await submit(client, env)
    status, body = await cancel(client, task_id)
    assert (status, body) == (200, {"task_id": task_id, "state": "CANCELED"})
    assert await state_of(client, task_id) == "CANCELED"
    assert env.cluster.stop_calls == []


async def test_cancel_pending_resources(client, env):
    task_id = await submit(client, env)
    env.tick()
    assert await state_of(client, task_id) == "PENDING_RESOURCES"
    status, body = await cancel(client, task_id)
    assert (status, body["state"]) == (200, "CANCELED")
    env.tick()
    assert env.cluster.submit_calls == []


@pytest.mark.parametrize("running", [False, True])
async def test_cancel_on_cluster_stops_the_ray_job(client, env, running):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    sid = env.sid(task_id)
    if running:
        env.cluster.start(sid, {"n1": 2})
        env.tick()
    expected = "RUNNING" if running else "SUBMITTED"
    assert await state_of(client, task_id) == expected
    wakes = env.loop.wakes
    status, body = await cancel(client, task_id)
    assert status == 202
    assert body == {"task_id": task_id, "state": expected, "cancel_requested": True}
    assert env.cluster.stop_calls == [sid]
    assert env.cluster.jobs[sid].status == RayStatus.STOPPED
    assert env.loop.wakes == wakes + 1
    env.tick()  # the scheduler sees Ray's STOPPED and finishes the cancel
    assert await state_of(client, task_id) == "CANCELED"


async def test_cancel_submitting_when_ray_does_not_know_the_job_yet(client, env):
    task_id = await submit(client, env)
    claim = env.store.attempts.claim_for_submit(task_id, TaskState.QUEUED, env.clock.now)
    status, body = await cancel(client, task_id)  # FakeCluster: JobNotFound, best effort
    assert status == 202 and body["state"] == "SUBMITTING" and body["cancel_requested"]
    assert env.cluster.stop_calls == [claim.ray_submission_id]
    view = await get_json(client, f"/api/v2/tasks/{task_id}")
    assert view["cancel_requested"] is True


async def test_cancel_running_while_ray_is_unreachable_is_accepted(client, env):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    env.cluster.unreachable = True
    status, body = await cancel(client, task_id)
    assert status == 202 and body["cancel_requested"] is True
    env.cluster.unreachable = False
    env.tick()  # the scheduler retries the stop ...
    env.tick()  # ... and records the end
    assert await state_of(client, task_id) == "CANCELED"


async def test_cancel_does_not_wait_past_the_ray_timeout(aiohttp_client, env):
    """A hung stop_job cannot hang the request: the API answers after ray_timeout_s."""
    release = threading.Event()

    class HangingStop(FakeCluster):
        def stop(self, submission_id: str) -> None:
            release.wait(10)

    env.cluster = HangingStop(clock=T0)
    env.settings = replace(env.settings, ray_timeout_s=0.05)
    client = await aiohttp_client(make_app(env))
    task_id = await submit(client, env)
    env.store.attempts.claim_for_submit(task_id, TaskState.QUEUED, env.clock.now)
    try:
        status, body = await cancel(client, task_id)
    finally:
        release.set()
    assert status == 202 and body["cancel_requested"] is True


@pytest.mark.parametrize("final", [RayStatus.SUCCEEDED, RayStatus.FAILED, "CANCELED"])
async def test_cancel_terminal_is_409(client, env, final):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    if final == "CANCELED":
        await cancel(client, task_id)
    else:
        env.tick()
        env.cluster.finish(env.sid(task_id), final, message="boom", exit_code=1)
        env.tick()
    terminal = await state_of(client, task_id)
    assert TaskState(terminal).is_terminal()
    status, body = await cancel(client, task_id)
    assert status == 409
    assert terminal in assert_error(body, "conflict")["message"]


# -- priority ------------------------------------------------------------------------


async def patch_priority(client, task_id: str, body: Any = None, **kw: Any):
    if body is not None:
        kw["json"] = body
    headers = {**AUTH, **kw.pop("headers", {})}
    resp = await client.patch(f"/api/v2/tasks/{task_id}", headers=headers, **kw)
    return resp.status, await resp.json()


async def test_priority_change_reorders_the_queue_and_wakes_the_scheduler(client, env):
    first, second, third = [await submit(client, env) for _ in range(3)]
    wakes = env.loop.wakes
    status, body = await patch_priority(client, third, {"priority": 10})
    assert status == 200
    assert (body["task_id"], body["priority"], body["queue_position"]) == (third, 10, 1)
    assert env.loop.wakes == wakes + 1
    data = await get_json(client, "/api/v2/queue")
    assert [(t["task_id"], t["priority"], t["queue_position"]) for t in data["pending"]] == [
        (third, 10, 1), (first, 0, 2), (second, 0, 3)]
    status, body = await patch_priority(client, first, {"priority": -1})
    assert (status, body["queue_position"]) == (200, 3)
    view = await get_json(client, f"/api/v2/tasks/{second}")
    assert (view["priority"], view["queue_position"]) == (0, 2)


async def test_a_changed_priority_is_the_one_everywhere(client, env):
    """PATCH then GET, the queue and the JobSpec Ray is given: one priority (the stored
    JobSpec JSON holds none of its own)."""
    env.cluster.add_node("n1", gpus=2)
    task_id = await submit(client, env, priority=3)
    status, _ = await patch_priority(client, task_id, {"priority": 8})
    assert status == 200
    assert (await get_json(client, f"/api/v2/tasks/{task_id}"))["priority"] == 8
    pending = (await get_json(client, "/api/v2/queue"))["pending"]
    assert [t["priority"] for t in pending] == [8]
    claim = env.store.attempts.claim_for_submit(task_id, TaskState.QUEUED, env.clock.now)
    assert claim.spec["priority"] == 8


async def test_the_description_is_shown_with_the_task(client, env):
    task_id = await submit(client, env, description="lr sweep, run 3")
    assert (await get_json(client, f"/api/v2/tasks/{task_id}"))["description"] == (
        "lr sweep, run 3")
    listed = (await get_json(client, "/api/v2/tasks"))["tasks"]
    assert [t["description"] for t in listed] == ["lr sweep, run 3"]
    other = await submit(client, env)
    assert (await get_json(client, f"/api/v2/tasks/{other}"))["description"] is None


async def test_submit_applies_the_configured_default_priority(aiohttp_client, env):
    env.settings = replace(env.settings, scheduler=replace(
        env.settings.scheduler, default_priority=7, max_user_priority=7))
    client = await aiohttp_client(make_app(env))
    omitted = await submit(client, env)
    explicit_null = await submit(client, env, priority=None)
    asked = await submit(client, env, priority=-2)
    for task_id, priority in ((omitted, 7), (explicit_null, 7), (asked, -2)):
        assert env.store.tasks.get_task(task_id).priority == priority
        assert (await get_json(client, f"/api/v2/tasks/{task_id}"))["priority"] == priority


async def test_submit_applies_the_configured_default_time_limit(aiohttp_client, env):
    env.settings = replace(env.settings, scheduler=replace(
        env.settings.scheduler, default_max_runtime_s=86400.0))
    client = await aiohttp_client(make_app(env))
    omitted = await submit(client, env)
    asked = await submit(client, env, max_runtime_s=600)
    for task_id, limit in ((omitted, 86400.0), (asked, 600.0)):
        assert env.store.tasks.get_task(task_id).max_runtime_s == limit
        assert (await get_json(client, f"/api/v2/tasks/{task_id}"))["max_runtime_s"] == limit


async def test_submit_with_a_priority_out_of_range_is_400(client, env):
    resp = await client.post("/api/v2/tasks", data=jobspec(env.shared, priority=1001),
                             headers=YAML)
    err = assert_error(await resp.json(), "bad_request")
    assert resp.status == 400 and [d["field"] for d in err["details"]] == ["priority"]
    assert env.store.tasks.list_tasks(state=None, limit=10, before_seq=None)[0] == []


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(("kw", "status", "fields"), [
    ({"data": "", "headers": JSON}, 400, ["body"]),
    ({"data": "{not json", "headers": JSON}, 400, ["body"]),
    ({"data": "[" * 5000, "headers": JSON}, 400, ["body"]),  # too deep for the parser
    ({"data": b"\xff\xfe", "headers": JSON}, 400, ["body"]),
    ({"json": [1]}, 400, ["body"]),
    ({"json": 5}, 400, ["body"]),
    ({"json": {}}, 400, ["priority"]),
    ({"json": {"priority": 1, "state": "RUNNING"}}, 400, ["state"]),
    ({"json": {"prio": 1}}, 400, ["prio", "priority"]),
    ({"json": {"priority": "5"}}, 400, ["priority"]),
    ({"json": {"priority": 1.5}}, 400, ["priority"]),
    ({"json": {"priority": 2.5e300}}, 400, ["priority"]),  # integral, far out of range
    ({"json": {"priority": True}}, 400, ["priority"]),
    ({"json": {"priority": None}}, 400, ["priority"]),
    ({"json": {"priority": 1001}}, 400, ["priority"]),
    ({"json": {"priority": -1001}}, 400, ["priority"]),
    ({"json": {"priority": 10 ** 30}}, 400, ["priority"]),
    ({"data": '{"priority": 1}', "headers": {"Content-Type": "text/plain"}}, 415, []),
    ({"data": '{"priority": 1}', "headers": {"Content-Type": "application/yaml"}}, 415, []),
    ({"data": '{"priority": 1}', "headers": {**JSON, "Content-Encoding": "gzip"}}, 415, []),
    ({"data": '{"priority": 1' + " " * 20_000 + "}", "headers": JSON}, 413, []),
])
async def test_bad_priority_requests_change_nothing(client, env, kw, status, fields):
    task_id = await submit(client, env)
    before = env.store.tasks.events(task_id)
    got, body = await patch_priority(client, task_id, **kw)
    assert got == status, body
    err = assert_error(body, {400: "bad_request", 413: "payload_too_large",
                              415: "unsupported_media_type"}[status])
    assert [d["field"] for d in err["details"]] == fields
    assert env.store.tasks.get_task(task_id).priority == 0
    assert env.store.tasks.events(task_id) == before


async def test_priority_answer_and_request_match_the_document(client, env):
    doc = await get_json(client, "/api/v2/openapi.json")
    op = doc["paths"]["/api/v2/tasks/{task_id}"]["patch"]
    assert set(op["responses"]) == {"200", "400", "401", "403", "404", "408", "409", "413",
                                    "415", "500", "503"}

    def check(instance: Any, name: str) -> None:
        jsonschema.validate(instance, {"$ref": f"#/components/schemas/{name}",
                                       "components": doc["components"]})

    task_id = await submit(client, env)
    status, body = await patch_priority(client, task_id, {"priority": -1000})
    assert status == 200
    check(body, "Task")
    check({"priority": 1000}, "PriorityChange")
    for bad in ({"priority": 1001}, {"priority": 1.5}, {}, {"priority": 1, "x": 2}):
        with pytest.raises(jsonschema.ValidationError):
            check(bad, "PriorityChange")


async def test_priority_of_an_unknown_task_is_404(client, env):
    status, body = await patch_priority(client, "mvp2-ppo-20250101-000000-dead", {"priority": 1})
    assert status == 404
    assert "mvp2-ppo-20250101-000000-dead" in assert_error(body, "not_found")["message"]


# -- logs -----------------------------------------------------------------------------


async def logs(client, task_id: str, **params: Any):
    resp = await client.get(f"/api/v2/tasks/{task_id}/logs", headers=AUTH, params=params)
    return resp


async def test_logs_live_from_ray_with_tail(client, env):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    env.cluster.start(env.sid(task_id), {"n1": 2})
    env.cluster.write_log(env.sid(task_id), "".join(f"line {i}\n" for i in range(1, 11)))
    resp = await logs(client, task_id, tail=3)
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    assert await resp.text() == "line 8\nline 9\nline 10\n"
    resp = await logs(client, task_id)  # default tail 2000: everything
    assert (await resp.text()).count("\n") == 10


async def test_logs_from_the_archive_once_ray_forgot_the_job(client, env):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    env.cluster.start(env.sid(task_id), {"n1": 2})
    env.cluster.finish(env.sid(task_id), RayStatus.SUCCEEDED, log="step 1\nstep 2\ndone\n")
    env.tick()  # the scheduler archives the driver log
    env.cluster.forget_all_jobs()  # head restarted: Ray's copy is gone
    resp = await logs(client, task_id, attempt="1", tail=2)
    assert resp.status == 200
    assert await resp.text() == "step 2\ndone\n"


async def test_logs_of_a_running_attempt_fall_back_to_the_archive(client, env):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    env.artifacts.archive_log(env.sid(task_id), "admin", "partial copy\n")
    env.cluster.unreachable = True
    resp = await logs(client, task_id)
    assert resp.status == 200 and await resp.text() == "partial copy\n"


async def test_logs_of_an_earlier_attempt(client, env):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    env.cluster.finish(env.sid(task_id), RayStatus.FAILED, message=INSUFFICIENT,
                       log="first try\n" + INSUFFICIENT + "\n")
    env.tick()
    env.tick(advance=env.settings.scheduler.retry_interval_s + 1)
    env.cluster.write_log(env.sid(task_id, 2), "second try\n")
    assert await (await logs(client, task_id, attempt="1", tail=1)).text() == INSUFFICIENT + "\n"
    assert await (await logs(client, task_id)).text() == "second try\n"
    assert await (await logs(client, task_id, attempt="2")).text() == "second try\n"


async def test_logs_404s(client, env):
    task_id = await submit(client, env)
    resp = await logs(client, task_id)
    assert resp.status == 404
    assert "no attempts" in assert_error(await resp.json(), "not_found")["message"]
    resp = await logs(client, task_id, attempt="3")
    assert resp.status == 404
    assert "no attempt 3" in assert_error(await resp.json(), "not_found")["message"]
    # an attempt that exists but whose log is nowhere (Ray forgot it, nothing archived)
    env.cluster.add_node("n1", gpus=4)
    env.tick()
    env.cluster.forget_all_jobs()
    resp = await logs(client, task_id)
    assert resp.status == 404
    assert "no logs" in assert_error(await resp.json(), "not_found")["message"]
    resp = await logs(client, "mvp2-ppo-20250101-000000-dead")
    assert resp.status == 404


@pytest.mark.parametrize("params, bad", [
    ({"attempt": "0"}, ["attempt"]),
    ({"attempt": "first"}, ["attempt"]),
    ({"tail": "0"}, ["tail"]),
    ({"tail": "100001"}, ["tail"]),
    ({"tail": "many"}, ["tail"]),
    ({"attempt": "-1", "tail": "x"}, ["attempt", "tail"]),
])
async def test_logs_bad_parameters_are_400(client, env, params, bad):
    task_id = await submit(client, env)
    resp = await logs(client, task_id, **params)
    assert resp.status == 400
    err = assert_error(await resp.json(), "bad_request")
    assert [d["field"] for d in err["details"]] == bad


# -- health, openapi, metrics ----------------------------------------------------------


async def test_healthz_needs_no_token(client, env):
    resp = await client.get("/healthz")
    assert resp.status == 200
    body = await resp.json()
    assert body["status"] == "ok"
    assert body["scheduler"] == {"alive": True, "ticks": 7, "errors": 0,
                                 "last_tick_duration_s": 0.004, "last_error": None,
                                 "role": "leader"}


async def test_healthz_fails_when_the_scheduler_thread_died(client, env):
    env.loop.alive, env.loop.failed = False, True
    resp = await client.get("/healthz")
    assert resp.status == 503
    body = await resp.json()
    assert body["status"] == "scheduler stopped" and body["scheduler"]["alive"] is False


async def test_readyz_says_ready_and_why_not(client, env, monkeypatch):
    """Ready while a probe read and a work-lane call come back in time and the scheduler
    runs with a writable database; 503 with each reason otherwise."""
    import threading

    from service.web.api import health

    resp = await client.get("/readyz")
    body = await resp.json()
    assert resp.status == 200 and body["status"] == "ready" and body["reasons"] == []
    assert body["read_s"] >= 0 and body["work_s"] >= 0
    # the read lane stuck behind slow reads, the database read-only
    monkeypatch.setattr(health, "READY_DEADLINE_S", 0.05)
    gate, held_read_done = threading.Event(), threading.Event()
    real = env.store.change_seq

    def slow_change_seq() -> int:
        try:
            gate.wait(10)
            return real()
        finally:
            held_read_done.set()

    monkeypatch.setattr(env.store, "change_seq", slow_change_seq)
    env.loop.degraded = "database is read-only"
    try:
        resp = await client.get("/readyz")
        body = await resp.json()
    finally:
        gate.set()
        # the held read ends before the fixture closes the store (a read on a closed
        # SQLite connection from the lane's thread crashes the process)
        assert held_read_done.wait(10)
    assert resp.status == 503 and body["status"] == "not ready"
    assert body["read_s"] is None
    assert any("database read took over 0.05 s" in r for r in body["reasons"])
    assert any("read-only" in r for r in body["reasons"])
    # healthz (liveness) stays 200: a restart would not help
    assert (await client.get("/healthz")).status == 200


def _app_routes(app) -> set[tuple[str, str]]:
    out = set()
    for route in app.router.routes():
        if route.method == "HEAD":  # aiohttp adds HEAD next to every GET
            continue
        if route.resource.canonical.startswith("/ui"):  # the web console: pages, not API
            continue
        path = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", route.resource.canonical)
        out.add((route.method.lower(), path))
    return out


async def test_openapi_documents_exactly_the_app_routes(client, env):
    doc = await get_json(client, "/api/v2/openapi.json")
    assert doc["openapi"].startswith("3.")
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert documented == _app_routes(client.app)
    assert len(documented) == len(ROUTES)


async def test_openapi_security_and_error_schema(client, env):
    doc = await get_json(client, "/api/v2/openapi.json")
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {"type": "http",
                                                                  "scheme": "bearer"}
    assert doc["security"] == [{"bearerAuth": []}]
    assert doc["paths"]["/healthz"]["get"]["security"] == []
    schemas = doc["components"]["schemas"]
    error = schemas["Error"]["properties"]["error"]
    error = schemas[error["$ref"].rsplit("/", 1)[1]] if "$ref" in error else error
    assert error["required"] == ["code", "message", "details"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if path not in ("/healthz", "/readyz", "/api/v2/openapi.json"):
                assert "401" in op["responses"], (method, path)
            for ref in re.findall(r'"\$ref": "#/components/(\w+)/(\w+)"', str(op).replace(
                    "'", '"')):
                assert ref[1] in doc["components"][ref[0]], ref
    params = {p["name"] for p in doc["paths"]["/api/v2/tasks/{task_id}/logs"]["get"][
        "parameters"]}
    assert params == {"task_id", "attempt", "tail", "offset"}


async def test_the_committed_document_is_the_served_one_and_needs_no_token(client, env):
    resp = await client.get("/api/v2/openapi.json")  # no Authorization header
    assert resp.status == 200
    served = await resp.json()
    committed = json.loads((REPO / "clients" / "openapi.json").read_text(encoding="utf-8"))
    assert served == committed, "clients/openapi.json is stale: scripts/openapi_export.py"
    assert str(env.shared) not in json.dumps(served)  # no deployment paths


def _schemas_in(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += _schemas_in(value)
    elif isinstance(node, list):
        for value in node:
            found += _schemas_in(value)
    return found


def test_every_operation_has_an_id_and_a_tag_and_no_enum_is_nullable():
    doc = build_openapi()
    ops = [(p, m, op) for p, item in doc["paths"].items() for m, op in item.items()]
    ids = [op["operationId"] for _, _, op in ops]
    assert len(set(ids)) == len(ids) == len(ROUTES)
    tags = {t["name"] for t in doc["tags"]}
    for path, method, op in ops:
        assert len(op["tags"]) == 1 and op["tags"][0] in tags, (method, path)
        internal = path in ("/metrics", "/healthz", "/readyz", "/api/v2/openapi.json")
        assert (op["tags"] == ["operations"]) is internal, (method, path)
        assert op.get("x-internal", False) is internal, (method, path)
    for schema in _schemas_in(doc):
        if "enum" in schema:
            assert None not in schema["enum"] and schema.get("type") == "string", schema
    jobspec = doc["components"]["schemas"]["JobSpec"]
    assert jobspec["discriminator"]["propertyName"] == "workload"
    assert [r["$ref"].rsplit("/", 1)[1] for r in jobspec["oneOf"]] == [
        "JobSpecPpo", "JobSpecGrpo", "JobSpecSft"]
    assert "/private" not in json.dumps(doc)  # the default settings' root


async def test_metrics_exposition(client, env):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    await submit(client, env)
    await submit(client, env)
    env.tick()  # 2 of 3 submitted (4 GPUs), one pending
    env.cluster.finish(env.sid(task_id), RayStatus.FAILED, message=INSUFFICIENT)
    env.tick()  # the first waits out its retry backoff in its place: its GPUs are kept
    await get_json(client, f"/api/v2/tasks/{task_id}")
    resp = await client.get("/metrics", headers=AUTH)
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    families = {f.name: f for f in text_string_to_metric_families(await resp.text())}
    tasks = {s.labels["state"]: s.value for s in families["argus_tasks"].samples}
    assert set(tasks) == {s.value for s in TaskState}
    assert tasks["SUBMITTED"] == 1 and tasks["PENDING_RESOURCES"] == 2
    assert families["argus_task_submits"].samples[0].value == 3
    assert families["argus_task_retries"].samples[0].value == 1
    assert families["argus_attempts_submitted"].samples[0].value == 2
    ticks = families["argus_scheduler_tick_duration_seconds"]
    assert any(s.name.endswith("_count") and s.value == 2 for s in ticks.samples)
    assert families["argus_scheduler_ticks"].samples[0].value == 7
    http = families["argus_http_requests"].samples
    assert any(s.labels == {"method": "POST", "route": "/api/v2/tasks", "status": "201"}
               and s.value == 3 for s in http)
    assert any(s.labels["route"] == "/api/v2/tasks/{task_id}" and s.labels["status"] == "200"
               for s in http)


async def test_each_app_has_its_own_registry(aiohttp_client, env):
    one = await aiohttp_client(make_app(env))
    await submit(one, env)
    other = create_app(env.settings, env.store, env.cluster, env.artifacts, token=TOKEN)
    assert other[DEPS].metrics.registry is not env.metrics.registry
    text = other[DEPS].metrics.render().decode()
    assert "argus_task_submits_total 0.0" in text


# -- scheduler wake-ups ----------------------------------------------------------------


async def test_waker_collapses_a_burst_into_one_deferred_wake():
    loop, now = FakeLoop(), [100.0]
    waker = Waker(loop, 0.1, clock=lambda: now[0])
    waker.wake()
    assert loop.wakes == 1  # the first goes through at once
    waker.wake()
    waker.wake()
    assert loop.wakes == 1  # inside the interval: deferred, once
    deadline = time.monotonic() + 5
    while loop.wakes < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # the deferred wake is a real event-loop timer
    assert loop.wakes == 2
    now[0] += 0.1
    waker.wake()
    assert loop.wakes == 3  # a full interval later: at once again


async def test_waker_close_cancels_the_deferred_wake():
    loop, now = FakeLoop(), [100.0]
    waker = Waker(loop, 60.0, clock=lambda: now[0])
    waker.wake()
    waker.wake()
    waker.close()
    now[0] += 61
    waker.wake()
    assert loop.wakes == 2


async def test_submissions_in_a_burst_wake_the_loop_once(aiohttp_client, env):
    client = await aiohttp_client(make_app(env, wake_interval_s=60.0))
    for _ in range(3):
        await submit(client, env)
    assert env.loop.wakes == 1


# -- nothing blocks the event loop -----------------------------------------------------


async def test_requests_are_served_while_a_write_waits_for_the_store_lock(client, env):
    """A submit waiting for the store's writer lock (held here as a long scheduler
    transaction would) waits on the store's thread: reads and health still answer."""
    task_id = await submit(client, env)
    held, release = threading.Event(), threading.Event()

    def long_transaction() -> None:
        with env.store.core.tx():
            held.set()
            release.wait(30)

    holder = threading.Thread(target=long_transaction)
    holder.start()
    try:
        assert await asyncio.to_thread(held.wait, 10)
        post = asyncio.ensure_future(
            client.post("/api/v2/tasks", data=jobspec(env.shared), headers=YAML))
        view = await asyncio.wait_for(get_json(client, f"/api/v2/tasks/{task_id}"), 10)
        assert view["state"] == "QUEUED"
        queue = await asyncio.wait_for(get_json(client, "/api/v2/queue"), 10)
        assert [t["task_id"] for t in queue["pending"]] == [task_id]
        health = await asyncio.wait_for(client.get("/healthz"), 10)
        assert health.status == 200
        assert not post.done()  # still waiting for the lock, off the loop
    finally:
        release.set()
        await asyncio.to_thread(holder.join, 10)
    resp = await asyncio.wait_for(post, 10)
    assert resp.status == 201
    assert env.store.tasks.task_exists((await resp.json())["task_id"])


async def test_store_calls_and_parsing_run_off_the_event_loop(client, env, monkeypatch):
    seen: dict[str, str] = {}

    def spy(name: str, fn):
        def call(*args: Any, **kw: Any) -> Any:
            seen.setdefault(name, threading.current_thread().name)  # the first call
            return fn(*args, **kw)
        return call

    monkeypatch.setattr(tasks, "parse_jobspec", spy("parse", tasks.parse_jobspec))
    for method in ("create_task", "get_task", "list_tasks", "list_attempts", "events",
                   "get_attempt", "queue", "cancel", "set_priority"):
        part = getattr(env.store, "attempts" if "attempt" in method else "tasks")
        monkeypatch.setattr(part, method, spy(method, getattr(part, method)))
    # /metrics counts tasks by state in the store while it renders
    monkeypatch.setattr(env.metrics, "render", spy("metrics", env.metrics.render))
    task_id = await submit(client, env)
    await get_json(client, f"/api/v2/tasks/{task_id}")
    await get_json(client, "/api/v2/tasks")
    await get_json(client, f"/api/v2/tasks/{task_id}/attempts")
    await get_json(client, f"/api/v2/tasks/{task_id}/events")
    await get_json(client, "/api/v2/queue")
    assert (await logs(client, task_id)).status == 404  # no attempt yet
    assert (await client.get("/metrics", headers=AUTH)).status == 200
    assert (await patch_priority(client, task_id, {"priority": 3}))[0] == 200
    assert (await cancel(client, task_id))[0] == 200
    loop_thread = threading.current_thread().name
    assert set(seen) == {"parse", "create_task", "get_task", "list_tasks", "list_attempts",
                         "events", "get_attempt", "queue", "cancel", "set_priority", "metrics"}
    assert loop_thread not in seen.values()
    writes = {"create_task", "cancel", "set_priority"}
    assert all(seen[m].startswith("argus-store-write") for m in writes), seen
    assert all(seen[m].startswith("argus-store-read") for m in
               {"get_task", "list_tasks", "list_attempts", "events", "get_attempt", "queue"})
    assert seen["parse"].startswith("argus-api-work")
    assert seen["metrics"].startswith("argus-api-work")


async def test_labels_are_shown_and_filtered_on(client, env):
    """A JobSpec's labels are in the task JSON; ``?label=key=value`` (repeatable: every
    one) filters the list in SQL, with the other filters; a malformed one is a 400."""
    nlp = await submit(client, env, labels="{team: nlp, 'argus.dev/run': a=1}")
    await submit(client, env, labels="{team: vision}")
    plain = await submit(client, env)
    assert (await get_json(client, f"/api/v2/tasks/{nlp}"))["labels"] == {
        "team": "nlp", "argus.dev/run": "a=1"}
    assert (await get_json(client, f"/api/v2/tasks/{plain}"))["labels"] == {}

    async def listed(*labels: str, **more: str) -> list[str]:
        resp = await client.get("/api/v2/tasks", headers=AUTH, params=[
            *(("label", label) for label in labels), *more.items()])
        assert resp.status == 200, await resp.text()
        return [t["task_id"] for t in (await resp.json())["tasks"]]

    assert await listed("team=nlp") == [nlp]
    assert await listed("team=nlp", "argus.dev/run=a=1") == [nlp]
    assert await listed("team=nlp", "argus.dev/run=b") == []
    assert await listed("team=nlp", "team=vision") == []
    assert await listed("team=nlp", state="CANCELED") == []
    assert await listed("team=nlp", state="QUEUED", user="me") == [nlp]
    assert len(await listed()) == 3
    for bad in ("team", "Team=nlp", "team=\x01", f"team={'x' * 64}"):
        resp = await client.get("/api/v2/tasks", headers=AUTH, params=[("label", bad)])
        body = await resp.json()
        assert resp.status == 400 and assert_error(body, "bad_request")["details"][0][
            "field"] == "label", bad


@pytest.mark.parametrize(("labels", "field"), [
    ("{Team: nlp}", "labels[Team]"),
    ("{team: [a]}", "labels[team]"),
    (f"{{team: {'x' * 64}}}", "labels[team]"),
    ("{" + ", ".join(f"k{i}: v" for i in range(17)) + "}", "labels"),
    ("nlp", "labels"),
])
async def test_bad_labels_are_400_naming_the_field(client, env, labels, field):
    resp = await client.post("/api/v2/tasks", data=jobspec(env.shared, labels=labels),
                             headers=YAML)
    err = assert_error(await resp.json(), "bad_request")
    assert resp.status == 400 and [d["field"] for d in err["details"]] == [field]


async def test_max_attempts_is_shown_and_held_to_the_configured_ceiling(aiohttp_client, env):
    env.settings = replace(env.settings, scheduler=replace(env.settings.scheduler,
                                                           max_attempts=3))
    client = await aiohttp_client(make_app(env))
    own = await submit(client, env, max_attempts=2)
    default = await submit(client, env)
    assert (await get_json(client, f"/api/v2/tasks/{own}"))["max_attempts"] == 2
    assert (await get_json(client, f"/api/v2/tasks/{default}"))["max_attempts"] is None
    resp = await client.post("/api/v2/tasks", data=jobspec(env.shared, max_attempts=4),
                             headers=YAML)
    err = assert_error(await resp.json(), "bad_request")
    assert resp.status == 400 and err["details"] == [{
        "field": "max_attempts",
        "message": "must be at most 3 (the configured max_attempts), got 4"}]


async def test_max_attempts_without_a_ceiling_is_bounded(client, env):
    assert env.settings.scheduler.max_attempts is None
    await submit(client, env, max_attempts=100)
    resp = await client.post("/api/v2/tasks", data=jobspec(env.shared, max_attempts=101),
                             headers=YAML)
    err = assert_error(await resp.json(), "bad_request")
    assert resp.status == 400 and [d["field"] for d in err["details"]] == ["max_attempts"]
