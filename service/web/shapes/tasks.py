"""The shapes of tasks, attempts, events, curves, the queue, health and errors (answers),
and of a priority change (a request)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, create_model

from service.domain.reasons import WaitKind
from service.domain.states import FailureKind, RayStatus, TaskState
from service.jobspec.generate import problem, rule
from service.jobspec.shown import SHOWN
from service.policy.dependencies import Condition, OnUnsatisfiable
from service.policy.priorities import MAX_PRIORITY, MIN_PRIORITY, range_problem
from service.web.api.params import SQLITE_MAX_INT
from service.web.shapes.common import Answer, EstimateBasis, Request, Timestamp, Workload, at


class ErrorDetail(Answer):
    field: str | None = None
    message: str | None = None


class ErrorBody(Answer):
    code: Annotated[str, Field(examples=["bad_request", "not_found"])]
    message: str
    details: list[ErrorDetail]


class Error(Answer):
    """Every error answer: a code, a message, and the offending fields."""

    error: ErrorBody


class Submitted(Answer):
    task_id: str
    state: Annotated[TaskState, Field(description="QUEUED, or BLOCKED when it has after "
                                                  "(dependencies)")]


class AttemptNode(Answer):
    """a node the attempt ran on, as the scheduler first saw it there"""

    name: Annotated[str, Field(examples=["gpu-07"])]
    role: Annotated[Literal["driver", "gang"], Field(description=(
        "driver: the node its Ray driver ran on; gang: a node its placement groups held "
        "GPUs on"))]
    gpus: Annotated[float, Field(ge=0, description="GPUs held there (gang; 0 for driver)")]
    seen_at: Timestamp = None


class Attempt(Answer):
    attempt_no: Annotated[int, Field(ge=1)]
    ray_submission_id: Annotated[str, Field(examples=["mvp2-ppo-20251223-143201-7f3a--a01"])]
    ray_status: RayStatus | None
    failure_kind: FailureKind | None = None
    message: Annotated[str | None, Field(description=(
        "Ray's message (a failed job's quotes its driver log's tail): the task's owner and "
        "admins only; null for anyone else"))] = None
    message_hidden: Annotated[bool, Field(description=(
        "true when message was withheld from the caller (not the task's owner nor an "
        "admin)"))] = False
    exit_code: int | None = None
    submitted_at: Timestamp = None
    start_time: Timestamp = None
    end_time: Timestamp = None
    stop_requested: bool = False
    nodes: Annotated[list[AttemptNode] | None, Field(description=(
        "the nodes it ran on (driver and gang), by name, as first seen; in GET a task "
        "(its latest attempt) and the attempts listing, null in task lists"))] = None


class Progress(Answer):
    """read from the attempt's driver log (verl's step:N lines)"""

    attempt_no: int
    step: Annotated[int | None, Field(description="verl's global step")]
    total_steps: Annotated[int | None, Field(description=(
        "from the log (Total training steps), else the JobSpec's total_training_steps"))]
    fraction: Annotated[float | None, Field(ge=0, le=1)]
    resumed_from: Annotated[int | None, Field(
        description="the checkpoint step this attempt resumed from")]
    rate_steps_per_s: Annotated[float | None, Field(
        description="this attempt's own steps; while RUNNING")]
    eta_s: Annotated[float | None, Field(description="while RUNNING")]
    eta_at: Timestamp
    last_step_at: Timestamp


class DesiredResources(Answer):
    nnodes: int | None = None
    n_gpus_per_node: int | None = None
    total_gpus: int | None = None


class Dependency(Answer):
    task_id: str | None = None
    condition: Condition | None = None
    state: TaskState | None = None


class TaskPipeline(Answer):
    pipeline_id: str
    stage: str


PRIORITY_ABOUT = ("higher is admitted first; a user may ask for up to the configured "
                  f"max_user_priority, an admin for up to {MAX_PRIORITY}")
Priority = Annotated[int, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY, description=PRIORITY_ABOUT)]


class _Task(Answer):
    task_id: str
    state: TaskState
    workload: Workload
    user: str | None = None
    desired_resources: DesiredResources
    latest_attempt: Attempt | None = None
    error_summary: Annotated[str | None, Field(description=(
        "why the task ended as it did; to the task's owner and admins with the line it "
        "quotes from the job's output, to anyone else in Argus's words and the failure "
        "kind only"))] = None
    pending_reason: str | None = None
    reason_kind: Annotated[WaitKind | None, Field(description=(
        "the kind of pending_reason while the task is runnable (new: not examined yet); "
        "else null"))] = None
    queue_position: Annotated[int | None, Field(description=(
        "1-based place among runnable tasks, in admission order (priority, then FIFO)"))
                              ] = None
    priority: Priority = 0
    max_runtime_s: Annotated[float | None, Field(description=(
        "each attempt's time limit in seconds from its start (stopped past it: "
        "TIME_LIMIT); null: none"))] = None
    next_run_at: Timestamp = None
    estimated_start: at(
        "when the scheduler's last plan expects a waiting task to start "
        "(v2.scheduler.reservations on): from run history to the minute, else the time "
        "limits' bound; null: no estimate (estimate_basis says why)") = None
    estimate_basis: Annotated[EstimateBasis | None, Field(description=(
        "what estimated_start comes from: time_limits (every run before it ends at its "
        "limit), run_history (runs end as their like did lately), unknown (the plan has no "
        "start for it: no limit to plan from, or too deep in the queue); null: the task "
        "does not wait"))] = None
    estimated_start_bound: at(
        "the start the time limits give (every run before it ending at its limit), as the "
        "plan stands: newer work of a higher priority may still move it; null: no "
        "estimate") = None
    cancel_requested: bool = False
    created_at: Timestamp = None
    updated_at: Timestamp = None
    progress: Annotated[Progress | None, Field(description=(
        "one task (GET) and the queue's running tasks: how far the latest attempt got; "
        "null before its first step line"))] = None
    after: Annotated[list[Dependency], Field(description="GET one task: its dependencies")
                     ] = []
    on_unsatisfiable: OnUnsatisfiable = OnUnsatisfiable.CANCEL
    waiting_on: Annotated[str | None, Field(
        description="a BLOCKED task: why it waits (after <task> (<state>))")] = None
    pipeline: Annotated[TaskPipeline | None, Field(
        description="a pipeline's stage: which pipeline, which stage")] = None


Task: type[Answer] = create_model(  # the JobSpec's shown fields (SHOWN): one each
    "Task", __base__=_Task,
    **{shown.name: (Annotated[shown.type, Field(description=shown.about)], shown.empty())
       for shown in SHOWN})


class Series(Answer):
    """one metric over all attempts on one step axis (a later attempt replaces the earlier
    ones from its first step); downsampled to v2.progress.max_points per attempt"""

    key: str
    steps: list[int]
    values: list[float]
    attempts: list[int]


class Curves(Answer):
    task_id: str
    keys: Annotated[list[str], Field(description="every metric the task's attempts logged")]
    series: list[Series]


def _priority(value: Any) -> int:
    # JSON has one number type: 260.0 is the integer 260 (as JSON Schema's "integer" says)
    if isinstance(value, float) and value.is_integer() and abs(value) <= SQLITE_MAX_INT:
        value = int(value)
    found = range_problem(value)
    if found:
        raise problem(found[:200])
    return value


class PriorityChange(Request):
    """A waiting task's new priority."""

    priority: Annotated[int, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY,
                                   description=PRIORITY_ABOUT), rule(_priority)]


class TaskList(Answer):
    tasks: list[Task]  # type: ignore[valid-type]
    next_cursor: Annotated[str | None, Field(
        description="pass as ?cursor= for the next page; null at the end")]


class AttemptList(Answer):
    task_id: str
    attempts: list[Attempt]


class Event(Answer):
    id: int
    ts: Timestamp
    type: Annotated[str, Field(description=(
        "STATE_TRANSITION, SUBMIT, RAY_STATUS_SYNC, RETRY_SCHEDULED, CANCEL_REQUESTED, "
        "PRIORITY_CHANGED, ..."))]
    payload: Annotated[dict[str, Any], Field(description=(
        "for transitions: from, to, reason; fields that quote the job or its owner's "
        "JobSpec (message, resolved) only to the task's owner and admins"))]


class EventList(Answer):
    task_id: str
    events: list[Event]


class CancelResult(Answer):
    task_id: str
    state: TaskState
    cancel_requested: bool = False


class FairShare(Answer):
    user: str | None
    gpus: Annotated[float, Field(description="GPUs held (with a half-life: decayed usage "
                                             "in GPU units)")]
    share: Annotated[float, Field(description="gpus / the cluster's GPUs")]
    weight: float
    weighted_share: Annotated[float, Field(description="share / weight")]


class Queue(Answer):
    pending: Annotated[list[Task], Field(  # type: ignore[valid-type]
        description="one page of the waiting tasks")]
    running: list[Task]  # type: ignore[valid-type]
    blocked: Annotated[list[Task], Field(description=(  # type: ignore[valid-type]
        "first page only: the oldest 100 tasks waiting on other tasks (after), apart from "
        "those waiting for GPUs"))] = []
    next_cursor: Annotated[str | None, Field(
        description="the next page of pending tasks (?cursor=); null: the last")]
    fair_share: Annotated[list[FairShare], Field(description=(
        "each user's share at the scheduler's last tick, the one served next first"))]


class SchedulerHealth(Answer):
    alive: Annotated[bool, Field(description=(
        "scheduler thread running (false on a standby: the leader schedules)"))] = False
    role: Annotated[Literal["leader", "standby"], Field(description=(
        "this instance leads (runs the scheduler) or stands by (PostgreSQL, several "
        "instances)"))] = "leader"
    ticks: int = 0
    errors: Annotated[int, Field(description="ticks that raised")] = 0
    last_tick_duration_s: float | None = None
    last_error: str | None = None


class Health(Answer):
    status: Annotated[Literal["ok", "degraded", "scheduler stopped"], Field(description=(
        "degraded: the database cannot be written now (disk full, read-only, locked); the "
        "service resumes by itself once it can"))]
    reason: Annotated[str, Field(description="why degraded")] = ""
    scheduler: SchedulerHealth | None


class Leader(Answer):
    holder: Annotated[str, Field(description="the leading instance: host:pid:random")]
    address: Annotated[str, Field(description="host:port it serves on")]
    since: Annotated[float, Field(description="when it took the lease (epoch s)")]
    epoch: Annotated[int, Field(description=(
        "the lease's epoch: +1 at every change of holder"))]
    renewed_at: Annotated[float, Field(description="its last renewal (epoch s)")]


class ServingInstance(Answer):
    holder: Annotated[str, Field(description="this instance: host:pid:random, per start")]
    address: Annotated[str, Field(description="host:port it serves on")]
    role: Annotated[Literal["leader", "standby"], Field(description=(
        "leader: this instance runs the scheduler and the other singletons; standby: it "
        "serves the API and takes over when the leader's lease is free (PostgreSQL)"))]
    leader: Annotated[Leader | None, Field(description=(
        "who leads, as this instance last read the lease (null: nobody ever did)"))]


class Readiness(Answer):
    status: Literal["ready", "not ready"]
    reasons: list[str]
    read_s: Annotated[float | None, Field(description=(
        "a probe read's latency through the read lane (null: past the deadline or "
        "failed)"))]
    work_s: Annotated[float | None, Field(
        description="a no-op's latency through the work lane")]
    instance: Annotated[ServingInstance | None, Field(description=(
        "the instance that answered and its database lease (null: an app run without "
        "one, as in tests)"))] = None
