"""Submitting a pipeline: a parsed document to stage tasks, created in one transaction.

Each stage's JobSpec is validated as its owner's (``jobspec.validate_document``) with its
output references replaced by where those outputs will be (a checkpoint dir and job dir
are known from the stage's task id; the latest checkpoint stands as ``global_step_0``
until the stage is released, when ``dependency_tick`` resolves and validates it again).
Called on the store's write lane: ids are chosen and the rows written without another
writer in between.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from service.config import Settings
from service.domain.ids import new_task_id, submission_id
from service.domain.layout import attempt_dir, checkpoint_dir
from service.domain.newtask import new_task
from service.jobspec.model import JobSpecError
from service.jobspec.spec import validate_document
from service.policy.idempotency import IdemKey
from service.policy.pipelines import PipelineDoc, PipelineError, substitute
from service.policy.priorities import allowance_problem
from service.store.pipelines import NewStage
from service.usecases.ports import UseCaseStore

PLACEHOLDER_STEP = "global_step_0"


def placeholders(settings: Settings, user: str, stage_tasks: Mapping[str, str]
                 ) -> dict[tuple[str, str], str]:
    """Where each stage's outputs will be (the latest checkpoint as step 0)."""
    out: dict[tuple[str, str], str] = {}
    for stage, task_id in stage_tasks.items():
        ckpt = checkpoint_dir(settings.shared_root, user, task_id)
        out[(stage, "checkpoint_dir")] = ckpt
        out[(stage, "latest_checkpoint")] = f"{ckpt}/{PLACEHOLDER_STEP}"
        out[(stage, "job_dir")] = attempt_dir(settings.shared_root, user,
                                              submission_id(task_id, 1))
    return out


def build_stages(doc: PipelineDoc, stage_tasks: Mapping[str, str], settings: Settings,
                 user: str, now: float, *, is_admin: bool) -> list[NewStage]:
    """Every stage as a task to create (parents first); PipelineError naming every
    problem (``stages.<name>.jobspec.<field>``)."""
    values = placeholders(settings, user, stage_tasks)
    problems: list[dict[str, Any]] = []
    out: list[NewStage] = []
    for stage in doc.stages:
        template = {**stage.jobspec,
                    "after": {cond: [stage_tasks[name] for name in names]
                              for cond, names in stage.after.to_json().items()},
                    "on_unsatisfiable": stage.on_unsatisfiable.value}
        prefix = f"stages.{stage.name}.jobspec"
        try:
            spec = validate_document(substitute(template, values), settings, user)
        except JobSpecError as exc:
            problems += [{**d, "field": f"{prefix}.{d['field']}"} for d in exc.details]
            continue
        task = new_task(spec, settings, user, now, text=json.dumps(stage.jobspec,
                                                                  sort_keys=True))
        problem = allowance_problem(task.priority, is_admin=is_admin,
                                    max_user_priority=settings.scheduler.max_user_priority)
        if problem:
            problems.append({"field": f"{prefix}.priority", "message": problem})
        out.append(NewStage(stage=stage.name, task_id=stage_tasks[stage.name], task=task,
                            template=template))
    if problems:
        raise PipelineError(problems)
    return out


def submit_pipeline(store: UseCaseStore, doc: PipelineDoc, document: str, settings: Settings,
                    user: str, now: float, *, is_admin: bool = False,
                    key: IdemKey | None = None) -> tuple[str, dict[str, str]]:
    """Create the pipeline: ``(pipeline_id, {stage: task_id})``. Raises PipelineError
    (400) or the store's errors (QuotaExceeded: the owner's limits; admins have none;
    ``key``'s KeyReplayed or KeyMismatch); writes nothing then."""
    stage_tasks: dict[str, str] = {}
    for stage in doc.stages:
        workload = stage.jobspec.get("workload")
        if not isinstance(workload, str) or not workload.isalnum() or not workload.islower():
            workload = "stage"  # the JobSpec's own check names the problem
        stage_tasks[stage.name] = store.tasks.new_id(settings.task_id_prefix, workload, now,
                                                     user, taken=stage_tasks.values())
    stages = build_stages(doc, stage_tasks, settings, user, now, is_admin=is_admin)
    pipeline_id = new_task_id(settings.task_id_prefix, "pipeline", now,
                              store.pipelines.pipeline_exists, user=user)
    store.pipelines.create_pipeline(
        pipeline_id=pipeline_id, name=doc.name, user=user, document=document, stages=stages,
        now=now, admin=is_admin, quota=None if is_admin else settings.users.limits_for(user),
        key=key)
    return pipeline_id, stage_tasks
