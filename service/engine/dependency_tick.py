"""The scheduler's dependency step: release, cancel or keep each BLOCKED task; end the
pipelines whose stages all ended.

Runs in every tick after the reconcile and before admission, so a dependent whose last
parent ended in this tick's reconcile is queued and, room permitting, submitted in the
same tick. The decision is ``dependencies.decide`` (pure); this module does the effects:
resolving a stage's output references (the only file-system read: a checkpoint
tracker, in the owner's tree, through ``service.cluster.sharedfs``), validating the
result as a JobSpec of the owner, and the store's guarded writes. BLOCKED tasks never
reach the planner: they are not in the runnable index. A tick looks only at the BLOCKED
tasks a trigger woke (a parent of theirs ended: ``dep_wakeups``), so a thousand
dependents waiting on running parents cost it one read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.cluster.sharedfs import SharedTree
from service.config import Settings
from service.domain.layout import attempt_dir, checkpoint_dir
from service.engine.checkpoints import NoCheckpoint, latest_checkpoint
from service.engine.ports import SchedulerStore
from service.jobspec.model import JobSpecError
from service.jobspec.spec import validate_document
from service.policy.dependencies import OnUnsatisfiable, Verdict, cancel_reason, decide
from service.policy.pipelines import find_refs, substitute
from service.store.pipelines import BlockedTask
from service.store.writer import StaleState

log = logging.getLogger(__name__)


class Unresolvable(ValueError):
    """A stage's output reference cannot be resolved (no checkpoint, no attempt)."""


@dataclass
class DependencyReport:
    released: int = 0  # BLOCKED -> QUEUED
    canceled: int = 0  # BLOCKED -> CANCELED (a dependency never holds, or unresolvable)


def outputs_of(store: SchedulerStore, settings: Settings, tree: SharedTree, user: str | None,
               stage_tasks: Mapping[str, str], refs: set[tuple[str, str]]
               ) -> dict[tuple[str, str], str]:
    """The values of ``refs`` (``(stage, output)``) for stages whose task ids are
    ``stage_tasks``: Unresolvable naming what is missing."""
    out: dict[tuple[str, str], str] = {}
    for stage, output in refs:
        task_id = stage_tasks[stage]
        ckpt = checkpoint_dir(settings.shared_root, user, task_id)
        if output == "checkpoint_dir":
            out[(stage, output)] = ckpt
        elif output == "latest_checkpoint":
            try:
                out[(stage, output)] = latest_checkpoint(tree, ckpt)
            except NoCheckpoint as exc:
                raise Unresolvable(f"stage {stage}: {exc}") from None
        else:  # job_dir
            task = store.tasks.get_task(task_id)
            if task is None or task.latest_attempt is None:
                raise Unresolvable(f"stage {stage} ({task_id}) never ran: it has no job dir")
            out[(stage, output)] = attempt_dir(settings.shared_root, user,
                                               task.latest_attempt.ray_submission_id)
    return out


class DependencyStep:
    def __init__(self, store: SchedulerStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.tree = SharedTree(settings.shared_root)

    def run(self, now: float) -> DependencyReport:
        report = DependencyReport()
        upto, woken = self.store.pipelines.woken()
        for task in woken:
            decision = decide(task.deps)
            try:
                if decision.verdict is Verdict.RELEASE:
                    self._release(task, now, report)
                elif (decision.verdict is Verdict.UNSATISFIABLE and decision.dep is not None
                      and task.on_unsatisfiable == OnUnsatisfiable.CANCEL.value):
                    self.store.pipelines.cancel_blocked(task.task_id, now,
                                                        cancel_reason(decision.dep),
                                              skipped=True)
                    report.canceled += 1
            except StaleState:
                pass  # canceled meanwhile: nothing to do
        if upto is not None:  # handled: a failure above leaves them for the next tick
            self.store.pipelines.clear_wakeups(upto)
        self.store.pipelines.end_pipelines(now)
        return report

    def _release(self, task: BlockedTask, now: float, report: DependencyReport) -> None:
        spec = None
        if task.template is not None:
            try:
                spec = self._resolve(task)
            except (Unresolvable, JobSpecError) as exc:
                reason = f"cannot resolve the stage's references: {exc}"
                log.info("%s: %s", task.task_id, reason)
                self.store.pipelines.cancel_blocked(task.task_id, now, reason[:1000], skipped=False)
                report.canceled += 1
                return
        self.store.pipelines.release_blocked(task.task_id, now, spec)
        report.released += 1

    def _resolve(self, task: BlockedTask) -> dict[str, Any] | None:
        """A pipeline stage's JobSpec with its references resolved and validated for its
        owner; None when it has none (the stored spec stands)."""
        refs = find_refs(task.template)
        if not refs or task.pipeline_id is None:
            return None
        view = self.store.pipelines.get_pipeline(task.pipeline_id)
        stage_tasks = {} if view is None else {s.stage: s.task_id for s in view.stages}
        values = outputs_of(self.store, self.settings, self.tree, task.user, stage_tasks,
                            refs)
        resolved = substitute(task.template or {}, values)
        return validate_document(resolved, self.settings, task.user).to_dict()
