"""Cancel a pipeline: every stage that has not ended, through the task's own cancel."""

from __future__ import annotations

from dataclasses import dataclass

from service.pipeline_store import PipelineNotFound, PipelineView
from service.rows import CancelKind
from service.usecases.ports import NotFound, NotOwner, TaskDeps
from service.usecases.tasks import cancel_one
from service.users import Principal


@dataclass(frozen=True, slots=True)
class PipelineCanceled:
    view: PipelineView  # the pipeline after the request
    canceled: list[str]  # the stages' tasks this request canceled or asked to stop


async def owned_pipeline(deps: TaskDeps, who: Principal, pipeline_id: str, action: str
                         ) -> PipelineView:
    """The pipeline, when ``who`` owns it or is an admin."""
    view = await deps.store.read(lambda s: s.get_pipeline(pipeline_id))
    if view is None:
        raise NotFound("pipeline", pipeline_id)
    if not who.may_act_on(view.pipeline.user):
        raise NotOwner("pipeline", pipeline_id, view.pipeline.user, action, who.name)
    return view


async def cancel_pipeline(deps: TaskDeps, who: Principal, pipeline_id: str
                          ) -> PipelineCanceled:
    """Flag the pipeline canceled, then cancel every stage that has not ended (waiting
    ones at once, running ones stopped on Ray by the scheduler), children first so none
    is released meanwhile; one wake at the end."""
    view = await owned_pipeline(deps, who, pipeline_id, "cancel")
    now = deps.clock()
    try:
        await deps.store.write(lambda s: s.flag_pipeline_cancel(pipeline_id, now))
    except PipelineNotFound as exc:  # pragma: no cover - pipelines are never deleted
        raise NotFound("pipeline", pipeline_id) from exc
    canceled = []
    for stage in sorted(view.stages, key=lambda s: -s.position):
        if stage.state.is_terminal():
            continue
        outcome = await cancel_one(deps, stage.task_id, now, who.name)
        if outcome.kind in (CancelKind.CANCELED, CancelKind.STOPPING):
            canceled.append(stage.task_id)
    deps.waker.wake()
    after = await deps.store.read(lambda s: s.get_pipeline(pipeline_id))
    return PipelineCanceled(after or view, canceled)
