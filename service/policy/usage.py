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
class EndedTotals:
    """One owner's ended attempts over all history, summed from ``task_usage``."""

    user: str | None
    gpu_seconds: float
    failed_gpu_seconds: float
    tasks: int
    attempts: int


@dataclass(frozen=True, slots=True)
class RunningSpan:
    """An attempt on the cluster now, counted up to now; ``ended_gpu_seconds`` is what its
    task's ended attempts used (None: the task has none that counted)."""

    task_id: str
    user: str | None
    gpu_seconds: float
    failed: bool
    ended_gpu_seconds: float | None


def all_history(ended: Iterable[EndedTotals], running: Iterable[RunningSpan],
                top_ended: Iterable[tuple[str, float]], task_limit: int
                ) -> tuple[list[UserUsage], list[str]]:
    """Every owner's totals over all history and the ids of the ``task_limit`` tasks that
    used the most (ties by id), as ``account`` would give them from every attempt:
    ``ended`` from the running totals, ``running`` added up to now (a task counted once),
    ``top_ended`` the tasks whose ended attempts used the most, at least ``task_limit``
    plus one per running attempt of them, best first."""
    users = {e.user: UserUsage(e.user, e.gpu_seconds, e.failed_gpu_seconds, e.tasks,
                               e.attempts) for e in ended}
    totals = dict(top_ended)
    counted: set[str] = set()
    for span in running:
        if span.gpu_seconds <= 0:
            continue  # starts at this very instant: nothing used yet, as ``account`` says
        user = users.get(span.user)
        if user is None:
            user = users[span.user] = UserUsage(span.user)
        user.gpu_seconds += span.gpu_seconds
        user.failed_gpu_seconds += span.gpu_seconds if span.failed else 0.0
        user.attempts += 1
        user.running_attempts += 1
        if span.ended_gpu_seconds is None and span.task_id not in counted:
            user.tasks += 1  # no ended attempt counted it yet
        counted.add(span.task_id)
        base = totals.get(span.task_id, span.ended_gpu_seconds or 0.0)
        totals[span.task_id] = base + span.gpu_seconds
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
