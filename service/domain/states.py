"""Task and attempt states, and the single table of allowed task transitions.

Every state write in the store is checked against ``ALLOWED`` here and then guarded in
SQL (``UPDATE ... WHERE task_id=? AND state=?``), so this module is the only place that
says which moves exist.
"""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    # waiting on other tasks' final states (service.policy.dependencies): never admitted, never
    # counted as waiting for the cluster, until its dependencies hold
    BLOCKED = "BLOCKED"
    QUEUED = "QUEUED"
    PENDING_RESOURCES = "PENDING_RESOURCES"
    SUBMITTING = "SUBMITTING"
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"

    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[TaskState] = frozenset(
    {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELED}
)
RUNNABLE: frozenset[TaskState] = frozenset({TaskState.QUEUED, TaskState.PENDING_RESOURCES})
# Not started yet: cancelled at once, priority still changeable.
WAITING: frozenset[TaskState] = RUNNABLE | {TaskState.BLOCKED}
# States in which an attempt exists on Ray and must be reconciled each tick.
ON_CLUSTER: frozenset[TaskState] = frozenset({TaskState.SUBMITTED, TaskState.RUNNING})

_S = TaskState
ALLOWED: dict[TaskState, frozenset[TaskState]] = {
    _S.BLOCKED: frozenset({_S.QUEUED, _S.CANCELED}),
    _S.QUEUED: frozenset({_S.PENDING_RESOURCES, _S.SUBMITTING, _S.CANCELED}),
    _S.PENDING_RESOURCES: frozenset({_S.SUBMITTING, _S.CANCELED}),
    _S.SUBMITTING: frozenset({_S.SUBMITTED, _S.PENDING_RESOURCES, _S.FAILED}),
    _S.SUBMITTED: frozenset(
        {_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.PENDING_RESOURCES, _S.CANCELED}
    ),
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.FAILED, _S.PENDING_RESOURCES, _S.CANCELED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELED: frozenset(),
}


class InvalidTransition(ValueError):
    """A move that the transition table does not allow."""

    def __init__(self, src: TaskState, dst: TaskState) -> None:
        super().__init__(f"transition {src} -> {dst} is not allowed")
        self.src = src
        self.dst = dst


def can_transition(src: TaskState, dst: TaskState) -> bool:
    return dst in ALLOWED[src]


def check_transition(src: TaskState, dst: TaskState) -> None:
    if not can_transition(src, dst):
        raise InvalidTransition(src, dst)


class RayStatus(StrEnum):
    """Ray Jobs status of one attempt (mirrors ``ray.job_submission.JobStatus``)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    def is_terminal(self) -> bool:
        return self in (RayStatus.SUCCEEDED, RayStatus.FAILED, RayStatus.STOPPED)


class FailureKind(StrEnum):
    INSUFFICIENT_RESOURCES = "INSUFFICIENT_RESOURCES"
    CLUSTER_LOST = "CLUSTER_LOST"
    USER_ERROR = "USER_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    UNKNOWN = "UNKNOWN"
    # Argus stopped the attempt to make room for a higher-priority gang (never read from
    # Ray's text): retried, and not counted against ``max_attempts``.
    PREEMPTED = "PREEMPTED"
    # Argus stopped the attempt when it ran past the task's ``max_runtime_s``: final.
    TIME_LIMIT = "TIME_LIMIT"

    @property
    def retryable(self) -> bool:
        return self in (FailureKind.INSUFFICIENT_RESOURCES, FailureKind.CLUSTER_LOST,
                        FailureKind.PREEMPTED)


class PipelineState(StrEnum):
    # shown (never stored) for a RUNNING pipeline none of whose stages has started: every
    # stage's task still waits (BLOCKED, QUEUED, PENDING_RESOURCES); see get_pipeline in
    # service/store/sql/queries.sql
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
