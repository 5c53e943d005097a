"""Submit a pipeline (its stages created in one transaction) and cancel one (every stage
that has not ended, through the task's own cancel)."""

from __future__ import annotations

from dataclasses import dataclass

from service.domain.rows import PipelineRow
from service.domain.users import Principal
from service.domain.writes import CancelKind
from service.policy.pipelines import parse_pipeline
from service.store.idempotency import KeyReplayed
from service.store.pipelines import PipelineNotFound, PipelineView
from service.usecases.idempotency import submit_key, submit_refusals
from service.usecases.pipeline_submit import submit_pipeline as create_pipeline
from service.usecases.ports import (
    NotFound,
    NotOwner,
    TaskDeps,
)
from service.usecases.tasks import cancel_one

SUBMIT_ROUTE = "POST /api/v2/pipelines"


@dataclass(frozen=True, slots=True)
class PipelineSubmitted:
    pipeline_id: str
    stages: dict[str, str]  # stage -> its task's id
    replayed: bool = False  # the answer to an earlier request with this Idempotency-Key


@dataclass(frozen=True, slots=True)
class PipelineCanceled:
    view: PipelineView  # the pipeline after the request
    canceled: list[str]  # the stages' tasks this request canceled or asked to stop


async def submit_pipeline(deps: TaskDeps, who: Principal, text: str, *, as_json: bool = False,
                          key: str | None = None) -> PipelineSubmitted:
    """Create the pipeline document ``text`` as ``who``'s (parsed on the work lane:
    ``PipelineError`` with every problem), its stages' tasks under the owner's quota
    (``OverQuota``; admins are exempt), then wake the scheduler. ``key``: the request's
    ``Idempotency-Key``, as ``tasks.submit`` takes it (``as_json``: how the body is
    compared)."""
    idem = submit_key(who.name, key, SUBMIT_ROUTE, text, as_json=as_json)
    with deps.in_flight.hold(idem):
        doc = await deps.work.run(parse_pipeline, text)
        try:
            with submit_refusals(SUBMIT_ROUTE):
                pipeline_id, stages = await deps.store.write(
                    lambda s: create_pipeline(s, doc, text, deps.settings, who.name,
                                              deps.clock(), is_admin=who.is_admin, key=idem))
        except KeyReplayed as exc:
            return PipelineSubmitted(exc.result["pipeline_id"], dict(exc.result["stages"]),
                                     replayed=True)
    deps.waker.wake()
    return PipelineSubmitted(pipeline_id, stages)


async def list_pipelines(deps: TaskDeps, user: str | None, limit: int) -> list[PipelineRow]:
    """The latest ``limit`` pipelines (``user``'s only when given), newest first."""
    return await deps.store.read(lambda s: s.pipelines.list_pipelines(user, limit))


async def owned_pipeline(deps: TaskDeps, who: Principal, pipeline_id: str, action: str
                         ) -> PipelineView:
    """The pipeline, when ``who`` owns it or is an admin."""
    view = await deps.store.read(lambda s: s.pipelines.get_pipeline(pipeline_id))
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
        await deps.store.write(lambda s: s.pipelines.flag_pipeline_cancel(pipeline_id, now))
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
    after = await deps.store.read(lambda s: s.pipelines.get_pipeline(pipeline_id))
    return PipelineCanceled(after or view, canceled)
