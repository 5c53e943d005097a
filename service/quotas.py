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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    max_running_tasks: int = 0  # 0: no limit
    max_gpus: int = 0  # 0: no limit

    def __post_init__(self) -> None:
        for name in ("max_running_tasks", "max_gpus"):
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
