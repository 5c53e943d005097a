"""Per-user limits: may this user start one more task now? (pure policy, no I/O)

Each user may have at most ``max_running_tasks`` tasks and ``max_gpus`` GPUs on the
cluster at once (0: no limit), counted over the user's SUBMITTING, SUBMITTED and
RUNNING tasks (a gang's GPUs are ``nnodes x n_gpus_per_node``, held or about to be).
A task its owner's limit holds back waits with a reason that says so; the scheduler
checks this before the gang check, and such a task neither blocks other users' tasks
nor holds the starvation guard: the owner's own running work, not the cluster, is what
it waits for.

A disabled user's queued tasks wait the same way until an admin enables the user again
(or cancels them); tasks without an owner (none after start-up) are not limited.

What a user may *store* is limited at submission (``submit_refusal``): at most
``max_waiting_tasks`` tasks waiting (QUEUED or PENDING_RESOURCES) and at most
``max_spec_bytes_per_day`` bytes of JobSpecs (the raw YAML plus its normalised JSON, both
kept for good) submitted in the last day, counted in hourly buckets. A submission over
either is refused (the API answers 429 with ``Retry-After``); nothing already accepted is
touched. Admins are exempt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

HOUR_S = 3600
WINDOW_HOURS = 24  # the byte quota's window: this hour and the 23 before it
# a refusal for too many waiting tasks cannot know when one starts: ask again after this
WAITING_RETRY_S = 60


@dataclass(frozen=True, slots=True)
class Limits:
    max_running_tasks: int = 0  # 0: no limit
    max_gpus: int = 0  # 0: no limit
    # what a user may store (0: no limit); defaults that stop a flood, far above real use
    max_waiting_tasks: int = 1000
    max_spec_bytes_per_day: int = 64 << 20

    def __post_init__(self) -> None:
        for name in ("max_running_tasks", "max_gpus", "max_waiting_tasks",
                     "max_spec_bytes_per_day"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


@dataclass(slots=True)
class Load:
    """What one user has on the cluster (or is being submitted) right now."""

    running_tasks: int = 0
    gpus: int = 0

    def add(self, gpus: int) -> None:
        self.running_tasks += 1
        self.gpus += gpus


def load_by_user(active: Iterable[tuple[str | None, int]]) -> dict[str, Load]:
    """``{user: Load}`` from ``(owner, gang GPUs)`` of every active task."""
    out: dict[str, Load] = {}
    for user, gpus in active:
        if user is not None:
            out.setdefault(user, Load()).add(gpus)
    return out


def hold_reason(user: str | None, load: Load | None, limits: Limits, gang_gpus: int, *,
                enabled: bool = True) -> str | None:
    """Why the owner's limits keep a task of ``gang_gpus`` GPUs from starting now, or
    None when they let it start (the cluster may still have no room)."""
    if user is None:
        return None
    if not enabled:
        return (f"user {user} is disabled: the task waits until an admin enables the user "
                "again or cancels it")
    load = load or Load()
    cap_tasks, cap_gpus = limits.max_running_tasks, limits.max_gpus
    if cap_gpus and gang_gpus > cap_gpus:
        return (f"needs {gang_gpus} GPUs, more than user {user}'s limit of {cap_gpus} GPUs: "
                "it cannot start unless the limit is raised")
    if cap_tasks and load.running_tasks >= cap_tasks:
        return f"user {user} runs {load.running_tasks} of {cap_tasks} tasks allowed"
    if cap_gpus and load.gpus + gang_gpus > cap_gpus:
        return (f"user {user} uses {load.gpus} of {cap_gpus} GPUs allowed; "
                f"this task needs {gang_gpus}")
    return None


@dataclass(frozen=True, slots=True)
class QuotaRefusal:
    """A submission the owner's storage quota refuses: which limit, why, when to retry."""

    limit: str  # the key in v2.users.limits
    message: str
    retry_after_s: int


def window_start_hour(now: float) -> int:
    """The first hourly bucket the byte quota counts at ``now``."""
    return int(now // HOUR_S) - (WINDOW_HOURS - 1)


def submit_refusal(user: str, limits: Limits, *, waiting: int,
                   hourly_bytes: Sequence[tuple[int, int]], new_bytes: int,
                   now: float) -> QuotaRefusal | None:
    """Whether ``user`` may add one more task of ``new_bytes`` JobSpec bytes, having
    ``waiting`` tasks waiting and ``hourly_bytes`` ((hour, bytes), oldest first, from
    ``window_start_hour(now)`` on) stored. None: accepted."""
    cap = limits.max_waiting_tasks
    if cap and waiting >= cap:
        return QuotaRefusal(
            "max_waiting_tasks",
            f"user {user} has {waiting} tasks waiting, the limit (max_waiting_tasks "
            f"{cap}); submit again once some have started, or cancel some",
            WAITING_RETRY_S)
    cap = limits.max_spec_bytes_per_day
    stored = sum(b for _, b in hourly_bytes)
    if not cap or stored + new_bytes <= cap:
        return None
    retry = WINDOW_HOURS * HOUR_S  # a JobSpec larger than the whole day's quota
    left = stored
    for hour, size in hourly_bytes:  # the oldest hours leave the window first
        left -= size
        if left + new_bytes <= cap:
            retry = max(1, math.ceil((hour + WINDOW_HOURS) * HOUR_S - now))
            break
    return QuotaRefusal(
        "max_spec_bytes_per_day",
        f"user {user} stored {stored} bytes of JobSpecs in the last day; this one "
        f"({new_bytes} bytes) would pass the limit (max_spec_bytes_per_day {cap})",
        retry)
