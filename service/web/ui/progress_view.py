"""What the console shows of training: progress bars and the task page's curves.

The progress of a task is the API's (``views.progress_json``); the curves are the API's
too (``curves.join`` over the kept points, ``curves.default_keys`` when none are picked),
drawn by ``charts.curve_chart`` on the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from service.policy.curves import default_keys, join
from service.usecases import reads
from service.usecases.reads import ReadDeps
from service.web.api.views import progress_json
from service.web.ui import charts

MAX_PAGE_CURVES = 4  # charts on one task page


@dataclass(frozen=True)
class Curves:
    keys: list[str]  # every metric of the task
    chosen: list[str]  # the ones drawn
    charts: list[tuple[str, Markup]]  # (key, SVG)


async def running_progress(deps: ReadDeps, now: float) -> dict[str, dict]:
    """``{task_id: progress JSON}`` of the active tasks that printed a step."""
    rows = await reads.active_progress(deps)
    return {task_id: p for task_id, row in rows.items()
            if (p := progress_json(row, now)) is not None}


async def task_progress(deps: ReadDeps, task_id: str, now: float) -> dict | None:
    return progress_json(await reads.task_progress(deps, task_id), now)


async def task_curves(deps: ReadDeps, task_id: str, wanted: list[str]) -> Curves:
    """The task's curves of ``wanted`` (unknown names ignored; none: a loss and a
    reward), at most ``MAX_PAGE_CURVES``."""
    keys = await reads.metric_keys(deps, task_id)
    known = set(keys)
    chosen = [k for k in dict.fromkeys(wanted) if k in known] or default_keys(keys)
    chosen = chosen[:MAX_PAGE_CURVES]
    joined = join(await reads.metric_points(deps, task_id, chosen))
    return Curves(keys, chosen, [
        (key, charts.curve_chart([(p.step, p.value, p.attempt_no) for p in joined.get(key, [])],
                                 title=f"{key} by step"))
        for key in chosen])
