"""What a user reads of a task: the task, its attempts, events, progress, curves and
JobSpec; what takes more than one row: its dependencies, the BLOCKED tasks with why each
waits, an attempt's driver log. The API and the console both call these; each renders the
result its own way. Each async function is one read of the store's read lane.

The ``*_of`` functions and ``blocked_tasks`` take the store itself: they run on the
store's read lane (``deps.store.read(lambda s: ...)``), one hand-off for all their reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from service.cluster.boundary import ClusterError
from service.domain.progress import Point
from service.domain.rows import AttemptRow, EventRow, ProgressRow, TaskRow
from service.domain.states import RayStatus, TaskState
from service.policy.dependencies import Dep, OnUnsatisfiable, wait_reason
from service.store.writer import Store
from service.usecases.ports import Lanes, TaskDeps, on_cluster

log = logging.getLogger(__name__)


class ReadDeps(Protocol):
    """What the reads are given: the store's lanes (``AppDeps`` satisfies it)."""

    @property
    def store(self) -> Lanes[Store]: ...


# -- one row or one list of a task --------------------------------------------------------


async def task(deps: ReadDeps, task_id: str) -> TaskRow | None:
    return await deps.store.read(lambda s: s.tasks.get_task(task_id))


async def user_exists(deps: ReadDeps, name: str) -> bool:
    return await deps.store.read(lambda s: s.users.get_user(name)) is not None


async def attempts(deps: ReadDeps, task_id: str) -> list[AttemptRow]:
    return await deps.store.read(lambda s: s.attempts.list_attempts(task_id))


async def attempt(deps: ReadDeps, task_id: str, attempt_no: int | None) -> AttemptRow | None:
    """Attempt ``attempt_no`` of the task (None: its latest)."""
    return await deps.store.read(lambda s: s.attempts.get_attempt(task_id, attempt_no))


async def events(deps: ReadDeps, task_id: str) -> list[EventRow]:
    return await deps.store.read(lambda s: s.tasks.events(task_id))


async def jobspec(deps: ReadDeps, task_id: str) -> str | None:
    """The JobSpec as it was written (its owner's and the admins' to read)."""
    return await deps.store.read(lambda s: s.console.task_jobspec(task_id))


async def task_progress(deps: ReadDeps, task_id: str) -> ProgressRow | None:
    return await deps.store.read(lambda s: s.progress.task_progress(task_id))


async def active_progress(deps: ReadDeps) -> dict[str, ProgressRow]:
    """``{task_id: progress}`` of the active tasks."""
    return await deps.store.read(lambda s: s.progress.active_progress())


async def metric_keys(deps: ReadDeps, task_id: str) -> list[str]:
    return await deps.store.read(lambda s: s.progress.metric_keys(task_id))


async def metric_points(deps: ReadDeps, task_id: str, keys: Sequence[str]
                        ) -> list[Point]:
    return await deps.store.read(lambda s: s.progress.metric_points(task_id, keys))


async def change_seq(deps: ReadDeps) -> int:
    """The store's change counter (the console's live feed; the readiness probe)."""
    return await deps.store.read(lambda s: s.change_seq())


# -- a task's dependencies ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dependencies:
    """A task's parents (each with its state now), what it does when they cannot hold,
    and the pipeline stage it is (``(pipeline_id, stage)`` or None)."""

    after: list[Dep]
    on_unsatisfiable: str
    stage: tuple[str, str] | None


def dependencies_of(store: Store, task_id: str) -> Dependencies:
    return Dependencies(store.pipelines.deps_of(task_id),
                        store.pipelines.on_unsatisfiable_of(task_id),
                        store.pipelines.stage_of(task_id))


async def dependencies(deps: TaskDeps, task_id: str) -> Dependencies:
    """A task's dependencies, in one read of the store's read lane."""
    return await deps.store.read(lambda s: dependencies_of(s, task_id))


@dataclass(frozen=True, slots=True)
class TaskView:
    """What a task's page shows beside the task: its progress and its dependencies."""

    task: TaskRow
    progress: ProgressRow | None
    dependencies: Dependencies


def task_view_of(store: Store, task_id: str) -> TaskView | None:
    page = store.task_page(task_id)  # one statement; the dependencies' rows if it has any
    if page is None:
        return None
    after = store.pipelines.deps_of(task_id) if page.has_deps else []
    return TaskView(page.task, page.progress,
                    Dependencies(after, page.on_unsatisfiable, page.stage))


async def task_view(deps: TaskDeps, task_id: str) -> TaskView | None:
    """A task with its progress and dependencies (None: no such task), in one read of
    the store's read lane: three reads were three trips through the lane, each paid on
    the event loop, the lane's thread and the caller's time share."""
    return await deps.store.read(lambda s: task_view_of(s, task_id))


def _reasons(store: Store, task_ids: list[str]) -> dict[str, str]:
    found = store.pipelines.deps_of_tasks(task_ids)
    out = {}
    for task_id in task_ids:
        policy = OnUnsatisfiable(store.pipelines.on_unsatisfiable_of(task_id))
        reason = wait_reason(found.get(task_id, []), policy)
        out[task_id] = reason or "dependencies met: queued on the next tick"
    return out


def blocked_reasons(store: Store, tasks: list[TaskRow]) -> dict[str, str]:
    """Why each BLOCKED task of a list page waits (nothing read without any)."""
    blocked = [t.task_id for t in tasks if t.state is TaskState.BLOCKED]
    return _reasons(store, blocked) if blocked else {}


def blocked_tasks(store: Store, limit: int, user: str | None = None
                  ) -> list[tuple[TaskRow, str]]:
    """The oldest BLOCKED tasks (``user``'s only when given) with why each waits (the
    console queue's "waiting on other tasks", the API queue's ``blocked``)."""
    tasks = store.pipelines.blocked_page(limit, user)
    reasons = _reasons(store, [t.task_id for t in tasks])
    return [(t, reasons[t.task_id]) for t in tasks]


# -- an attempt's log ---------------------------------------------------------------------


class Archive(Protocol):
    """Where ended attempts' logs are kept (``service.engine.artifacts.Artifacts``)."""

    def read_log(self, sid: str, user: str | None) -> str | None: ...


class LogDeps(TaskDeps, Protocol):
    @property
    def artifacts(self) -> Archive: ...


async def attempt_log(deps: LogDeps, attempt: AttemptRow, user: str | None) -> str | None:
    """Live from Ray while the attempt runs; the archive once it ended (or Ray is gone).
    File reads run on the work lane, Ray calls on the cluster pool."""
    sid = attempt.ray_submission_id
    ended = attempt.ray_status is not None and RayStatus(attempt.ray_status).is_terminal()
    if ended:
        archived = await deps.work.run(deps.artifacts.read_log, sid, user)
        if archived is not None:
            return archived
    try:
        return await on_cluster(deps, deps.cluster.logs, sid)
    except ClusterError as exc:
        log.info("live logs of %s unavailable: %s", sid, exc)
    return None if ended else await deps.work.run(deps.artifacts.read_log, sid, user)


def tail_lines(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text`` (without splitting the whole text)."""
    end = len(text) - 1 if text.endswith("\n") else len(text)
    pos = end
    for _ in range(lines):
        pos = text.rfind("\n", 0, pos)
        if pos < 0:
            return text
    return text[pos + 1:]
