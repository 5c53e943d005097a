"""The console's pipeline page: the DAG drawn on the server as SVG.

The layout is pure (``layout``): a stage's column is its depth (the longest chain of
parents before it), its row its place among the stages of that column in document order;
edges run from a parent's right side to a child's left side, labelled with the condition.
Boxes are coloured by their task's state with SVG presentation attributes (the console's
Content-Security-Policy allows no inline style) and link to the stage's task page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web

from service.domain.rows import StageRow
from service.store.pipelines import Edge
from service.usecases import pipelines
from service.usecases.ports import NotFound, NotOwner
from service.web.api.deps import deps_of
from service.web.ui.pages import SIGNED, _not_found, render, signed_in

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 220, 56, 90, 28, 16
# state -> (fill, stroke): the console's state colours (console.css .state-*)
COLOURS = {
    "BLOCKED": ("#f1ecfb", "#6a4fb3"),
    "QUEUED": ("#fdf3e1", "#b26a00"), "PENDING_RESOURCES": ("#fdf3e1", "#b26a00"),
    "SUBMITTING": ("#e3eefc", "#1f5fbf"), "SUBMITTED": ("#e3eefc", "#1f5fbf"),
    "RUNNING": ("#e3eefc", "#1f5fbf"),
    "SUCCEEDED": ("#e3f4ea", "#1e7d45"), "FAILED": ("#fdecea", "#b3261e"),
    "CANCELED": ("#eceef2", "#5f6673"),
}


@dataclass(frozen=True)
class Box:
    stage: str
    task_id: str
    state: str
    skipped: bool
    x: int
    y: int
    fill: str
    stroke: str


@dataclass(frozen=True)
class Arrow:
    x1: int
    y1: int
    x2: int
    y2: int
    label: str
    lx: int
    ly: int


@dataclass(frozen=True)
class Layout:
    boxes: list[Box]
    arrows: list[Arrow]
    width: int
    height: int


def layout(stages: Sequence[StageRow], edges: Sequence[Edge]) -> Layout:
    """Where each stage's box and each edge go (``stages`` in document order)."""
    parents: dict[str, list[str]] = {s.stage: [] for s in stages}
    for e in edges:
        parents[e.child].append(e.parent)
    depth: dict[str, int] = {}

    def depth_of(name: str) -> int:  # parents always precede: no cycle reaches here
        if name not in depth:
            depth[name] = 1 + max((depth_of(p) for p in parents[name]), default=-1)
        return depth[name]

    rows: dict[int, int] = {}
    where: dict[str, tuple[int, int]] = {}
    boxes = []
    for s in stages:
        col = depth_of(s.stage)
        row = rows.get(col, 0)
        rows[col] = row + 1
        x, y = PAD + col * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y)
        where[s.stage] = (x, y)
        fill, stroke = COLOURS.get(s.state.value, ("#ffffff", "#5f6673"))
        boxes.append(Box(s.stage, s.task_id, s.state.value, s.skipped, x, y, fill, stroke))
    arrows = []
    for e in edges:
        (px, py), (cx, cy) = where[e.parent], where[e.child]
        x1, y1, x2, y2 = px + BOX_W, py + BOX_H // 2, cx, cy + BOX_H // 2
        arrows.append(Arrow(x1, y1, x2, y2, e.condition.value, (x1 + x2) // 2,
                            (y1 + y2) // 2 - 6))
    cols = 1 + max(depth.values(), default=0)
    height_rows = max(rows.values(), default=1)
    return Layout(boxes, arrows, width=2 * PAD + cols * BOX_W + (cols - 1) * GAP_X,
                  height=2 * PAD + height_rows * BOX_H + (height_rows - 1) * GAP_Y)


@signed_in
async def pipeline_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    pipeline_id = request.match_info["pipeline_id"]
    try:
        view = await pipelines.owned_pipeline(deps, request[SIGNED].principal, pipeline_id,
                                              "read")
    except (NotFound, NotOwner):  # none of theirs: not found, whoever's it is
        return _not_found(request, f"There is no pipeline {pipeline_id}.")
    return render(
        request, "_pipeline.html" if request.query.get("fragment") else "pipeline.html",
        nav="queue", pipeline=view.pipeline, stages=view.stages,
        dag=layout(view.stages, view.edges), box_w=BOX_W, box_h=BOX_H)
