"""The console's pipeline page (the DAG as server-drawn SVG), the queue's "waiting on other
tasks", and a task page's pipeline and dependencies; the DAG layout by table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ui_env import TOKEN, jobspec, page, sign_in

from service.domain.rows import StageRow
from service.domain.states import RayStatus, TaskState
from service.policy.dependencies import Condition
from service.store.pipelines import Edge
from service.web.ui.pipeline_view import BOX_H, BOX_W, GAP_X, PAD, layout


def _stage(name: str, state: TaskState = TaskState.QUEUED) -> StageRow:
    return StageRow(stage=name, task_id=f"t-{name}", position=0, skipped=False, state=state,
                    error_summary=None, attempt_no=0)


def test_layout_puts_a_stage_right_of_its_deepest_parent() -> None:
    stages = [_stage("a"), _stage("b"), _stage("c"), _stage("d")]
    edges = [Edge("a", "b", Condition.OK), Edge("a", "c", Condition.ANY),
             Edge("b", "d", Condition.OK), Edge("c", "d", Condition.NOTOK)]
    dag = layout(stages, edges)
    xs = {b.stage: b.x for b in dag.boxes}
    assert xs == {"a": PAD, "b": PAD + BOX_W + GAP_X, "c": PAD + BOX_W + GAP_X,
                  "d": PAD + 2 * (BOX_W + GAP_X)}
    assert len({b.y for b in dag.boxes if b.stage in "bc"}) == 2  # one above the other
    assert [a.label for a in dag.arrows] == ["ok", "any", "ok", "notok"]
    assert dag.width == 2 * PAD + 3 * BOX_W + 2 * GAP_X
    assert all(b.y + BOX_H <= dag.height for b in dag.boxes)


def _doc(shared: Path) -> str:
    spec = yaml.safe_load(jobspec(shared))
    return json.dumps({"name": "two", "stages": {
        "first": {"jobspec": spec},
        "second": {"after": {"ok": ["first"]}, "jobspec": spec}}})


@pytest.fixture
async def created(client, env):
    env.cluster.add_node("n1", gpus=4)
    resp = await client.post("/api/v2/pipelines", data=_doc(env.shared), headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert resp.status == 201, await resp.text()
    env.tick()
    return await resp.json()


async def test_pipeline_page_draws_the_dag_and_links_each_stage(client, env, created):
    await sign_in(client)
    pid, stages = created["pipeline_id"], created["stages"]
    html = await page(client, f"/ui/pipelines/{pid}")
    assert 'id="pipeline-state">RUNNING' in html
    assert f'<a href="/ui/tasks/{stages["first"]}" class="stage" id="stage-first" ' \
           'data-state="SUBMITTED"' in html
    assert 'id="stage-second" data-state="BLOCKED"' in html
    assert '<g class="edge" data-condition="ok">' in html
    fragment = await page(client, f"/ui/pipelines/{pid}?fragment=1")
    assert "<html" not in fragment and 'id="dag"' in fragment
    await page(client, "/ui/pipelines/nope", status=404)
    # the stage's own page names its pipeline and why it waits
    task = await page(client, f"/ui/tasks/{stages['second']}")
    assert f'href="/ui/pipelines/{pid}">{pid}</a> (stage second)' in task
    assert f"after {stages['first']} (SUBMITTED)" in task
    # the queue shows it apart from the tasks that wait for GPUs
    queue = await page(client, "/ui/queue")
    blocked = queue[queue.index('id="blocked"'):queue.index('id="pending"')
                    if 'id="pending"' in queue else None]
    assert f"row-{stages['second']}" in blocked
    env.cluster.finish(f"{stages['first']}--a01", RayStatus.FAILED)
    env.tick()
    env.tick()
    html = await page(client, f"/ui/pipelines/{pid}")
    assert 'id="pipeline-state">FAILED' in html
    assert 'data-state="CANCELED"' in html and "(skipped)" in html


async def test_a_waiting_pipeline_looks_like_the_other_waiting_states(client, env):
    """No stage started (no GPUs): WAITING, drawn as the queue draws QUEUED and
    PENDING_RESOURCES."""
    resp = await client.post("/api/v2/pipelines", data=_doc(env.shared), headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert resp.status == 201, await resp.text()
    env.tick()
    await sign_in(client)
    html = await page(client, f"/ui/pipelines/{(await resp.json())['pipeline_id']}")
    assert 'class="state state-waiting" id="pipeline-state">WAITING' in html
    css = await (await client.get("/ui/static/console.css")).text()
    rule = next(r for r in css.split("}") if ".state-queued" in r)
    assert ".state-waiting" in rule and ".state-pending_resources" in rule
