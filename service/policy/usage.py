"""GPU accounting: GPU-seconds per attempt, task and user over a time window (pure).

An attempt holds its gang (``nnodes x n_gpus_per_node`` GPUs) from Ray's start time to
its end time; an attempt still running counts up to ``now``. Its GPU-seconds in a window
``[start, end)`` are that span clipped to the window, times the gang's GPUs. Every
attempt counts, failed ones included (marked: their GPUs were taken all the same); an
attempt Ray never started (no start time) counts nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class AttemptSpan:
    """One attempt as the store knows it (times in epoch seconds)."""

    task_id: str
    attempt_no: int
    user: str | None
    gpus: int
    start_time: float
    end_time: float | None  # None: still running
    ray_status: str | None
    failure_kind: str | None


@dataclass(slots=True)
class AttemptUsage:
    span: AttemptSpan
    counted_from: float
    counted_to: float
    gpu_seconds: float

    @property
    def running(self) -> bool:
        return self.span.end_time is None

    @property
    def failed(self) -> bool:
        return self.span.failure_kind is not None


@dataclass(slots=True)
class TaskUsage:
    task_id: str
    user: str | None
    gpus: int
    gpu_seconds: float = 0.0
    failed_gpu_seconds: float = 0.0
    attempts: list[AttemptUsage] = field(default_factory=list)


@dataclass(slots=True)
class UserUsage:
    user: str | None
    gpu_seconds: float = 0.0
    failed_gpu_seconds: float = 0.0
    tasks: int = 0
    attempts: int = 0
    running_attempts: int = 0


@dataclass(frozen=True, slots=True)
class Report:
    window_from: float
    window_to: float
    users: list[UserUsage]  # by user name
    tasks: list[TaskUsage]  # in no particular order
    tasks_total: int | None = None  # tasks in the window; None: len(tasks)


@dataclass(frozen=True, slots=True)
class Summary:
    """A window's usage as the store sums it: every user's totals, and the attempts of
    the tasks that used the most (the only attempts read one by one)."""

    users: list[UserUsage]  # by user name
    top_spans: list[AttemptSpan]
    tasks_total: int


@dataclass(frozen=True, slots=True)
class WholeTotals:
    """One owner's tasks whose ended attempts all lie inside the window: their running
    totals (``task_usage``) summed, each task's whole usage counted."""

    user: str | None
    gpu_seconds: float
    failed_gpu_seconds: float
    tasks: int
    attempts: int


@dataclass(frozen=True, slots=True)
class TaskPart:
    """What the running totals cannot say of one task, clipped to the window: the ended
    attempts of a task whose span crosses an edge of the window, and its attempt running
    now. ``whole_gpu_seconds``: what its ended attempts used when ``WholeTotals`` counted
    them (None: they did not)."""

    task_id: str
    user: str | None
    gpu_seconds: float
    failed_gpu_seconds: float
    attempts: int
    running_attempts: int
    whole_gpu_seconds: float | None


def window_totals(whole: Iterable[WholeTotals], parts: Iterable[TaskPart],
                  top_whole: Iterable[tuple[str, float]], task_limit: int
                  ) -> tuple[list[UserUsage], list[str]]:
    """Every owner's totals in the window and the ids of the ``task_limit`` tasks that used
    the most (ties by id), as ``account`` would give them from every attempt: ``whole``
    from the running totals, ``parts`` added (a task counted once), ``top_whole`` the
    whole tasks that used the most, at least ``task_limit`` plus one per part, best
    first (a part may lift a task past them)."""
    users = {w.user: UserUsage(w.user, w.gpu_seconds, w.failed_gpu_seconds, w.tasks,
                               w.attempts) for w in whole if w.tasks}
    totals = dict(top_whole)
    for part in parts:
        user = users.get(part.user)
        if user is None:
            user = users[part.user] = UserUsage(part.user)
        user.gpu_seconds += part.gpu_seconds
        user.failed_gpu_seconds += part.failed_gpu_seconds
        user.attempts += part.attempts
        user.running_attempts += part.running_attempts
        if part.whole_gpu_seconds is None:
            user.tasks += 1  # no whole total counted it
        base = totals.get(part.task_id, part.whole_gpu_seconds or 0.0)
        totals[part.task_id] = base + part.gpu_seconds
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:task_limit]
    return sorted(users.values(), key=lambda u: u.user or ""), [k for k, _ in ranked]


def report_of(summary: Summary, window_from: float, window_to: float, now: float) -> Report:
    """The report of a summary: its users' totals, its top tasks accounted attempt by
    attempt (``account``)."""
    tasks = account(summary.top_spans, window_from, window_to, now).tasks
    return Report(window_from, window_to, summary.users, tasks, summary.tasks_total)


def clip(span: AttemptSpan, window_from: float, window_to: float, now: float
         ) -> AttemptUsage:
    """``span``'s GPU-seconds inside ``[window_from, window_to)``, a running attempt
    counted up to ``now``."""
    end = now if span.end_time is None else span.end_time
    lo = max(span.start_time, window_from)
    hi = max(min(end, window_to), lo)
    return AttemptUsage(span, lo, hi, (hi - lo) * span.gpus)


def account(spans: Iterable[AttemptSpan], window_from: float, window_to: float,
            now: float) -> Report:
    """Per-task and per-user totals of the attempts that overlap the window (users by
    name, tasks in no particular order, each task's attempts by number)."""
    if not window_from < window_to:
        raise ValueError(f"empty window: from {window_from} is not before to {window_to}")
    tasks: dict[str, TaskUsage] = {}
    users: dict[str | None, UserUsage] = {}
    for span in spans:
        used = clip(span, window_from, window_to, now)
        if used.counted_to <= used.counted_from:
            continue  # outside the window
        seconds = used.gpu_seconds
        task = tasks.get(span.task_id)
        user = users.get(span.user)
        if user is None:
            user = users[span.user] = UserUsage(span.user)
        if task is None:
            task = tasks[span.task_id] = TaskUsage(span.task_id, span.user, span.gpus)
            user.tasks += 1
        task.attempts.append(used)
        task.gpu_seconds += seconds
        user.gpu_seconds += seconds
        user.attempts += 1
        if span.end_time is None:
            user.running_attempts += 1
        if span.failure_kind is not None:
            task.failed_gpu_seconds += seconds
            user.failed_gpu_seconds += seconds
    for task in tasks.values():
        if len(task.attempts) > 1:
            task.attempts.sort(key=lambda a: a.span.attempt_no)
    return Report(window_from, window_to, sorted(users.values(), key=lambda u: u.user or ""),
                  list(tasks.values()))
