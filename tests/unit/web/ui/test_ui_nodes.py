"""The console's node buttons (issue 55): an admin cordons, drains and resumes a node from
the cluster page through the use case; the form token and origin are checked; a non-admin
sees no buttons and is refused; a refusal writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from ui_env import T0, csrf_of, page, sign_in

from service.domain.nodes import NodeSource, NodeStateKind
from service.domain.users import Role
from service.web.ui import nodes_view


@pytest.fixture
def ticked(env):
    env.cluster.add_node("id-07", gpus=8, cpus=32, name="gpu-07")
    env.tick()
    return env


async def _post(client, path: str, **data: Any):
    return await client.post(path, data=data, allow_redirects=False)


async def test_an_admin_cordons_then_resumes_from_the_cluster_page(client, ticked):
    env = ticked
    await sign_in(client)
    html = await page(client, "/ui/cluster")
    assert 'href="/ui/nodes/gpu-07/cordon"' in html and 'href="/ui/nodes/gpu-07/drain"' in html
    assert 'href="/ui/nodes/gpu-07/resume"' not in html  # nothing to resume
    form = await page(client, "/ui/nodes/gpu-07/cordon")
    assert 'id="node-reason"' in form and 'id="node-requeue"' not in form
    resp = await _post(client, "/ui/nodes/gpu-07/cordon", csrf=csrf_of(form),
                       reason="bad <fan>")
    assert resp.status == 303 and resp.headers["Location"] == "/ui/cluster"
    row = env.store.nodes.state("gpu-07")
    assert (row.state, row.source, row.by, row.reason) == (
        NodeStateKind.CORDONED, NodeSource.OPERATOR, "admin", "bad <fan>")
    html = await page(client, "/ui/cluster")  # who, when, why
    assert "cordoned</span> by admin" in html and "bad &lt;fan&gt;" in html
    assert 'href="/ui/nodes/gpu-07/resume"' in html and 'href="/ui/nodes/gpu-07/cordon"' not in html
    form = await page(client, "/ui/nodes/gpu-07/resume")
    assert "NODE_CORDONED" in form  # its recent events
    resp = await _post(client, "/ui/nodes/gpu-07/resume", csrf=csrf_of(form), reason="")
    assert resp.status == 303
    assert env.store.nodes.state("gpu-07") is None
    assert [e.kind.value for e in env.store.nodes.events("gpu-07")] == [
        "NODE_CORDONED", "NODE_RESUMED"]


async def test_drain_and_its_requeue_box(client, ticked, monkeypatch):
    env = ticked
    await sign_in(client)
    form = await page(client, "/ui/nodes/gpu-07/drain")
    assert 'id="node-requeue"' in form
    resp = await _post(client, "/ui/nodes/gpu-07/drain", csrf=csrf_of(form), reason="swap GPU 3")
    assert resp.status == 303
    assert env.store.nodes.state("gpu-07").state is NodeStateKind.DRAINED
    assert env.store.nodes.state("gpu-07").requeue is False
    resp = await _post(client, "/ui/nodes/gpu-07/drain", csrf=csrf_of(form), reason="now",
                       requeue="on")  # a drain without requeue drained again with it
    assert resp.status == 303, await resp.text()
    assert env.store.nodes.state("gpu-07").requeue is True
    assert "drained (requeue)</span>" in await page(client, "/ui/cluster")
    sent: list[dict[str, Any]] = []

    async def change(deps, who, name, action, doc, ray_nodes):
        sent.append({"name": name, "action": action, **doc})

    monkeypatch.setattr(nodes_view.node_cases, "change", change)
    for box in ({}, {"requeue": "on"}):
        resp = await _post(client, "/ui/nodes/gpu-07/drain", csrf=csrf_of(form),
                           reason=" r ", **box)
        assert resp.status == 303
    await _post(client, "/ui/nodes/gpu-07/cordon", csrf=csrf_of(form), reason="c",
                requeue="on")  # only a drain re-queues
    assert sent == [{"name": "gpu-07", "action": "drain", "reason": "r"},
                    {"name": "gpu-07", "action": "drain", "reason": "r", "requeue": True},
                    {"name": "gpu-07", "action": "cordon", "reason": "c"}]


async def test_refusals_write_nothing(client, ticked):
    env = ticked
    await sign_in(client)
    form = await page(client, "/ui/nodes/gpu-07/cordon")
    token = csrf_of(form)
    resp = await _post(client, "/ui/nodes/gpu-07/cordon", csrf="forged", reason="x")
    assert resp.status == 403
    resp = await client.post("/ui/nodes/gpu-07/cordon", data={"csrf": token, "reason": "x"},
                             headers={"Origin": "http://evil.example"}, allow_redirects=False)
    assert resp.status == 403
    resp = await _post(client, "/ui/nodes/gpu-07/cordon", csrf=token, reason="  ")
    assert resp.status == 400 and "a reason is required" in await resp.text()
    resp = await _post(client, "/ui/nodes/gpu-07/cordon", csrf=token, reason="x" * 201)
    assert resp.status == 400 and "at most 200" in await resp.text()
    resp = await _post(client, "/ui/nodes/gpu-07/resume", csrf=token)
    assert resp.status == 409 and "not cordoned" in await resp.text()
    assert env.store.nodes.states() == [] and env.store.nodes.events("gpu-07") == []
    assert "node w9 not found" in await page(client, "/ui/nodes/w9/cordon", status=404)
    resp = await _post(client, "/ui/nodes/w9/cordon", csrf=token, reason="x")
    assert resp.status == 404 and env.store.nodes.states() == []
    resp = await _post(client, "/ui/nodes/gpu-07/reboot", csrf=token, reason="x")
    assert resp.status in (401, 404)  # no such console route
    env.store.nodes.cordon("gpu-07", NodeSource.OPERATOR, "ops", T0, "first")
    resp = await _post(client, "/ui/nodes/gpu-07/cordon", csrf=token, reason="again")
    assert resp.status == 409 and "already cordoned (by ops: first)" in await resp.text()
    assert len(env.store.nodes.events("gpu-07")) == 1


async def test_a_user_sees_no_buttons_and_is_refused(client, ticked):
    env = ticked
    env.store.users.create_user("carol", Role.USER, T0)
    carol = env.store.users.create_token("carol", "c", None, T0, max_live=5)
    await sign_in(client, carol.secret)
    html = await page(client, "/ui/cluster")
    assert "gpu-07" in html and "/ui/nodes/" not in html and "<th>Actions</th>" not in html
    form = await page(client, "/ui/nodes/gpu-07/cordon")
    assert "Only an admin may" in form and 'id="node-reason"' not in form
    resp = await _post(client, "/ui/nodes/gpu-07/cordon", csrf=csrf_of(html), reason="x")
    assert resp.status == 403 and "only an admin may cordon" in await resp.text()
    assert env.store.nodes.states() == [] and env.store.nodes.events("gpu-07") == []


async def test_a_node_ray_no_longer_lists_shows_with_its_state(client, env):
    env.store.nodes.cordon("gone", NodeSource.QUARANTINE, None, T0, "3 CUDA errors")
    env.tick()
    await sign_in(client)
    html = await page(client, "/ui/cluster")
    assert "gone" in html and "by the service" in html and "quarantine" in html
    assert 'href="/ui/nodes/gone/resume"' in html
