"""Retry policy for retryable attempt failures (pure).

``attempt_no`` is always the number of the attempt that just failed (1-based).

Two modes (``v2.scheduler.retry_mode``):

* ``when_fits`` (default): the task goes back into the admission scan at once, in its
  original place (priority, then submission order), and is submitted as soon as its gang
  fits *and* a short backoff has passed. The backoff is ``retry_min_backoff_s`` doubled
  for every consecutive INSUFFICIENT_RESOURCES failure of the task, capped at
  ``retry_max_backoff_s``: an outside submitter that keeps grabbing the GPUs between
  Argus's check and verl's cannot make Argus thrash, while a task whose GPUs are free
  again waits seconds, not a minute. While it waits out the backoff with room to start,
  the room is kept for it (nothing behind it takes it).
* ``timer`` (the seeds' behaviour): the task is out of the scan for ``delay`` (fixed
  ``retry_interval_s``, or exponential capped at ``retry_max_interval_s``), then runs
  when it fits; it keeps its place in the order, and its wait resumes from then.

A PREEMPTED attempt (Argus stopped it for a higher-priority gang) is retried with no
backoff and is not counted against ``max_attempts``.

In every mode the task keeps the wait it had before the attempt that failed
(``waited_s``): its ``runnable_since`` becomes the time it is back in the queue less that
wait, so the time it ran does not count as waiting and the time it waited is not lost.
What reads the wait (the starvation guard, the plan's reservations past it, which go by
the longest waiting, the preemption grace, the small gangs reserved after
``reserve_small_after_s``) sees it where it was in the queue. (With the wait counted from
the failure, a task that verl's fail-fast check stopped 30 s after it started waited its
whole turn again: on the trace bench's twelve full-size traces under the plan, fail-fast
tasks waited 142 min on average against 106 for the other 1x4 tasks.)
"""

from __future__ import annotations

from typing import Protocol

from service.domain.states import FailureKind
from service.domain.writes import RetryPlan


class RetrySettings(Protocol):
    """The settings the policy reads (``service.config.SchedulerSettings`` has them)."""

    @property
    def retry_mode(self) -> str: ...

    @property
    def retry_backoff(self) -> str: ...

    @property
    def retry_interval_s(self) -> float: ...

    @property
    def retry_max_interval_s(self) -> float: ...

    @property
    def retry_min_backoff_s(self) -> float: ...

    @property
    def retry_max_backoff_s(self) -> float: ...


def delay(attempt_no: int, sched: RetrySettings) -> float:
    """``timer`` mode: seconds to wait before the next attempt after attempt
    ``attempt_no`` failed.

    ``fixed``: always ``retry_interval_s``. ``exponential``: ``retry_interval_s`` doubled
    for every earlier failure, capped at ``retry_max_interval_s``.
    """
    if attempt_no < 1:
        raise ValueError(f"attempt_no must be >= 1, got {attempt_no}")
    base = sched.retry_interval_s
    if sched.retry_backoff == "fixed":
        return base
    if sched.retry_backoff == "exponential":
        # Cap the exponent too, so a long-lived task cannot overflow the float.
        return min(sched.retry_max_interval_s, base * 2.0 ** min(attempt_no - 1, 60))
    raise ValueError(f"unknown retry_backoff {sched.retry_backoff!r}")


def backoff(resource_failures: int, sched: RetrySettings) -> float:
    """``when_fits`` mode: the least wait after ``resource_failures`` consecutive
    INSUFFICIENT_RESOURCES failures (0: another retryable failure)."""
    exponent = min(max(resource_failures - 1, 0), 60)
    return min(sched.retry_max_backoff_s, sched.retry_min_backoff_s * 2.0 ** exponent)


def counted(attempt_no: int, preemptions: int) -> int:
    """Attempts that count against ``max_attempts``: preempted ones do not."""
    return attempt_no - preemptions


def may_retry(attempt_no: int, max_attempts: int | None) -> bool:
    """True when another attempt is allowed after attempt ``attempt_no`` failed
    (``attempt_no`` as ``counted`` gives it)."""
    return max_attempts is None or attempt_no < max_attempts


def plan(kind: FailureKind, now: float, sched: RetrySettings, *, attempt_no: int,
         resource_failures: int = 0, preemptions: int = 0, waited_s: float = 0.0
         ) -> RetryPlan:
    """How the task waits for its next attempt after attempt ``attempt_no`` failed with
    the retryable ``kind`` (``resource_failures``, ``preemptions``: the task's counts
    before this failure; ``waited_s``: how long it had waited when that attempt was
    claimed, kept: see the module docstring)."""
    if not kind.retryable:
        raise ValueError(f"{kind} is not retryable")
    if waited_s < 0:
        raise ValueError(f"waited_s must be >= 0, got {waited_s}")
    if kind is FailureKind.PREEMPTED:
        return RetryPlan(next_run_at=now, runnable_since=now - waited_s,
                         resource_failures=0, preemptions=preemptions + 1)
    failures = resource_failures + 1 if kind is FailureKind.INSUFFICIENT_RESOURCES else 0
    if sched.retry_mode == "timer":
        at = now + delay(counted(attempt_no, preemptions), sched)
        return RetryPlan(next_run_at=at, runnable_since=at - waited_s,
                         resource_failures=failures, preemptions=preemptions)
    if sched.retry_mode != "when_fits":
        raise ValueError(f"unknown retry_mode {sched.retry_mode!r}")
    return RetryPlan(next_run_at=now, runnable_since=now - waited_s,
                     not_before=now + backoff(failures, sched),
                     resource_failures=failures, preemptions=preemptions)
