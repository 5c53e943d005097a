"""What a user reads of the queue: a page of the task list, the API's queue (the waiting
page, the active tasks, the BLOCKED ones), the console queue page's parts. Each function
is one read of the store's read lane.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from service.domain.reasons import WaitKind
from service.domain.rows import PendingRow, TaskRow
from service.store.writer import Store
from service.usecases.reads import ReadDeps, blocked_reasons, blocked_tasks

T = TypeVar("T")

TaskPage = Callable[[list[TaskRow], int | None, dict[str, str]], T]


async def task_page(deps: ReadDeps, render: TaskPage[T], **filters: Any) -> T:
    """One page of the task list (``filters``: ``Tasks.list_tasks``' keywords), with why
    each BLOCKED task of it waits, handed to ``render(tasks, next_before, waits)``: read,
    decided and rendered in one call on the read lane (a user's pages hold one thread at
    a time; with the shaping elsewhere, one page was read while the last was shaped)."""

    def page(store: Store) -> T:
        tasks, next_before = store.tasks.list_tasks(**filters)
        return render(tasks, next_before, blocked_reasons(store, tasks))

    return await deps.store.read(page)


async def waiting_and_active(deps: ReadDeps, user: str | None, *, limit: int, offset: int,
                             reason: WaitKind | None) -> tuple[list[TaskRow], list[TaskRow]]:
    """(the waiting tasks from ``offset``, at most ``limit``; every active one)."""
    return await deps.store.read(lambda s: s.tasks.queue(user, limit=limit, offset=offset,
                                                         reason=reason))


async def blocked(deps: ReadDeps, limit: int, user: str | None = None
                  ) -> list[tuple[TaskRow, str]]:
    """The oldest BLOCKED tasks with why each waits (``reads.blocked_tasks``)."""
    return await deps.store.read(lambda s: blocked_tasks(s, limit, user))


# -- the console's queue page ---------------------------------------------------------------


async def counts_by_state(deps: ReadDeps) -> dict[str, int]:
    return await deps.store.read(lambda s: s.tasks.counts_by_state())


async def pending_page(deps: ReadDeps, *, user: str | None, workload: str | None,
                       offset: int, limit: int, reason: WaitKind | None
                       ) -> tuple[list[PendingRow], int]:
    """A page of the waiting tasks in queue order, and how many wait in all."""
    return await deps.store.read(lambda s: s.console.queue_page(
        user=user, workload=workload, offset=offset, limit=limit, reason=reason))


async def active_tasks(deps: ReadDeps) -> list[TaskRow]:
    """The tasks starting, running or stopping (the queue and cluster pages)."""
    return await deps.store.read(lambda s: s.console.active_tasks())


async def recent_finished(deps: ReadDeps, limit: int, user: str | None) -> list[TaskRow]:
    return await deps.store.read(lambda s: s.console.recent_finished(limit, user))


async def pending_workloads(deps: ReadDeps) -> list[str]:
    return await deps.store.read(lambda s: s.console.pending_workloads())
