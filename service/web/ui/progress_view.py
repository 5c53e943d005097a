"""What the console shows of training: progress bars and the task page's curves.

The progress of a task is the API's (``views.progress_json``); the curves are the API's
too (``curves.join`` over the kept points, ``curves.default_keys`` when none are picked),
drawn by ``charts.curve_chart`` on the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from service.policy.curves import default_keys, join
from service.store.aio import AsyncStore
from service.web.api.views import progress_json
from service.web.ui import charts

MAX_PAGE_CURVES = 4  # charts on one task page


@dataclass(frozen=True)
class Curves:
    keys: list[str]  # every metric of the task
    chosen: list[str]  # the ones drawn
    charts: list[tuple[str, Markup]]  # (key, SVG)


async def running_progress(store: AsyncStore, now: float) -> dict[str, dict]:
    """``{task_id: progress JSON}`` of the active tasks that printed a step."""
    rows = await store.read(lambda s: s.progress.active_progress())
    return {task_id: p for task_id, row in rows.items()
            if (p := progress_json(row, now)) is not None}


async def task_progress(store: AsyncStore, task_id: str, now: float) -> dict | None:
    return progress_json(await store.read(lambda s: s.progress.task_progress(task_id)), now)


async def task_curves(store: AsyncStore, task_id: str, wanted: list[str]) -> Curves:
    """The task's curves of ``wanted`` (unknown names ignored; none: a loss and a
    reward), at most ``MAX_PAGE_CURVES``."""
    keys = await store.read(lambda s: s.progress.metric_keys(task_id))
    known = set(keys)
    chosen = [k for k in dict.fromkeys(wanted) if k in known] or default_keys(keys)
    chosen = chosen[:MAX_PAGE_CURVES]
    joined = join(await store.read(lambda s: s.progress.metric_points(task_id, chosen)))
    return Curves(keys, chosen, [
        (key, charts.curve_chart([(p.step, p.value, p.attempt_no) for p in joined.get(key, [])],
                                 title=f"{key} by step"))
        for key in chosen])
