"""Progress in the task JSON and the queue, and the curves endpoint (real store, FakeCluster,
the real log follower; injected clock, no sleeps)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

# The fixtures "client" and "env" of the API tests, shared by importing them (pytest
# finds a fixture by its name in the module; the test parameters then shadow the imports).
from api_env import assert_error, get_json, submit

from service.domain.states import RayStatus
from service.engine.progress_follower import LogFollower


def follower(env: Any) -> LogFollower:
    return LogFollower(env.store, env.cluster, env.artifacts, max_points=100,
                       max_read_chars=1 << 16)


async def running_task(client, env, **fields: Any) -> str:
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env, **fields)
    env.tick()
    env.cluster.start(env.sid(task_id), {"n1": 2})
    env.tick()
    return task_id


def check(doc: dict[str, Any], instance: Any, name: str) -> None:
    jsonschema.validate(instance, {"$ref": f"#/components/schemas/{name}",
                                   "components": doc["components"]})


async def test_task_and_queue_show_progress_rate_and_eta(client, env):
    task_id = await running_task(client, env, total_training_steps=20)
    view = await get_json(client, f"/api/v2/tasks/{task_id}")
    assert view["progress"] is None  # nothing read yet
    follow = follower(env)
    env.cluster.write_log(env.sid(task_id), "step:1 - train/loss:2.0\n")
    follow.poll(env.clock.now)
    env.clock.now += 10
    env.cluster.write_log(env.sid(task_id), "step:6 - train/loss:1.0\n")
    follow.poll(env.clock.now)
    env.clock.now += 4  # the ETA counts down from the last read
    view = await get_json(client, f"/api/v2/tasks/{task_id}")
    assert view["progress"] == {
        "attempt_no": 1, "step": 6, "total_steps": 20, "fraction": 0.3, "resumed_from": None,
        "rate_steps_per_s": 0.5, "eta_s": 24.0,
        "eta_at": view["progress"]["eta_at"], "last_step_at": view["progress"]["last_step_at"],
    }
    queue = await get_json(client, "/api/v2/queue")
    assert [t["progress"]["step"] for t in queue["running"]] == [6]
    doc = await get_json(client, "/api/v2/openapi.json")
    check(doc, view, "Task")
    check(doc, queue, "Queue")

    env.cluster.finish(env.sid(task_id), RayStatus.SUCCEEDED, log="step:20 - train/loss:0.1\n")
    env.tick()
    follow.poll(env.clock.now)
    done = (await get_json(client, f"/api/v2/tasks/{task_id}"))["progress"]
    assert (done["step"], done["fraction"], done["rate_steps_per_s"], done["eta_s"]) == (
        20, 1.0, None, None)


async def test_curves_default_to_loss_and_reward_on_one_step_axis(client, env):
    task_id = await running_task(client, env)
    env.cluster.write_log(env.sid(task_id), "".join(
        f"step:{s} - actor/pg_loss:{1 / s} - critic/score/mean:{s / 10} - perf/mfu:0.3\n"
        for s in range(1, 6)))
    follower(env).poll(env.clock.now)
    body = await get_json(client, f"/api/v2/tasks/{task_id}/metrics")
    assert body["keys"] == ["actor/pg_loss", "critic/score/mean", "perf/mfu"]
    assert [s["key"] for s in body["series"]] == ["actor/pg_loss", "critic/score/mean"]
    score = body["series"][1]
    assert (score["steps"], score["values"], score["attempts"]) == (
        [1, 2, 3, 4, 5], [0.1, 0.2, 0.3, 0.4, 0.5], [1] * 5)
    picked = await get_json(client, f"/api/v2/tasks/{task_id}/metrics", keys="perf/mfu")
    assert [s["key"] for s in picked["series"]] == ["perf/mfu"]
    check(await get_json(client, "/api/v2/openapi.json"), body, "Curves")


@pytest.mark.parametrize(("keys", "message"), [
    ("nope", "no such metric in this task: nope"),
    (",".join(f"k{i}" for i in range(17)), "at most 16 keys"),
    ("x" * 5000, "at most 4096 characters"),
])
async def test_curves_refuse_bad_keys_clearly(client, env, keys, message):
    task_id = await running_task(client, env)
    body = await get_json(client, f"/api/v2/tasks/{task_id}/metrics", status=400, keys=keys)
    err = assert_error(body, "bad_request")
    assert err["details"][0]["field"] == "keys" and message in err["details"][0]["message"]


async def test_curves_of_an_unknown_task_are_404_and_of_a_quiet_one_empty(client, env):
    body = await get_json(client, "/api/v2/tasks/mvp2-ppo-20250101-000000-dead/metrics",
                          status=404)
    assert_error(body, "not_found")
    task_id = await submit(client, env)
    assert await get_json(client, f"/api/v2/tasks/{task_id}/metrics") == {
        "task_id": task_id, "keys": [], "series": []}
