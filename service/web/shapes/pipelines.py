"""The shapes of pipelines: the answers (the document itself, ``name`` and ``stages``, is
read and checked by ``service.policy.pipelines``, whose 400 names each stage's fields)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from service.domain.states import PipelineState
from service.policy.dependencies import Condition
from service.web.shapes.common import Answer, Timestamp
from service.web.shapes.tasks import TaskState


class PipelineDocument(Answer):
    """name, and stages: {stage: {jobspec, after, on_unsatisfiable}} (docs/pipelines.md)"""

    name: str
    stages: dict[str, dict[str, object]]


class Pipeline(Answer):
    pipeline_id: str
    name: str
    user: str
    state: PipelineState
    created_at: Timestamp = None
    updated_at: Timestamp = None
    ended_at: Timestamp = None
    cancel_requested: bool = False


class PipelineStage(Answer):
    stage: str | None = None
    task_id: str | None = None
    state: TaskState | None = None
    skipped: Annotated[bool, Field(
        description="canceled: a dependency could never hold")] = False
    error_summary: str | None = None
    attempts: int = 0


class PipelineEdge(Answer):
    from_: Annotated[str | None, Field(alias="from")] = None
    to: str | None = None
    condition: Condition | None = None


class PipelineDetail(Pipeline):
    stages: list[PipelineStage]
    edges: list[PipelineEdge]
    canceled: Annotated[list[str], Field(
        description="cancel only: the stages it canceled or stops")] = []


class PipelineCreated(Answer):
    pipeline_id: str
    state: Annotated[PipelineState, Field(description="WAITING: no stage has started yet")]
    stages: Annotated[dict[str, str], Field(description="stage -> task_id")]


class PipelineList(Answer):
    pipelines: list[Pipeline]
