"""The console's progress bars and curves (real store, FakeCluster, the real log follower;
injected clock, no sleeps)."""

from __future__ import annotations

import re
import time

# The fixtures "client" and "env" of the console tests, shared by importing them (pytest
# finds a fixture by its name in the module; the test parameters then shadow the imports).
from ui_env import SCRIPT, page, sign_in, submit

from service.engine.artifacts import Artifacts
from service.engine.progress_follower import LogFollower
from service.web.ui.charts import curve_chart


async def running(client, env) -> tuple[str, str]:
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    sid = f"{task_id}--a01"
    env.cluster.start(sid, {"n1": 2})
    env.tick()
    return task_id, sid


def follow(env, now: float) -> None:
    LogFollower(env.store, env.cluster, Artifacts(str(env.shared)), max_points=500,
                max_read_chars=1 << 20).poll(now)


async def test_queue_and_task_pages_show_progress_and_curves(client, env):
    task_id, sid = await running(client, env)
    await sign_in(client)
    assert '<td class="progress"></td>' in await page(client, "/ui/queue")  # no step yet
    before = env.store.change_seq()
    env.cluster.write_log(sid, "Total training steps: 10\n" + "".join(
        f"step:{s} - actor/pg_loss:{1 / s:.3f} - critic/score/mean:{s / 10} - "
        f"perf/mfu:0.3\n" for s in range(1, 4)))
    env.clock.now += 1
    follow(env, env.clock.now)
    assert env.store.change_seq() != before  # open pages refresh as the run steps
    env.cluster.write_log(sid, "step:5 - actor/pg_loss:0.2 - critic/score/mean:0.5\n")
    env.clock.now += 10
    follow(env, env.clock.now)
    queue = await page(client, "/ui/queue")
    assert '<progress value="0.5" max="1">50%</progress>' in queue
    assert "step 5/10 (50%)  5 s/step  ETA 25s" in queue
    html = await page(client, f"/ui/tasks/{task_id}")
    assert 'id="task-progress"' in html
    keys = re.findall(r'<figure class="curve" data-key="([^"]+)"', html)
    assert keys == ["actor/pg_loss", "critic/score/mean"]  # a loss and a reward by default
    assert html.count('<polyline class="series"') == 2
    assert '<option value="perf/mfu">' in html
    picked = await page(client, f"/ui/tasks/{task_id}?keys=perf/mfu&keys=nope")
    assert re.findall(r'data-key="([^"]+)"', picked) == ["perf/mfu"]
    fragment = await page(client, f"/ui/tasks/{task_id}?fragment=1&keys=perf/mfu")
    assert 'data-key="perf/mfu"' in fragment and "<html" not in fragment


async def test_curves_are_for_the_owner_and_admins_only(client, env):
    task_id, sid = await running(client, env)
    env.cluster.write_log(sid, "step:1 - train/loss:2\n")
    follow(env, env.clock.now)
    resp = await client.post("/api/v2/users", json={"name": "bob", "role": "user"},
                             headers={"Authorization": "Bearer t0ken-for-ui-tests"})
    assert resp.status == 201, await resp.text()
    resp = await client.post("/api/v2/users/bob/tokens", json={"label": "t"},
                             headers={"Authorization": "Bearer t0ken-for-ui-tests"})
    await sign_in(client, (await resp.json())["token"])
    html = await page(client, f"/ui/tasks/{task_id}")
    assert 'id="task-progress"' in html and 'id="curves"' not in html


def test_curve_chart_escapes_and_reduces_a_long_curve_to_the_pixels() -> None:
    points = [(s, (s % 7) * 0.1, 1 if s < 5000 else 2) for s in range(1, 10_001)]
    started = time.perf_counter()
    svg = str(curve_chart(points, title=SCRIPT))
    assert time.perf_counter() - started < 1.0  # generous: the bench measures it
    assert SCRIPT not in svg and "&lt;script&gt;" in svg
    vertices = svg.split('points="')[1].split('"')[0].split()
    assert 600 <= len(vertices) <= 4 * 720  # at most 4 a pixel column, not 10k
    assert '<line class="attempt"' in svg and ">a2</text>" in svg
    assert "no points yet" in str(curve_chart([], title="x"))
    one = str(curve_chart([(3, 1.5, 1)], title="x"))
    assert '<circle class="series"' in one
