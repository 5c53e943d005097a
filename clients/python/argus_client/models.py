"""Typed answers of the API (dataclasses). Each keeps the JSON it was read from in
``raw`` (what ``argus --json`` prints, and fields newer than this package)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Self

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELED"})


class _Model:
    """``from_json``: the dataclass's fields taken from a JSON object (absent: None)."""

    _nested: dict[str, type[_Model]] = {}
    _lists: dict[str, type[_Model]] = {}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        values: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name == "raw":
                values["raw"] = data
                continue
            value = data.get(f.name.rstrip("_"))
            if f.name in cls._nested and value is not None:
                value = cls._nested[f.name].from_json(value)
            elif f.name in cls._lists:
                value = [cls._lists[f.name].from_json(v) for v in value or []]
            values[f.name] = value
        return cls(**values)


@dataclass(frozen=True)
class Submitted(_Model):
    """Submitted, as the API answers it."""

    task_id: str
    state: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Progress(_Model):
    """Progress, as the API answers it. ``eta_s`` counts down with the server's clock at
    each read: it is left out of ``==`` (``eta_at`` is not), so that two reads of a task
    that did not move compare equal (``wait``'s ``on_update`` is called on a change)."""

    attempt_no: int | None
    step: int | None
    total_steps: int | None
    fraction: float | None
    rate_steps_per_s: float | None
    eta_s: float | None = field(compare=False)
    resumed_from: int | None = None
    eta_at: str | None = None
    last_step_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Attempt(_Model):
    """Attempt, as the API answers it."""

    attempt_no: int
    ray_submission_id: str
    ray_status: str | None
    failure_kind: str | None
    message: str | None
    exit_code: int | None
    submitted_at: str | None
    start_time: str | None
    end_time: str | None
    # where it ran: [{"name", "role" (driver | gang), "gpus", "seen_at"}]; None in task lists
    nodes: list[dict[str, Any]] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Task(_Model):
    """Task, as the API answers it."""

    task_id: str
    state: str
    workload: str
    user: str | None
    priority: int | None
    queue_position: int | None
    pending_reason: str | None
    error_summary: str | None
    reason_kind: str | None  # the kind of pending_reason (a WaitKind value) while waiting
    max_runtime_s: float | None
    description: str | None
    labels: dict[str, str] | None  # the JobSpec's labels (key: value)
    max_attempts: int | None  # the JobSpec's retry budget (None: the configured one)
    estimated_start: str | None
    estimate_basis: str | None  # time_limits, run_history, unknown; None: not waiting
    estimated_start_bound: str | None
    next_run_at: str | None
    cancel_requested: bool | None
    created_at: str | None
    updated_at: str | None
    desired_resources: dict[str, int] | None
    latest_attempt: Attempt | None
    progress: Progress | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested = {"latest_attempt": Attempt, "progress": Progress}

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def total_gpus(self) -> int | None:
        return (self.desired_resources or {}).get("total_gpus")


@dataclass(frozen=True)
class TaskPage(_Model):
    """TaskPage, as the API answers it."""

    tasks: list[Task]
    next_cursor: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"tasks": Task}


@dataclass(frozen=True)
class FairShare(_Model):
    """FairShare, as the API answers it."""

    user: str | None
    gpus: float
    share: float
    weight: float
    weighted_share: float
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Queue(_Model):
    """Every page of the waiting tasks (the SDK follows ``next_cursor``) and the running."""

    pending: list[Task]
    running: list[Task]
    fair_share: list[FairShare]
    blocked: list[Task] = field(default_factory=list)  # waiting on other tasks (after)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"pending": Task, "running": Task, "fair_share": FairShare, "blocked": Task}


@dataclass(frozen=True)
class Event(_Model):
    """Event, as the API answers it."""

    id: int
    ts: str
    type: str
    payload: dict[str, Any]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class CancelResult(_Model):
    """What a cancel did: ``cancel_requested`` when the run is being stopped on the
    cluster; ``already_ended`` when the task had ended before (nothing changed)."""

    task_id: str
    state: str
    cancel_requested: bool | None
    already_ended: bool | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class User(_Model):
    """User, as the API answers it."""

    name: str
    role: str
    enabled: bool
    created_at: str | None
    disabled_at: str | None
    limits: dict[str, int] | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class UserStatus(_Model):
    """UserStatus, as the API answers it."""

    user: User
    changed: bool
    effect: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested = {"user": User}


@dataclass(frozen=True)
class Token(_Model):
    """Token, as the API answers it."""

    token_id: str | None
    prefix: str | None
    user: str | None
    label: str | None
    state: str | None
    created_at: str | None
    last_used_at: str | None
    expires_at: str | None
    revoked_at: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class TokenList(_Model):
    """TokenList, as the API answers it."""

    user: str
    tokens: list[Token]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"tokens": Token}


@dataclass(frozen=True)
class NewToken(_Model):
    """A created token: ``token`` is its secret, in this answer only."""

    token_id: str
    prefix: str
    user: str
    label: str
    expires_at: str | None
    token: str = field(repr=False)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class RevokedToken(_Model):
    """RevokedToken, as the API answers it."""

    token_id: str
    prefix: str
    state: str
    changed: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Me(_Model):
    """Me, as the API answers it."""

    name: str
    role: str
    limits: dict[str, int] | None
    token: dict[str, Any] | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class UsageUser(_Model):
    """UsageUser, as the API answers it."""

    user: str | None
    gpu_seconds: float
    gpu_hours: float
    failed_gpu_seconds: float
    tasks: int
    attempts: int
    running_attempts: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Usage(_Model):
    """Usage, as the API answers it."""

    from_: str | None
    to: str | None
    users: list[UsageUser]
    tasks: list[dict[str, Any]]
    tasks_total: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"users": UsageUser}


@dataclass(frozen=True)
class PipelineStage(_Model):
    """A stage of a pipeline: its task and that task's state (``skipped``: canceled
    because its dependency could never hold; ``attempts``: the task's latest attempt)."""

    stage: str
    task_id: str
    state: str
    skipped: bool
    error_summary: str | None
    attempts: int | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class PipelineEdge(_Model):
    """A dependency between two stages: ``to`` runs after ``from_`` (on ``condition``)."""

    from_: str
    to: str
    condition: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Pipeline(_Model):
    """A pipeline (docs/pipelines.md). ``stages`` and ``edges`` are empty in a list;
    ``canceled``: the stages' tasks a cancel request canceled (None but in its answer)."""

    pipeline_id: str
    name: str
    user: str
    state: str  # WAITING, RUNNING, SUCCEEDED, FAILED, CANCELED
    created_at: str | None
    updated_at: str | None
    ended_at: str | None
    cancel_requested: bool | None
    stages: list[PipelineStage]
    edges: list[PipelineEdge]
    canceled: list[str] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"stages": PipelineStage, "edges": PipelineEdge}

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class PipelineSubmitted(_Model):
    """A created pipeline: ``stages`` maps each stage's name to its task's id."""

    pipeline_id: str
    state: str
    stages: dict[str, str]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class PipelineList(_Model):
    """Pipelines, newest first (without their stages)."""

    pipelines: list[Pipeline]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"pipelines": Pipeline}


@dataclass(frozen=True)
class Webhook(_Model):
    """A webhook, as lists show it (never its secret)."""

    id: str
    owner: str
    url: str
    events: list[str]
    format: str
    created_at: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class NewWebhook(_Model):
    """A created webhook: ``secret`` signs its deliveries, in this answer only."""

    id: str
    owner: str
    url: str
    events: list[str]
    format: str
    created_at: str | None
    secret: str = field(repr=False)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class WebhookList(_Model):
    """WebhookList, as the API answers it."""

    webhooks: list[Webhook]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"webhooks": Webhook}


@dataclass(frozen=True)
class DeletedWebhook(_Model):
    """DeletedWebhook, as the API answers it (``deleted``: the hook's id)."""

    deleted: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Delivery(_Model):
    """One event's delivery to a webhook: ``outcome`` PENDING, DELIVERED or FAILED;
    ``tries``: each try's ``{attempt, at, status_code, error}``."""

    id: str
    event_id: int | None
    event_type: str
    event_at: str | None
    outcome: str
    attempts: int
    status_code: int | None
    error: str | None
    last_attempt_at: str | None
    next_retry_at: str | None
    ended_at: str | None
    tries: list[dict[str, Any]]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Deliveries(_Model):
    """A webhook and its recent deliveries, newest first."""

    webhook: Webhook
    deliveries: list[Delivery]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _nested = {"webhook": Webhook}
    _lists = {"deliveries": Delivery}


@dataclass(frozen=True)
class Curve(_Model):
    """One metric over all attempts on one step axis: ``values[i]`` at ``steps[i]``,
    logged by attempt ``attempts[i]``."""

    key: str
    steps: list[int]
    values: list[float]
    attempts: list[int]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Metrics(_Model):
    """A task's training curves: ``keys`` every metric it logged, ``series`` the chosen
    ones (by default a loss and a reward)."""

    task_id: str
    keys: list[str]
    series: list[Curve]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"series": Curve}

    def curve(self, key: str) -> Curve | None:
        return next((c for c in self.series if c.key == key), None)


@dataclass(frozen=True)
class LogChunk:
    """Part of an attempt's driver log: ``text`` ends at byte ``end`` of the log (pass it as
    ``offset`` to get only what comes after)."""

    text: str
    attempt: int | None
    end: int | None


@dataclass(frozen=True)
class Node(_Model):
    """A cluster node by name: ``state`` alive or dead, ``schedulable``, its GPUs,
    ``cordon`` (``{state, source, by, at, reason, requeue}``, None when schedulable) and
    ``health``
    (``{state, detail, checked_at}``)."""

    name: str
    state: str
    schedulable: bool
    node_id: str | None
    node_ip: str | None
    gpus_total: float | None
    gpus_free: float | None
    cordon: dict[str, Any] | None
    health: dict[str, Any] | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class NodeList(_Model):
    """NodeList, as the API answers it."""

    nodes: list[Node]
    observed_at: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"nodes": Node}


@dataclass(frozen=True)
class NodeEvent(_Model):
    """One event of a node: ``kind`` (NODE_CORDONED, NODE_DRAINED, NODE_RESUMED,
    NODE_QUARANTINED), ``source`` (operator, health, quarantine), ``by`` (None: the
    service), ``at``, ``reason``."""

    at: str | None
    kind: str
    source: str
    by: str | None
    reason: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class NodeEventList(_Model):
    """A node's events, newest first."""

    name: str
    events: list[NodeEvent]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _lists = {"events": NodeEvent}


@dataclass(frozen=True)
class NodeChanged(_Model):
    """A cordon, drain or resume done: ``cordon`` the state written (a resume: lifted)."""

    name: str
    action: str
    cordon: dict[str, Any]
    note: str | None = None  # a resume of a node whose health check still fails
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
