"""The shapes of users, tokens and usage: a new user and a token request (requests), and
the answers."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationInfo, model_validator

from service.domain.states import FailureKind, RayStatus
from service.domain.timefmt import parse_time
from service.domain.users import (
    MAX_TOKEN_LIFETIME_S,
    MIN_TOKEN_LIFETIME_S,
    USER_NAME_RE,
    Role,
    label_problem,
    name_problem,
)
from service.domain.users import RESERVED_NAMES as _RESERVED
from service.jobspec.generate import problem, rule
from service.web.shapes.common import Answer, Request, Timestamp, TokenState, at

DEFAULT_LABEL = "default"
UserName = Annotated[str, Field(
    pattern=f"^{USER_NAME_RE.pattern}$",
    description=f"no '--', no '-' at the end; {', '.join(sorted(_RESERVED))} are reserved")]


class Limits(Answer):
    """0: no limit"""

    max_running_tasks: Annotated[int, Field(ge=0)] = 0
    max_gpus: Annotated[int, Field(ge=0)] = 0
    max_waiting_tasks: Annotated[int, Field(ge=0, description=(
        "tasks waiting at once (admins: exempt)"))] = 0
    max_spec_bytes_per_day: Annotated[int, Field(ge=0, description=(
        "JobSpec bytes stored per day (admins: exempt)"))] = 0


class User(Answer):
    name: UserName
    role: Role
    enabled: bool
    created_at: Timestamp = None
    disabled_at: Timestamp = None
    limits: Limits | None = None


class UserList(Answer):
    users: list[User]


def _name(value: Any) -> str:
    found = name_problem(value)
    if found:
        raise problem(found)
    return value


def _role(value: Any) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise problem(f"must be admin or user, got {str(value)[:40]!r}") from None


class NewUser(Request):
    """A user to create (then a token for them)."""

    name: Annotated[UserName, rule(_name)]
    role: Annotated[Role, rule(_role)] = Role.USER


class UserStatus(Answer):
    user: User
    changed: bool
    active_tasks: Annotated[int, Field(
        description="on the cluster: they run to their end")] = 0
    queued_tasks: Annotated[int, Field(
        description="not started while the user is disabled")] = 0
    effect: str


class _TokenFields(Answer):
    token_id: Annotated[str, Field(description="public: finds the token")]
    prefix: Annotated[str, Field(examples=["argus_3f9a1c2b7d4e"], description=(
        "what lists show of the token (the secret is never shown)"))]
    user: str
    label: str
    state: TokenState
    created_at: Timestamp = None
    last_used_at: at("recorded at most once a minute") = None
    expires_at: at("null: never") = None
    revoked_at: Timestamp = None


class Token(_TokenFields):
    pass


class MeToken(_TokenFields):
    """the token of the request"""

    bootstrap: Annotated[bool, Field(
        description="the token from the service's environment")] = False
    token_id: str | None = None
    prefix: Annotated[str | None, Field(
        description="null for the bootstrap token (it has no id)")] = None
    user: str | None = None
    label: str | None = None
    state: TokenState | None = None


class Me(Answer):
    name: str
    role: Role
    enabled: bool = True
    limits: Limits | None = None
    token: MeToken | None


class TokenList(Answer):
    user: str
    tokens: list[Token]


_BOTH = object()  # expires_at and expires_in_s both given


def _label(value: Any) -> str:
    found = label_problem(value)
    if found:
        raise problem(found)
    return value


def _expires_in(value: Any) -> float | None:
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not MIN_TOKEN_LIFETIME_S <= value <= MAX_TOKEN_LIFETIME_S):
        raise problem(f"must be a number of seconds in [{MIN_TOKEN_LIFETIME_S:.0f}, "
                      f"{MAX_TOKEN_LIFETIME_S:.0f}]")
    return float(value)


def _expires_at(value: Any, info: ValidationInfo) -> float | None:
    """Epoch seconds from ISO-8601 or epoch seconds, within the lifetime from
    ``context["now"]``."""
    if value is _BOTH:
        raise problem("give expires_at or expires_in_s, not both")
    if value is None:
        return None
    try:
        when = parse_time(str(value)) if isinstance(value, str | int | float) and not isinstance(
            value, bool) else None
    except ValueError as exc:
        raise problem(str(exc)) from None
    if when is None:
        raise problem("must be an ISO-8601 time")
    now = info.context["now"]
    if not now < when <= now + MAX_TOKEN_LIFETIME_S:
        raise problem(f"must be in the future and within {MAX_TOKEN_LIFETIME_S / 86400:.0f} "
                      "days")
    return when


class NewTokenRequest(Request):
    """A token to create: a label and an expiry (neither: it never expires)."""

    label: Annotated[str, Field(min_length=1, max_length=64), rule(_label)] = DEFAULT_LABEL
    # null is leaving it out (the rules say so); the schema states the values to send
    expires_at: Annotated[str, Field(
        json_schema_extra={"format": "date-time"},
        description="ISO-8601; or give expires_in_s; neither: never"), rule(_expires_at)
                          ] = None  # type: ignore[assignment]
    expires_in_s: Annotated[float, Field(ge=MIN_TOKEN_LIFETIME_S, le=MAX_TOKEN_LIFETIME_S),
                            rule(_expires_in)] = None  # type: ignore[assignment]

    @model_validator(mode="before")
    @classmethod
    def _one_expiry(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("expires_at") is not None and data.get(
                "expires_in_s") is not None:
            return {**{k: v for k, v in data.items() if k != "expires_in_s"},
                    "expires_at": _BOTH}
        return data

    def expiry(self, now: float) -> float | None:
        """When the token expires (epoch seconds), asked at ``now``; None: never."""
        if self.expires_in_s is not None:
            return now + self.expires_in_s
        return self.expires_at  # type: ignore[return-value] - the rule made it seconds


class NewToken(_TokenFields):
    token: Annotated[str, Field(description="the secret, shown once")]
    note: str = ""
    prefix: str | None = None  # type: ignore[assignment]
    user: str | None = None  # type: ignore[assignment]
    label: str | None = None  # type: ignore[assignment]
    state: TokenState | None = None  # type: ignore[assignment]


class RevokedToken(_TokenFields):
    changed: Annotated[bool, Field(description="false: it was revoked before")]
    prefix: str | None = None  # type: ignore[assignment]
    user: str | None = None  # type: ignore[assignment]
    label: str | None = None  # type: ignore[assignment]


class UsageUser(Answer):
    user: str | None = None
    gpu_seconds: float = 0
    gpu_hours: float = 0
    failed_gpu_seconds: Annotated[float, Field(
        description="the part spent in attempts that failed")] = 0
    tasks: int = 0
    attempts: int = 0
    running_attempts: Annotated[int, Field(description="counted up to now")] = 0


class UsageAttempt(Answer):
    attempt_no: int = 0
    ray_status: RayStatus | None = None
    failure_kind: FailureKind | None = None
    failed: bool = False
    running: bool = False
    start_time: Timestamp = None
    end_time: Timestamp = None
    counted_from: at("start, clipped to the window") = None
    counted_to: at("end (now while running), clipped") = None
    gpu_seconds: float = 0


class UsageTask(Answer):
    task_id: str | None = None
    user: str | None = None
    gpus: int = 0
    gpu_seconds: float = 0
    failed_gpu_seconds: float = 0
    attempts: list[UsageAttempt] = []


class Usage(Answer):
    from_: Annotated[Timestamp, Field(alias="from")]
    to: Timestamp
    generated_at: Timestamp = None
    users: list[UsageUser]
    tasks: Annotated[list[UsageTask], Field(description=(
        "the tasks that used the most GPU time in the window, most first"))]
    tasks_total: int
