"""The web console over HTTP: sign-in and sessions, pages, cancel with CSRF, escaping,
hostile input. A real Store, the real Scheduler ticked by hand, FakeCluster; no sleeps."""

from __future__ import annotations

import asyncio
import json
import math
import re

import pytest
from ui_env import (
    AUTH,
    SCRIPT,
    T0,
    TOKEN,
    Loop,
    csrf_of,
    jobspec,
    page,
    sign_in,
    submit,
)
from yarl import URL

from service.domain.newtask import NewTask
from service.domain.nodes import NodeSource
from service.domain.reasons import Planned
from service.domain.states import TaskState
from service.domain.timefmt import iso
from service.domain.users import Role
from service.engine.artifacts import Artifacts
from service.web.app import create_app
from service.web.ui import pages


async def test_signed_out_visit_redirects_to_sign_in(client):
    resp = await client.get("/ui/queue?state=pending", allow_redirects=False)
    assert resp.status == 303
    location = URL(resp.headers["Location"])
    assert location.path == "/ui/signin" and location.query["next"] == "/ui/queue?state=pending"
    assert (await client.get("/ui/queue?fragment=1", allow_redirects=False)).status == 401
    assert (await client.get("/ui/live", allow_redirects=False)).status == 401


async def test_sign_in_sets_a_strict_http_only_cookie_and_never_echoes_the_token(client):
    resp = await client.post("/ui/signin", data={"token": TOKEN, "next": "/ui/cluster"},
                             allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/ui/cluster"
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
    assert TOKEN not in cookie
    html = await page(client, "/ui/queue")
    assert TOKEN not in html and "admin" in html


async def test_a_wrong_token_is_refused_and_next_cannot_leave_the_console(client):
    resp = await client.post("/ui/signin", data={"token": "nope", "next": "//evil.example/"},
                             allow_redirects=False)
    assert resp.status == 401
    html = await resp.text()
    assert "Sign-in refused: invalid token" in html
    assert 'value="/ui/queue"' in html  # the off-site target was replaced
    assert "Set-Cookie" not in resp.headers
    resp = await client.post("/ui/signin", data={"token": TOKEN},
                             headers={"Origin": "https://evil.example"}, allow_redirects=False)
    assert resp.status == 403 and "Set-Cookie" not in resp.headers


async def test_sign_out_ends_the_session(client):
    await sign_in(client)
    html = await page(client, "/ui/queue")
    resp = await client.post("/ui/signout", data={"csrf": "forged"}, allow_redirects=False)
    assert resp.status == 403
    resp = await client.post("/ui/signout", data={"csrf": csrf_of(html)},
                             allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/ui/signin"
    assert (await client.get("/ui/queue", allow_redirects=False)).status == 303


async def test_a_session_dies_with_its_token_and_its_user(client, env):
    env.store.users.create_user("alice", Role.USER, T0)
    alice = env.store.users.create_token("alice", "laptop", None, T0, max_live=5)
    await sign_in(client, alice.secret)
    await page(client, "/ui/queue")
    env.store.users.revoke_token("alice", alice.row.token_id, T0 + 1)
    assert (await client.get("/ui/queue", allow_redirects=False)).status == 303

    again = env.store.users.create_token("alice", "laptop", None, T0, max_live=5)
    await sign_in(client, again.secret)
    await page(client, "/ui/queue")
    env.store.users.set_user_enabled("alice", False, T0 + 2)
    assert (await client.get("/ui/queue", allow_redirects=False)).status == 303


# -- pages ---------------------------------------------------------------------------------


async def test_queue_page_shows_states_positions_and_reasons(client, env):
    env.cluster.add_node("n1", gpus=4)
    running = await submit(client, env, gpus=4)
    waiting = await submit(client, env, gpus=2)
    env.tick()
    never = await submit(client, env, gpus=8)
    env.tick()
    await sign_in(client)
    html = await page(client, "/ui/queue")
    assert f'id="row-{running}" data-state="SUBMITTED"' in html
    assert f'id="row-{waiting}" data-state="PENDING_RESOURCES"' in html
    assert f'id="row-{never}" data-state="PENDING_RESOURCES"' in html
    assert "needs 1x2 GPUs" in html and "can never fit this cluster" in html
    assert html.index(f"row-{waiting}") < html.index(f"row-{never}")  # admission order
    assert "holds 4 of 4 GPUs" in html or "not placed yet" in html
    fragment = await page(client, "/ui/queue?fragment=1&state=pending")
    assert "<html" not in fragment and f"row-{waiting}" in fragment
    assert f"row-{running}" not in fragment


async def test_labels_and_max_attempts_on_the_queue_and_task_pages(client, env):
    env.cluster.add_node("n1", gpus=4)
    running = await submit(client, env, gpus=4, extra="labels: {team: nlp}\nmax_attempts: 2\n")
    env.tick()
    waiting = await submit(client, env, gpus=2, extra="labels: {team: '<b>x</b>'}\n")
    await sign_in(client)
    html = await page(client, "/ui/queue")
    assert '<span class="label">team=nlp</span>' in html
    assert '<span class="label">team=&lt;b&gt;x&lt;/b&gt;</span>' in html  # escaped
    html = await page(client, f"/ui/tasks/{running}")
    assert 'id="task-labels"' in html and "team=nlp" in html
    assert 'id="task-max-attempts">2<' in html
    assert "task-max-attempts" not in await page(client, f"/ui/tasks/{waiting}")


async def test_queue_page_tags_and_filters_by_reason_kind(client, env):
    env.cluster.add_node("n1", gpus=4)
    running = await submit(client, env, gpus=4)
    waiting = await submit(client, env, gpus=2)
    env.tick()
    never = await submit(client, env, gpus=8)
    env.tick()
    await sign_in(client)
    html = await page(client, "/ui/queue")
    assert 'class="tag reason-resources"' in html and 'class="tag reason-never_fits"' in html
    assert "reason=never_fits" in html  # the tag links to its filter
    html = await page(client, "/ui/queue?reason=never_fits")
    assert f"row-{never}" in html and f"row-{waiting}" not in html
    assert f"row-{running}" not in html  # only waiting tasks have a reason
    assert '<option value="never_fits" selected>' in html
    html = await page(client, "/ui/queue?reason=bogus")  # ignored, as other bad filters
    assert f"row-{never}" in html and f"row-{waiting}" in html


async def test_queue_filters_live_in_the_url(client, env):
    env.store.users.create_user("bob", Role.USER, T0)
    bob = env.store.users.create_token("bob", "b", None, T0, max_live=5)
    mine = await submit(client, env)
    theirs = await submit(client, env, token=bob.secret)
    await sign_in(client)
    html = await page(client, "/ui/queue?user=me")
    assert f"row-{mine}" in html and f"row-{theirs}" not in html
    html = await page(client, "/ui/queue?user=bob&workload=ppo")
    assert f"row-{theirs}" in html and f"row-{mine}" not in html
    assert f"row-{mine}" not in await page(client, "/ui/queue?workload=sft")


async def test_an_override_with_script_renders_as_text(client, env):
    task_id = await submit(client, env, overrides=(f"+trainer.note={SCRIPT}",))
    await sign_in(client)
    html = await page(client, f"/ui/tasks/{task_id}")
    assert SCRIPT not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    resp = await client.get(f"/ui/tasks/{task_id}")
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]


async def test_cancel_needs_the_form_token_and_ends_the_task(client, env):
    task_id = await submit(client, env)
    await sign_in(client)
    task_html = await page(client, f"/ui/tasks/{task_id}")
    assert f'href="/ui/tasks/{task_id}/cancel"' in task_html
    confirm = await page(client, f"/ui/tasks/{task_id}/cancel")
    resp = await client.post(f"/ui/tasks/{task_id}/cancel", data={"csrf": "x"},
                             allow_redirects=False)
    assert resp.status == 403
    resp = await client.post(f"/ui/tasks/{task_id}/cancel", data={"csrf": csrf_of(confirm)},
                             headers={"Origin": "http://evil.example"}, allow_redirects=False)
    assert resp.status == 403
    assert env.store.tasks.get_task(task_id).state is TaskState.QUEUED
    resp = await client.post(f"/ui/tasks/{task_id}/cancel", data={"csrf": csrf_of(confirm)},
                             allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == f"/ui/tasks/{task_id}"
    assert env.store.tasks.get_task(task_id).state is TaskState.CANCELED
    assert 'id="task-state">CANCELED' in await page(client, f"/ui/tasks/{task_id}")


async def test_only_the_owner_or_an_admin_may_cancel(client, env):
    env.store.users.create_user("carol", Role.USER, T0)
    carol = env.store.users.create_token("carol", "c", None, T0, max_live=5)
    task_id = await submit(client, env)  # the admin's
    await sign_in(client, carol.secret)
    html = await page(client, f"/ui/tasks/{task_id}")
    assert 'id="cancel"' not in html and "Logs are shown to the task's owner" in html
    confirm = await page(client, f"/ui/tasks/{task_id}/cancel")
    assert "Only its owner (admin) or an admin may cancel it." in confirm
    resp = await client.post(f"/ui/tasks/{task_id}/cancel", data={"csrf": csrf_of(html)},
                             allow_redirects=False)
    assert resp.status == 403
    assert env.store.tasks.get_task(task_id).state is TaskState.QUEUED
    assert (await client.get(f"/ui/tasks/{task_id}/log")).status == 403


# -- priorities -------------------------------------------------------------------------------


def pending_rows(html: str) -> list[tuple[str, str]]:
    """(task id, priority cell) of each row of the pending table, in page order."""
    table = html.split('<table id="pending">', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr id="row-([^"]+)".*?<td>\d+&times;\d+ GPU</td>\s*<td>(-?\d+)</td>',
                      table, flags=re.S)


async def test_task_page_shows_the_description_as_text(client, env):
    task_id = await submit(client, env, description="sweep <b>3</b>")
    await sign_in(client)
    html = await page(client, f"/ui/tasks/{task_id}")
    assert '<dd id="task-description">sweep &lt;b&gt;3&lt;/b&gt;</dd>' in html
    assert 'id="task-description"' not in await page(
        client, f"/ui/tasks/{await submit(client, env)}")


async def test_queue_and_task_pages_show_the_priority(client, env):
    first = await submit(client, env)
    second = await submit(client, env)
    resp = await client.patch(f"/api/v2/tasks/{second}", json={"priority": 40}, headers=AUTH)
    assert resp.status == 200
    await sign_in(client)
    html = await page(client, "/ui/queue")
    assert "<th>Priority</th>" in html
    assert pending_rows(html) == [(second, "40"), (first, "0")]  # admission order
    assert pending_rows(await page(client, "/ui/queue?fragment=1")) == [(second, "40"),
                                                                         (first, "0")]
    task_html = await page(client, f"/ui/tasks/{second}")
    assert re.search(r'id="task-priority">40 <a id="change-priority" '
                     rf'href="/ui/tasks/{second}/priority">', task_html)


async def test_priority_form_needs_the_form_token_and_changes_the_task(client, env):
    task_id = await submit(client, env)
    await sign_in(client)
    form = await page(client, f"/ui/tasks/{task_id}/priority")
    assert 'min="-1000" max="1000"' in form  # an admin's range
    path = f"/ui/tasks/{task_id}/priority"
    for data, headers in (({"csrf": "x", "priority": "9"}, {}),
                          ({"csrf": csrf_of(form), "priority": "9"},
                           {"Origin": "http://evil.example"})):
        resp = await client.post(path, data=data, headers=headers, allow_redirects=False)
        assert resp.status == 403
    assert env.store.tasks.get_task(task_id).priority == 0
    resp = await client.post(path, data={"csrf": csrf_of(form), "priority": " 900 "},
                             allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == f"/ui/tasks/{task_id}"
    assert env.store.tasks.get_task(task_id).priority == 900
    event = env.store.tasks.events(task_id)[-1]
    assert (event.event_type, event.payload) == ("PRIORITY_CHANGED",
                                                  {"from": 0, "to": 900, "by": "admin"})
    assert 'id="task-priority">900' in await page(client, f"/ui/tasks/{task_id}")


@pytest.mark.parametrize(("raw", "status", "needle"), [
    ("5", 403, "Refused: priority 5 is above what users may ask for (0)"),
    ("1001", 400, "The priority must be from -1000 to 1000, got 1001."),
    ("high", 400, "The priority must be an integer from -1000 to 1000."),
    ("1.5", 400, "must be an integer"),
    ("", 400, "must be an integer"),
    ("9" * 40, 400, "must be an integer"),
])
async def test_priority_form_refuses_what_the_api_refuses(client, env, raw, status, needle):
    env.store.users.create_user("alice", Role.USER, T0)
    alice = env.store.users.create_token("alice", "a", None, T0, max_live=5)
    task_id = await submit(client, env, token=alice.secret)
    await sign_in(client, alice.secret)
    form = await page(client, f"/ui/tasks/{task_id}/priority")
    assert 'min="-1000" max="0"' in form  # what a user may ask for
    resp = await client.post(f"/ui/tasks/{task_id}/priority",
                             data={"csrf": csrf_of(form), "priority": raw},
                             allow_redirects=False)
    html = await resp.text()
    assert resp.status == status and needle in html and 'id="priority-error"' in html
    assert env.store.tasks.get_task(task_id).priority == 0
    resp = await client.post(f"/ui/tasks/{task_id}/priority",
                             data={"csrf": csrf_of(form), "priority": "-4"},
                             allow_redirects=False)
    assert resp.status == 303 and env.store.tasks.get_task(task_id).priority == -4


async def test_priority_only_for_the_owner_or_an_admin_and_while_waiting(client, env):
    env.cluster.add_node("n1", gpus=4)
    env.store.users.create_user("carol", Role.USER, T0)
    carol = env.store.users.create_token("carol", "c", None, T0, max_live=5)
    task_id = await submit(client, env)  # the admin's
    await sign_in(client, carol.secret)
    assert 'id="change-priority"' not in await page(client, f"/ui/tasks/{task_id}")
    form = await page(client, f"/ui/tasks/{task_id}/priority")
    assert "Only its owner (admin) or an admin may change its priority." in form
    queue = await page(client, "/ui/queue")
    resp = await client.post(f"/ui/tasks/{task_id}/priority",
                             data={"csrf": csrf_of(queue), "priority": "-1"},
                             allow_redirects=False)
    assert resp.status == 403 and env.store.tasks.get_task(task_id).priority == 0
    await sign_in(client)  # the admin, once the task is on the cluster
    form = await page(client, f"/ui/tasks/{task_id}/priority")
    env.tick()
    assert 'id="change-priority"' not in await page(client, f"/ui/tasks/{task_id}")
    resp = await client.post(f"/ui/tasks/{task_id}/priority",
                             data={"csrf": csrf_of(form), "priority": "3"},
                             allow_redirects=False)
    assert resp.status == 409 and "only a waiting task" in await resp.text()
    assert env.store.tasks.get_task(task_id).priority == 0
    assert "There is no task nope" in await page(client, "/ui/tasks/nope/priority", 404)


async def test_task_page_shows_attempts_events_and_the_log(client, env):
    env.cluster.add_node("n1", gpus=4)
    task_id = await submit(client, env)
    env.tick()
    sid = f"{task_id}--a01"
    env.cluster.start(sid, {"n1": 2})
    env.cluster.write_log(sid, "\x1b[1m\x1b[32mhttp://dash\x1b[39m\x1b[22m\nstep 1 loss=0.5\n")
    env.tick()
    await sign_in(client)
    html = await page(client, f"/ui/tasks/{task_id}")
    assert sid in html and "CREATED" in html and "workload: ppo" in html
    assert 'id="task-limit"' not in html  # no limit, no line
    # where the attempt runs: its gang's node by name, in the summary and the attempts
    nodes = re.search(r'id="task-nodes">(.*?)</dd>', html, re.S)
    assert nodes and 'data-role="gang">n1</span> <span class="muted">(gang, 2 GPU)' in \
        nodes.group(1), html
    assert html.count('data-role="gang">n1<') == 2
    limited = await submit(client, env, max_runtime_s=5400)
    assert 'id="task-limit">1h 30m per attempt' in await page(client, f"/ui/tasks/{limited}")
    log = await page(client, f"/ui/tasks/{task_id}/log")
    assert "step 1 loss=0.5" in log and "http://dash\n" in log and "\x1b" not in log
    assert "missing" in await page(client, "/ui/tasks/missing", status=404)


async def test_cluster_page_and_charts_read_the_last_tick(client, env):
    env.cluster.add_node("n1", gpus=4, cpus=16)
    await sign_in(client)
    assert "no scheduler tick yet" in await page(client, "/ui/cluster")
    task_id = await submit(client, env)
    env.tick()
    html = await page(client, "/ui/cluster")
    assert "reachable" in html and "n1" in html and "/ 4" in html
    assert task_id in html
    env.store.nodes.cordon("n1", NodeSource.OPERATOR, "admin", env.clock.now, "bad <fan>")
    html = await page(client, "/ui/cluster")  # nodes by name, with their cordon
    assert "cordoned</span> by admin" in html
    assert '<span class="node-reason">bad &lt;fan&gt;</span>' in html
    env.store.nodes.drain("n1", "admin", env.clock.now, "new fan", requeue=True)
    html = await page(client, "/ui/cluster")
    assert "drained (requeue)</span>" in html and "new fan" in html
    env.tick(120)
    charts = await page(client, "/ui/charts")
    assert charts.count("<svg") >= 4 and "<polyline" in charts


async def test_hostile_input_never_5xx(client, env):
    await sign_in(client)
    paths = ["/ui/queue?page=-1&state=%00&user=%ff%fe&workload=" + "x" * 5000,
             "/ui/queue?page=99999999999999999999&user=ROOT",
             "/ui/tasks/" + "%3Cscript%3E", "/ui/tasks/a%00b", "/ui/tasks/x/log",
             "/ui/signin?next=javascript:alert(1)", "/ui/static/..%2f..%2fetc%2fpasswd",
             "/ui/static/nope.js"]
    for path in paths:
        resp = await client.get(path, allow_redirects=False)
        assert resp.status < 500, path
    for data in (b"\xff\xfe=\xff", b"csrf=" + b"a" * 20000, b"token=%ff"):
        for path in ("/ui/signin", "/ui/signout", "/ui/tasks/x/cancel", "/ui/tasks/x/priority"):
            resp = await client.post(path, data=data, allow_redirects=False, headers={
                "Content-Type": "application/x-www-form-urlencoded"})
            assert resp.status < 500, path


async def test_cluster_page_shows_head_json_generation_and_age(aiohttp_client, env, tmp_path):
    from dataclasses import replace

    head = tmp_path / "head.json"
    record = {"head_ip": "10.0.0.9", "gcs_port": 6379, "job_server_url": "http://10.0.0.9:8265",
              "generation": "gen-<b>7</b>", "seq": 42, "written_at": T0 - 95, "ttl_s": 60}
    head.write_text(json.dumps(record))
    settings = replace(env.settings, head_json=str(head))
    app = create_app(settings, env.store, env.cluster, Artifacts(str(env.shared)),
                     token=TOKEN, scheduler_loop=Loop(), clock=env.clock, metrics=env.metrics)
    client = await aiohttp_client(app)
    await sign_in(client)
    html = await page(client, "/ui/cluster")
    assert "gen-&lt;b&gt;7&lt;/b&gt;" in html and "seq 42" in html
    assert "written 1m 35s ago" in html and "stale" in html
    head.write_text("{broken")
    assert "unreadable" in await page(client, "/ui/cluster")


async def test_live_stream_says_change_and_ends_when_the_session_does(client, env,
                                                                       monkeypatch):
    from service.web.ui import live
    from service.web.ui.pages import FEED

    client.app[FEED].poll_s = 0.01
    monkeypatch.setattr(live, "RECHECK_S", 0.01)
    env.store.users.create_user("dave", Role.USER, T0)
    dave = env.store.users.create_token("dave", "d", None, T0, max_live=5)
    await sign_in(client, dave.secret)
    resp = await client.get("/ui/live")
    assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
    assert await resp.content.readline() == b"retry: 2000\n"
    await submit(client, env)
    seen = b""
    async with asyncio.timeout(10):
        while b"event: change" not in seen:
            seen += await resp.content.readline()
    env.store.users.revoke_token("dave", dave.row.token_id, T0)  # the stream ends with the token
    async with asyncio.timeout(10):
        rest = await resp.content.read()
    assert b"event: signedout" in rest


async def test_a_stream_without_a_marker_reads_where_it_starts_before_it_opens(
        client, env, monkeypatch):
    """Without ``?since=``, the stream's starting point is read before its headers go
    out: read after them, a task a client submits once it has seen the stream open could
    be already counted in that point and never announced (seen on PostgreSQL, whose read
    takes a thread's turn)."""
    from aiohttp import web

    from service.web.ui.pages import FEED

    feed = client.app[FEED]
    order: list[str] = []
    read = feed._read

    async def reading() -> int:
        order.append("read")
        return await read()

    prepare = web.StreamResponse.prepare

    async def preparing(self, request):
        order.append("headers")
        return await prepare(self, request)

    monkeypatch.setattr(feed, "_read", reading)
    monkeypatch.setattr(web.StreamResponse, "prepare", preparing)
    await sign_in(client)
    order.clear()
    resp = await client.get("/ui/live")
    assert await resp.content.readline() == b"retry: 2000\n"
    assert order[:2] == ["read", "headers"], order
    resp.close()


async def test_a_change_before_the_stream_started_is_sent_at_once(client, env):
    """The page carries the marker it was rendered at; a task that moved between the
    render and the stream's start is announced as soon as the stream opens."""
    import re

    from service.web.ui.pages import FEED, parse_marker

    client.app[FEED].poll_s = 0.01
    await sign_in(client)
    html = await page(client, "/ui/queue")
    since = re.search(r'data-since="([^"]+)"', html).group(1)
    assert parse_marker(since) == env.store.change_seq()
    assert parse_marker("7") == 7
    for junk in ("junk", "", "-1", "1.5", "\u0661", "9" * 20):
        assert parse_marker(junk) is None
    await submit(client, env)  # after the render, before the stream
    resp = await client.get("/ui/live", params={"since": since})
    seen = b""
    async with asyncio.timeout(10):
        while b"event: change" not in seen:
            seen += await resp.content.readline()
    resp.close()


async def test_recently_finished_is_found_behind_a_long_queue(client, env):
    from service.store.writer import BulkTask

    done = "mvp2-admin-ppo-20251223-000000-0001"
    env.store.tasks.bulk_load([BulkTask(task_id=done, workload="ppo", state=TaskState.FAILED,
                                        created_at=T0 - 10, user="admin")])
    env.store.tasks.bulk_load(BulkTask(task_id=f"mvp2-admin-ppo-20251223-000001-{i:04x}",
                                       workload="ppo", state=TaskState.QUEUED, created_at=T0,
                                       user="admin") for i in range(300))
    await sign_in(client)
    html = await page(client, "/ui/queue?state=finished")
    assert f'id="row-{done}" data-state="FAILED"' in html
    assert f'id="row-{done}"' in await page(client, "/ui/queue?user=me")



async def test_live_streams_are_limited_per_session_and_per_user(env, aiohttp_client):
    """Past a limit the stream is answered 429 naming it (the page then refreshes on
    its timer); a closed stream frees its slot."""
    from dataclasses import replace

    settings = replace(env.settings, ui_max_streams_per_session=2, ui_max_streams_per_user=3)
    client = await aiohttp_client(create_app(
        settings, env.store, env.cluster, Artifacts(str(env.shared)), token=TOKEN,
        scheduler_loop=Loop(), clock=env.clock, metrics=env.metrics, wake_interval_s=0.0))

    async def open_stream():
        resp = await client.get("/ui/live")
        if resp.status == 200:
            assert await resp.content.readline() == b"retry: 2000\n"
        return resp

    await sign_in(client)
    first = [await open_stream() for _ in range(2)]
    looked_up = []
    get_session = env.store.users.get_session
    env.store.users.get_session = lambda key: looked_up.append(key) or get_session(key)
    refused = await open_stream()
    assert refused.status == 429 and refused.headers["Retry-After"] == "30"
    assert "max_streams_per_session" in await refused.text()
    assert looked_up == [], "a full session is refused before the store is read"
    del env.store.users.get_session
    await sign_in(client)  # a second session of the same user
    third = await open_stream()
    assert third.status == 200
    refused = await open_stream()
    assert refused.status == 429 and "max_streams_per_user" in await refused.text()
    third.close()
    async with asyncio.timeout(10):  # the server sees the close when it next writes;
        while True:  # poll until the slot is free (a heartbeat or a change ends it)
            env.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={},
                                                nnodes=1, n_gpus_per_node=1, user="admin",
                                                created_at=env.clock.now, priority=0),
                                        task_id=f"t-{env.clock.now}")
            env.clock.now += 1
            await client.app[pages.FEED].refresh()
            again = await open_stream()
            if again.status == 200:
                break
            await asyncio.sleep(0.01)
    for resp in (*first, again):
        resp.close()


async def test_sign_in_guessing_backs_off_with_429_and_does_not_check_tokens(client, env):
    from service.policy import failure_guard as signin_guard

    wrong = {"token": "argus_0123456789ab_" + "x" * 43, "next": "/ui/queue"}
    for _ in range(signin_guard.SIGN_IN.free_failures + 1):
        resp = await client.post("/ui/signin", data=wrong, allow_redirects=False)
        assert resp.status == 401
    resp = await client.post("/ui/signin", data={"token": TOKEN, "next": "/ui/queue"},
                             allow_redirects=False)  # even a right token waits its turn
    assert resp.status == 429 and resp.headers["Retry-After"] == "1"
    assert "Too many failed sign-ins" in await resp.text()
    env.clock.now += 1.0
    await sign_in(client)  # the wait is over; success clears the count
    resp = await client.post("/ui/signin", data=wrong, allow_redirects=False)
    assert resp.status == 401


async def test_a_user_keeps_a_bounded_number_of_sessions_and_secure_cookies_on_request(
        env, aiohttp_client):
    from dataclasses import replace

    settings = replace(env.settings, ui_max_sessions_per_user=2, ui_secure_cookie=True)
    client = await aiohttp_client(create_app(
        settings, env.store, env.cluster, Artifacts(str(env.shared)), token=TOKEN,
        scheduler_loop=Loop(), clock=env.clock, metrics=env.metrics, wake_interval_s=0.0))
    cookies = []
    for _ in range(3):
        env.clock.now += 1
        resp = await client.post("/ui/signin", data={"token": TOKEN, "next": "/ui/queue"},
                                 allow_redirects=False)
        assert resp.status == 303
        assert "Secure" in resp.headers["Set-Cookie"]
        cookies.append(resp.cookies["argus_session"].value)
    live = env.store.reads.reader().execute("SELECT count(*) FROM ui_sessions").fetchone()[0]
    assert live == 2
    for cookie, valid in zip(cookies, (False, True, True), strict=True):
        client.session.cookie_jar.clear()
        resp = await client.get("/ui/queue", cookies={"argus_session": cookie},
                                allow_redirects=False)
        assert (resp.status == 200) is valid


async def test_the_jobspec_body_is_shown_to_its_owner_and_admins_only(client, env):
    """A JobSpec as written may hold a secret in a comment: another user sees the task's
    shape (workload, gang, priority), not the text."""
    env.store.users.create_user("carol", Role.USER, T0)
    carol = env.store.users.create_token("carol", "c", None, T0, max_live=5)
    secret = "WANDB_API_KEY-0f0f0f0f"
    text = f"# {secret}\n" + jobspec(env.shared)
    resp = await client.post("/api/v2/tasks", data=text, headers={
        **AUTH, "Content-Type": "application/yaml"})
    task_id = (await resp.json())["task_id"]
    await sign_in(client)  # the owner (the admin)
    assert secret in await page(client, f"/ui/tasks/{task_id}")
    await sign_in(client, carol.secret)
    html = await page(client, f"/ui/tasks/{task_id}")
    assert secret not in html and 'id="jobspec"' not in html
    assert "The JobSpec is shown to the task's owner (admin) and admins." in html
    assert "ppo" in html and task_id in html  # the shape is there


async def test_queue_and_task_pages_show_the_plans_estimated_start(client, env):
    env.cluster.add_node("n1", gpus=4)
    await submit(client, env, gpus=4)
    planned = await submit(client, env, gpus=4)
    unplanned = await submit(client, env, gpus=2)
    env.tick()
    now = env.clock()
    snapshot = env.cluster.snapshot([])
    bound = now + 3600 + 20
    env.metrics.observed.record(now, snapshot, estimates={planned: Planned(bound)})
    await sign_in(client)
    by = "by " + iso(math.ceil(bound / 60) * 60)  # to the minute, never before the bound
    html = await page(client, "/ui/queue")
    row = html[html.index(f'id="row-{planned}"'):]
    assert by in row[:row.index("</tr>")] and "from time limits" in row[:row.index("</tr>")]
    row = html[html.index(f'id="row-{unplanned}"'):]
    cell = row[row.index('class="est-start"'):row.index("</tr>")]
    assert "by " not in cell and "-" in cell and "unknown" in cell
    html = await page(client, f"/ui/tasks/{planned}")
    assert 'id="task-estimate"' in html and by in html
    html = await page(client, f"/ui/tasks/{unplanned}")
    shown = html[html.index('id="task-estimate"'):]
    assert "by " not in shown[:shown.index("</dd>")]
    # from run history: about, to the nearest minute, the bound in its title
    env.metrics.observed.record(now, snapshot, estimates={planned: Planned(bound, now + 1790)})
    html = await page(client, f"/ui/tasks/{planned}")
    shown = html[html.index('id="task-estimate"'):]
    shown = shown[:shown.index("</dd>")]
    assert "about " + iso(round((now + 1790) / 60) * 60) in shown
    assert "from run history" in shown and by.removeprefix("by ") in shown
