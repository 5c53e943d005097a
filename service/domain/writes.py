"""The values the store's writes take and return that are not rows: a cancel's outcome,
a retry's plan, an attempt's end, a metrics sample, a bulk insert, a progress update.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from service.domain.newtask import NewTask
from service.domain.progress import Point, Progress
from service.domain.rows import TaskRow
from service.domain.states import TaskState


class CancelKind(enum.StrEnum):
    """What a cancel request did."""

    CANCELED = "canceled"  # runnable: canceled at once
    STOPPING = "stopping"  # on (or on its way to) Ray: flagged for the scheduler to stop
    TERMINAL = "terminal"  # already finished: nothing to cancel
    NOT_FOUND = "not_found"


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    kind: CancelKind
    task: TaskRow | None  # the task after the request (None when not found)
    ray_submission_id: str | None = None  # of the latest attempt, when there is one


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """How a task that failed retryably waits for its next attempt (see ``retry.plan``)."""

    next_run_at: float  # scanned by admission from then on
    # its wait counts from then (starvation guard, reservation order, wait metrics): the
    # wait it had before the attempt that failed is kept (``retry.plan``)
    runnable_since: float
    not_before: float | None = None  # submitted not before (in the scan, kept in place)
    resource_failures: int = 0  # consecutive INSUFFICIENT_RESOURCES failures so far
    preemptions: int = 0  # attempts preempted so far


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """What is known about an attempt when it ends."""

    ray_status: str | None
    failure_kind: str | None = None
    message: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class BulkTask:
    """A task row for ``Store.tasks.bulk_load`` (benchmarks and large fixtures only)."""

    task_id: str
    workload: str
    state: TaskState
    created_at: float
    nnodes: int = 1
    n_gpus_per_node: int = 1
    jobspec_yaml: str = ""
    spec: Mapping[str, Any] | None = None
    user: str | None = None
    attempt_span: tuple[float, float] | None = None  # (start, end): one ended attempt
    priority: int = 0
    max_runtime_s: float | None = None

    def new_task(self) -> NewTask:
        """The task as the store's one insert takes it (its values as given: a fixture's
        row, no defaults to apply)."""
        return NewTask(id_prefix="", workload=self.workload, text=self.jobspec_yaml,
                       spec=self.spec or {}, nnodes=self.nnodes,
                       n_gpus_per_node=self.n_gpus_per_node, user=self.user,
                       created_at=self.created_at, priority=self.priority,
                       max_runtime_s=self.max_runtime_s)


@dataclass(frozen=True, slots=True)
class Sample:
    """The queue and the cluster at one time (``gpus_*`` None: Ray did not answer)."""

    ts: float
    pending: int
    running: int
    gpus_used: float | None
    gpus_total: float | None


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """What one read of an attempt's log adds: written by ``Store.progress.record_progress`` only
    if the stored offset is still ``expected_offset``."""

    task_id: str
    attempt_no: int
    expected_offset: int
    log_offset: int
    progress: Progress
    points: tuple[Point, ...] = ()  # new kept points (a repeated step's key: replaced)
    dropped: tuple[tuple[str, int], ...] = ()  # (key, step) thinned away
    # (stride, points received) of the series this read touched
    series: Mapping[str, tuple[int, int]] = field(default_factory=dict)
