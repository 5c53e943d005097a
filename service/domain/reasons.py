"""Why a runnable task waits, as a value: a kind plus the details its text is made of.

The planner and the scheduler decide a ``Reason``; the store writes its kind
(``tasks.reason_kind``) beside its text (``tasks.pending_reason``). Metrics, filters and
labels read the kind, people read the text. ``render`` is the one place the text is made
from the details: its wording may change without moving a metric or breaking a filter.

A runnable task with no reason yet (not examined by a tick) is of kind ``new``; a row
whose reason was written before kinds existed was classified once by migration 0013.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from service.domain.nodes import drained_node
from service.domain.timefmt import iso


class WaitKind(StrEnum):
    """The kinds of waiting (the ``reason`` label of ``argus_pending_tasks``, the
    ``reason=`` filter of the task lists)."""

    NEW = "new"  # not examined by a tick yet
    RESOURCES = "resources"  # no room now for the gang or its driver
    NEVER_FITS = "never_fits"  # even an idle cluster as it is could not take it
    USER_LIMIT = "user_limit"  # its owner's max_running_tasks / max_gpus
    USER_DISABLED = "user_disabled"  # its owner is disabled
    MAX_RUNNING = "max_running"  # the service-wide max_running_tasks
    STARVATION_GUARD = "starvation_guard"  # nodes are kept for a gang ahead
    RESERVED = "reserved"  # reservations: it would run into a task's reserved room
    BACKFILL_OFF = "backfill_off"  # first come, first served behind a gang that waits
    PREEMPTION = "preemption"  # tasks are stopped for it, or it was preempted
    RETRY_BACKOFF = "retry_backoff"  # a failed attempt's backoff
    RESUBMIT = "resubmit"  # an interrupted submit, to be submitted again
    CLUSTER_UNREACHABLE = "cluster_unreachable"  # Ray did not answer
    OTHER = "other"  # a reason written before kinds that no rule classified


NEVER_FITS = "can never fit this cluster as it is"


# -- details: one frozen value per wording ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class NoRoom:
    gang: str  # "1x4 GPUs (+8 CPUs per node)"
    free: str  # free resources per node
    driver: str | None = None  # the driver's needs when only its slot is missing


@dataclass(frozen=True, slots=True)
class NeverFits:
    gang: str
    capacity: str  # node capacity


@dataclass(frozen=True, slots=True)
class UserDisabled:
    user: str


@dataclass(frozen=True, slots=True)
class OverGpuLimit:
    user: str
    needs: int
    cap: int


@dataclass(frozen=True, slots=True)
class AtTaskLimit:
    user: str
    running: int
    cap: int


@dataclass(frozen=True, slots=True)
class AtGpuLimit:
    user: str
    used: int
    cap: int
    needs: int


@dataclass(frozen=True, slots=True)
class MaxRunning:
    limit: int


@dataclass(frozen=True, slots=True)
class Guard:
    holder: str  # the task the nodes are kept for
    priority: int
    nodes: str  # their labels
    guard_s: float
    preempting: bool = False  # its victims are stopping
    shadow: float | None = None  # the kept nodes are surely free by then


@dataclass(frozen=True, slots=True)
class BehindFifo:
    task_id: str
    priority: int


@dataclass(frozen=True, slots=True)
class ReservedFor:
    owner: str
    node: str
    start: float


@dataclass(frozen=True, slots=True)
class PlannedAhead:
    nodes: str


@dataclass(frozen=True, slots=True)
class Preempting:
    victims: str  # "t1 (priority 0), t2 (priority 0)"
    grace_s: float


@dataclass(frozen=True, slots=True)
class Preempted:
    attempt_no: int
    by: str | None  # ``attempts.preempted_for``: a task, or a drained node's mark
    note: str | None = None  # a drained node's reason


@dataclass(frozen=True, slots=True)
class Backoff:
    next_attempt: int
    not_before: float | None


@dataclass(frozen=True, slots=True)
class RetryAfterFailure:
    attempt_no: int
    failure: str  # the failure kind's value
    at: float


@dataclass(frozen=True, slots=True)
class Interrupted:
    attempt_no: int
    submission_id: str


@dataclass(frozen=True, slots=True)
class Unreachable:
    error: str


@dataclass(frozen=True, slots=True)
class Text:
    """A reason known only by its words (one written before kinds existed)."""

    text: str


@dataclass(frozen=True, slots=True)
class Cordoned:
    """A wait's details, and the cordoned nodes the gang would fit (issue 55)."""

    inner: Details
    nodes: str  # "node-b is cordoned: <reason>; node-c is drained: <reason>"


Details = (NoRoom | NeverFits | UserDisabled | OverGpuLimit | AtTaskLimit | AtGpuLimit
           | MaxRunning | Guard | BehindFifo | ReservedFor | PlannedAhead | Preempting
           | Preempted | Backoff | RetryAfterFailure | Interrupted | Unreachable | Text
           | Cordoned)


@dataclass(frozen=True, slots=True)
class Ahead:
    """What came first in admission order: tasks of higher priority, or users of a smaller
    fair share."""

    higher_priority: bool = False
    users: tuple[str, ...] = ()


# What a waiting task's start estimate comes from (the API's ``estimate_basis``).
TIME_LIMITS = "time_limits"  # every run ends at its limit: a bound, as the plan stands
RUN_HISTORY = "run_history"  # runs end when their like ended lately: good to minutes
UNKNOWN = "unknown"  # no estimate: nothing to plan from (no limit), or not planned


@dataclass(frozen=True, slots=True)
class Planned:
    """The planned start of a waiting task (from time limits), and the expected one (from
    run history) when known."""

    bound: float
    expected: float | None = None

    @classmethod
    def of(cls, bound: float, expected: float | None) -> Planned:
        """A start estimate: from run history where the history moved it before the
        limits' bound (a model with no run of the task's kind expects the bound itself)."""
        return cls(bound, expected if expected is not None and expected < bound else None)

    @property
    def start(self) -> float:
        """When the task is expected to start: as run history says (never past the
        limits' bound), else the bound."""
        return self.bound if self.expected is None else min(self.expected, self.bound)

    @property
    def basis(self) -> str:
        return TIME_LIMITS if self.expected is None else RUN_HISTORY


@dataclass(frozen=True, slots=True)
class Reason:
    kind: WaitKind
    details: Details
    ahead: Ahead | None = None
    planned: Planned | None = None

    @property
    def text(self) -> str:
        return render(self)

    def behind(self, ahead: Ahead | None) -> Reason:
        return Reason(self.kind, self.details, ahead, self.planned)

    def planned_by(self, planned: Planned | None) -> Reason:
        return Reason(self.kind, self.details, self.ahead, planned)


# -- the one renderer ---------------------------------------------------------------------------
def _details_text(d: Details) -> str:
    match d:
        case NoRoom(gang, free, None):
            return f"needs {gang}; free: {free}"
        case NoRoom(gang, free, driver):
            return f"no free driver slot ({driver}) next to {gang}; free: {free}"
        case NeverFits(gang, capacity):
            return f"{NEVER_FITS}: needs {gang} and a driver slot; node capacity: {capacity}"
        case UserDisabled(user):
            return (f"user {user} is disabled: the task waits until an admin enables the user "
                    "again or cancels it")
        case OverGpuLimit(user, needs, cap):
            return (f"needs {needs} GPUs, more than user {user}'s limit of {cap} GPUs: "
                    "it cannot start unless the limit is raised")
        case AtTaskLimit(user, running, cap):
            return f"user {user} runs {running} of {cap} tasks allowed"
        case AtGpuLimit(user, used, cap, needs):
            return f"user {user} uses {used} of {cap} GPUs allowed; this task needs {needs}"
        case MaxRunning(limit):
            return f"max_running_tasks ({limit}) reached"
        case Guard(holder, priority, nodes, guard_s, preempting, shadow):
            why = ("lower-priority tasks are being preempted for it" if preempting else
                   f"runnable for over {guard_s:g}s")
            text = (f"waiting behind {holder} (priority {priority}), {why}: "
                    f"nodes {nodes} are kept for it (starvation guard)")
            if shadow is not None:
                text += (f"; they are free by {iso(shadow)} at the latest: a task whose "
                         "max_runtime_s ends by then may run there meanwhile")
            return text
        case BehindFifo(task_id, priority):
            return (f"waiting behind {task_id} (priority {priority}): "
                    "first come, first served (backfill off)")
        case ReservedFor(owner, node, start):
            return (f"waiting behind {owner}: nodes {node} are reserved for it from "
                    f"{iso(start)}; a task whose max_runtime_s ends by then may run there")
        case PlannedAhead(nodes):
            return f"fits now on nodes {nodes}, but they are planned for tasks ahead of it"
        case Preempting(victims, grace_s):
            return (f"preempting {victims} to make room (waited past "
                    f"preemption_grace_s={grace_s:g})")
        case Preempted(n, by, note):
            node = drained_node(by)
            if node is not None:
                why = f"node {node} drained" + (f": {note}" if note else "")
                return (f"attempt {n} preempted ({why}); attempt {n + 1} as soon as it fits "
                        "on another node (resumes from its checkpoint)")
            return (f"attempt {n} preempted for {by}; attempt {n + 1} "
                    "as soon as it fits again (resumes from its checkpoint)")
        case Backoff(n, not_before):
            return (f"retry backoff: attempt {n} not before {iso(not_before)}; "
                    "the room it needs is kept for it")
        case RetryAfterFailure(n, failure, at):
            return f"attempt {n} failed ({failure}); attempt {n + 1} not before {iso(at)}"
        case Interrupted(n, sid):
            return (f"attempt {n} never reached Ray (interrupted submit); "
                    f"it will be submitted again as {sid}")
        case Unreachable(error):
            return f"Ray cluster unreachable: {error}"
        case Text(text):
            return text
        case Cordoned(inner, nodes):
            return f"{_details_text(inner)}; {nodes}"
    raise TypeError(f"no wording for {d!r}")


def _ahead_text(ahead: Ahead | None) -> str:
    if ahead is None:
        return ""
    if ahead.higher_priority:
        return "; after tasks of higher priority"
    if not ahead.users:
        return ""
    shown = ", ".join(ahead.users[:3]) + (" ..." if len(ahead.users) > 3 else "")
    return f"; after users {shown} (smaller fair share)"


def _planned_text(planned: Planned | None) -> str:
    if planned is None:
        return ""
    if planned.expected is None:
        return f"; planned start by {iso(planned.bound)} (from time limits)"
    likely = iso(round(planned.start / 60) * 60)  # good to minutes
    return (f"; expected start about {likely} (from run history), by {iso(planned.bound)} "
            "at the latest (from time limits)")


def render(reason: Reason) -> str:
    """The text people read, made from the reason's details (the only place it is made)."""
    return _details_text(reason.details) + _ahead_text(reason.ahead) + \
        _planned_text(reason.planned)


def as_text(text: str, kind: WaitKind = WaitKind.OTHER) -> Reason:
    """A reason known only by its words (tests, tools: the scheduler builds typed ones)."""
    return Reason(kind, Text(text))


def parse_kind(value: str) -> WaitKind:
    """A ``reason=`` filter's value as a kind (ValueError: not one of ``WaitKind``)."""
    try:
        return WaitKind(value)
    except ValueError:
        raise ValueError(f"reason must be one of {', '.join(k.value for k in WaitKind)}, "
                         f"got {value!r}") from None
