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
    """Progress, as the API answers it."""

    attempt_no: int | None
    step: int | None
    total_steps: int | None
    fraction: float | None
    rate_steps_per_s: float | None
    eta_s: float | None
    resumed_from: int | None
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
    """CancelResult, as the API answers it."""

    task_id: str
    state: str
    cancel_requested: bool | None
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
class LogChunk:
    """Part of an attempt's driver log: ``text`` ends at byte ``end`` of the log (pass it as
    ``offset`` to get only what comes after)."""

    text: str
    attempt: int | None
    end: int | None
