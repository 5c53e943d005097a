"""The typed rows the store returns and takes: plain data, no I/O. The values its writes
take or return that are not rows (a cancel's outcome, a retry's plan, ...) are
``service.domain.writes``'.

Times are epoch seconds. How they are shown (ISO dates, JSON) is the HTTP layer's
business (``service.web.api.views``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from service.domain.newtask import SPEC_COLUMNS, stored_spec
from service.domain.progress import Progress
from service.domain.states import PipelineState, TaskState
from service.domain.users import Role

MAX_SEQ = 2**63 - 1  # SQLite's largest integer: a task seq (and cursor) is at most this


def _decoded_spec(row: ActiveRow) -> Mapping[str, Any]:
    """``row.spec``: its ``spec_json`` read back by ``stored_spec`` (its ``SPEC_COLUMNS``
    from the row), once: kept in the row's ``_spec``."""
    if row._spec is None:
        spec = {} if row.spec_json is None else stored_spec(
            row.spec_json, {k: getattr(row, k) for k in SPEC_COLUMNS})
        object.__setattr__(row, "_spec", spec)
        return spec
    return row._spec


@dataclass(frozen=True, slots=True)
class AttemptNode:
    """A node an attempt ran on, as the scheduler first saw it there (``attempt_nodes``):
    ``role`` is ``driver`` (the driver's node) or ``gang`` (its placement groups hold
    ``gpus`` GPUs there)."""

    name: str
    role: str
    gpus: float
    seen_at: float


@dataclass(frozen=True, slots=True)
class AttemptRow:
    task_id: str
    attempt_no: int
    ray_submission_id: str
    ray_status: str | None
    failure_kind: str | None
    message: str | None
    created_at: float
    submitted_at: float | None
    start_time: float | None
    end_time: float | None
    exit_code: int | None
    stop_requested: bool
    preempted_for: str | None = None  # stopped for this task, or a drained node (drain_mark)
    nodes: tuple[AttemptNode, ...] | None = None  # where it ran; None: not read


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A task with its latest attempt and, while it is runnable, its place in the queue."""

    seq: int  # FIFO order; also what list cursors point at
    task_id: str
    state: TaskState
    workload: str
    user: str | None
    nnodes: int
    n_gpus_per_node: int
    created_at: float
    updated_at: float
    next_run_at: float
    error_summary: str | None
    pending_reason: str | None
    cancel_requested_at: float | None
    latest_attempt: AttemptRow | None
    queue_position: int | None  # 1-based among runnable tasks (admission order); or None
    priority: int = 0  # higher is admitted first
    max_runtime_s: float | None = None  # each attempt's time limit (None: none)
    reason_kind: str | None = None  # reasons.WaitKind of pending_reason (None: none)
    # the JobSpec's shown fields as submitted (``service.jobspec.shown.SHOWN``: name ->
    # value, None where the stored spec has none), read by the task projection's
    # ``{shown_spec}``: a shown field needs no field of its own on this row
    spec: Mapping[str, Any] = field(default_factory=dict)

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_requested_at is not None


@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    task_id: str
    ts: float
    event_type: str
    payload: dict[str, Any]


# -- users and tokens ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserRow:
    name: str
    role: Role
    enabled: bool
    created_at: float
    disabled_at: float | None


@dataclass(frozen=True, slots=True)
class TokenRow:
    """A token as lists show it: never its secret, nor its hash."""

    token_id: str
    user: str
    label: str
    created_at: float
    last_used_at: float | None
    expires_at: float | None
    revoked_at: float | None


@dataclass(frozen=True, slots=True)
class TokenAuth:
    """What checking a presented token needs: its hash, state and its user's."""

    token_id: str
    user: str
    sha256: str
    role: Role
    user_enabled: bool
    expires_at: float | None
    revoked_at: float | None
    last_used_at: float | None


@dataclass(frozen=True, slots=True)
class CreatedToken:
    """A token just made: ``secret`` is the whole token, shown to its owner once."""

    row: TokenRow
    secret: str


@dataclass(frozen=True, slots=True)
class UserStatusChange:
    """A user enabled or disabled, and what of theirs is on the queue or the cluster."""

    user: UserRow
    changed: bool  # False: the user already was in that state
    active_tasks: int  # SUBMITTING / SUBMITTED / RUNNING: they run to their end
    runnable_tasks: int  # QUEUED / PENDING_RESOURCES: held while the user is disabled


# -- rows the scheduler works with -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunnableRow:
    seq: int
    task_id: str
    state: TaskState
    user: str | None
    nnodes: int
    n_gpus_per_node: int
    runnable_since: float
    pending_reason: str | None
    priority: int = 0
    retry_not_before: float | None = None  # in a retry backoff until then (kept in place)
    attempt_no: int = 0  # the latest attempt (0: none yet)
    max_runtime_s: float | None = None  # time limit of an attempt (None: none)
    reason_kind: str | None = None  # reasons.WaitKind of pending_reason (None: none)


@dataclass(frozen=True, slots=True)
class ActiveRow:
    """A SUBMITTING / SUBMITTED / RUNNING task with its latest attempt."""

    task_id: str
    state: TaskState
    user: str | None
    nnodes: int
    n_gpus_per_node: int
    attempt_no: int
    ray_submission_id: str
    ray_status: str | None
    message: str | None
    start_time: float | None
    submitted_at: float | None
    cancel_requested: bool
    stop_requested: bool
    priority: int = 0
    preemptions: int = 0  # earlier attempts preempted (not counted against max_attempts)
    resource_failures: int = 0  # consecutive INSUFFICIENT_RESOURCES failures before this
    checkpointing: bool = False  # the JobSpec's save_freq >= 1: a restart resumes
    preempted_for: str | None = None  # stopped for this task, or a drained node (drain_mark)
    max_runtime_s: float | None = None  # time limit of the attempt (None: none)
    # how long the task had waited when this attempt was claimed (a retry keeps it)
    waited_s: float = 0.0
    spec_json: str | None = None  # the JobSpec as stored (``spec``)
    _spec: Mapping[str, Any] | None = field(default=None, init=False, repr=False,
                                             compare=False)  # ``spec`` once decoded

    @property
    def spec(self) -> Mapping[str, Any]:
        """The task's JobSpec as submitted, decoded on first use (an attempt's end reads
        its retry budget, ``max_attempts``, here) and once; empty without it."""
        return _decoded_spec(self)

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    @property
    def deadline(self) -> float | None:
        """When the attempt's time limit runs out (None: no limit, or not started)."""
        if self.max_runtime_s is None or self.start_time is None:
            return None
        return self.start_time + self.max_runtime_s

    def past_deadline(self, now: float) -> bool:
        """Whether the attempt's time limit has run out at ``now``."""
        deadline = self.deadline
        return deadline is not None and now >= deadline


@dataclass(frozen=True, slots=True)
class Claim:
    """An attempt claimed for submission (task now SUBMITTING, attempt row committed)."""

    task_id: str
    attempt_no: int
    ray_submission_id: str
    jobspec_yaml: str
    spec: dict[str, Any]
    user: str | None


# -- the web console -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A console sign-in: who, with which token (None: the bootstrap token, whose
    fingerprint is ``token_fp``), its form token, and until when it lives at most."""

    user: str
    token_id: str | None
    token_fp: str | None
    csrf: str
    created_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class PendingRow:
    """A runnable task as the console's queue page shows it."""

    seq: int
    task_id: str
    state: TaskState
    workload: str
    user: str | None
    nnodes: int
    n_gpus_per_node: int
    created_at: float
    runnable_since: float
    next_run_at: float
    pending_reason: str | None
    cancel_requested_at: float | None
    attempts: int
    queue_position: int  # 1-based in the whole queue, whatever the filter
    priority: int = 0  # higher is admitted first
    reason_kind: str | None = None  # reasons.WaitKind of pending_reason (None: none)
    labels_json: str | None = None  # the JobSpec's labels as stored (JSON; ``labels``)

    @property
    def labels(self) -> dict[str, str]:
        """The JobSpec's labels (key -> value; none: empty)."""
        return json.loads(self.labels_json) if self.labels_json else {}


@dataclass(frozen=True, slots=True)
class PendingGroup:
    """Runnable tasks of one workload, owner and kind of pending reason
    (``reasons.WaitKind``'s value; ``new``: none yet); ``since``: the oldest's
    ``runnable_since``."""

    workload: str
    user: str | None
    kind: str
    tasks: int
    since: float | None


@dataclass(frozen=True, slots=True)
class Admitted:
    """An attempt claimed for submission, and how long its task had waited for it."""

    workload: str
    user: str | None
    waited_s: float
    at: float


@dataclass(frozen=True, slots=True)
class FollowState:
    """Where the log follower left an attempt: the characters of its driver log read,
    its progress, and each metric's (stride, points received) and kept steps (empty when
    never followed)."""

    jobspec_total: int | None
    log_offset: int
    progress: Progress
    series: Mapping[str, tuple[int, int]]
    steps: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class ProgressRow:
    """The progress of a task's latest attempt, with the task's state."""

    task_id: str
    state: TaskState
    attempt_no: int
    progress: Progress
    updated_at: float


@dataclass(frozen=True, slots=True)
class TaskPageRow:
    """A task's page as one statement reads it (``Store.task_page``): the task, its
    latest attempt's progress, what it does when its dependencies cannot hold, its
    pipeline stage ``(pipeline_id, stage)``, and whether it has dependencies (their rows
    are a read of their own, made only then)."""

    task: TaskRow
    progress: ProgressRow | None
    on_unsatisfiable: str
    stage: tuple[str, str] | None
    has_deps: bool


# --- pipelines (service.store.pipelines) ---

@dataclass(frozen=True)
class PipelineRow:
    pipeline_id: str
    name: str
    user: str
    state: PipelineState
    created_at: float
    updated_at: float
    ended_at: float | None
    cancel_requested_at: float | None


@dataclass(frozen=True)
class StageRow:
    stage: str
    task_id: str
    position: int
    skipped: bool
    state: TaskState
    error_summary: str | None
    attempt_no: int


# --- webhooks and their deliveries (service.store.webhooks) ---

@dataclass(frozen=True, slots=True)
class WebhookRow:
    hook_id: str
    owner: str
    url: str
    events: tuple[str, ...]
    format: str  # standard | slack
    secret: str  # never leaves the service but in the answer that created the hook
    created_at: float


@dataclass(frozen=True, slots=True)
class TryRow:
    """One try of a delivery and its outcome."""

    attempt: int
    at: float
    status: int | None  # HTTP status (None: no answer)
    error: str | None


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    delivery_id: int
    hook_id: str
    event_id: int
    event_type: str
    event_ts: float
    state: str  # PENDING | DELIVERED | FAILED
    attempts: int
    next_at: float
    last_attempt_at: float | None
    last_status: int | None
    last_error: str | None
    ended_at: float | None
    tries: tuple[TryRow, ...] = ()  # oldest first


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A delivery the worker holds (a lease) for one try, ``attempts`` counting it."""

    delivery_id: int
    hook: WebhookRow
    event_id: int
    event_type: str
    event_ts: float
    data_json: str
    attempts: int
