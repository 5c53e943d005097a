from __future__ import annotations

import pytest

from service.config import SchedulerSettings
from service.domain.states import FailureKind
from service.domain.writes import RetryPlan
from service.policy.retry import backoff, counted, delay, may_retry, plan


@pytest.mark.parametrize("attempt", [1, 2, 5, 40])
def test_fixed_delay(attempt: int) -> None:
    assert delay(attempt, SchedulerSettings(retry_interval_s=60.0)) == 60.0


def test_exponential_backoff_with_cap() -> None:
    sched = SchedulerSettings(retry_backoff="exponential", retry_interval_s=10.0,
                              retry_max_interval_s=100.0)
    assert [delay(n, sched) for n in range(1, 7)] == [10.0, 20.0, 40.0, 80.0, 100.0, 100.0]
    assert delay(10_000, sched) == 100.0  # no overflow for very old tasks


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="attempt_no"):
        delay(0, SchedulerSettings())
    with pytest.raises(ValueError, match="retry_backoff"):
        delay(1, SchedulerSettings(retry_backoff="linear"))


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "expected"),
    [(1, None, True), (99, None, True), (1, 3, True), (2, 3, True), (3, 3, False),
     (4, 3, False), (1, 1, False)],
)
def test_may_retry(attempt: int, max_attempts: int | None, expected: bool) -> None:
    assert may_retry(attempt, max_attempts) is expected


WHEN_FITS = SchedulerSettings(retry_min_backoff_s=5.0, retry_max_backoff_s=60.0)
TIMER = SchedulerSettings(retry_mode="timer", retry_interval_s=60.0)
IR, LOST, PRE = (FailureKind.INSUFFICIENT_RESOURCES, FailureKind.CLUSTER_LOST,
                 FailureKind.PREEMPTED)


@pytest.mark.parametrize(("kind", "sched", "counts", "expected"), [
    # when_fits: in the scan at once, submitted after a backoff doubling per resource failure
    (IR, WHEN_FITS, (0, 0), RetryPlan(100.0, 100.0, 105.0, 1, 0)),
    (IR, WHEN_FITS, (1, 0), RetryPlan(100.0, 100.0, 110.0, 2, 0)),
    (IR, WHEN_FITS, (3, 0), RetryPlan(100.0, 100.0, 140.0, 4, 0)),
    (IR, WHEN_FITS, (9, 2), RetryPlan(100.0, 100.0, 160.0, 10, 2)),  # capped
    # a lost cluster is no resource failure: the count starts over, the least backoff
    (LOST, WHEN_FITS, (4, 0), RetryPlan(100.0, 100.0, 105.0, 0, 0)),
    # preempted: no backoff at all, one more preemption
    (PRE, WHEN_FITS, (2, 1), RetryPlan(100.0, 100.0, None, 0, 2)),
    (PRE, TIMER, (0, 0), RetryPlan(100.0, 100.0, None, 0, 1)),
    # timer (the seeds'): out of the scan for the delay, waiting counted from its end
    (IR, TIMER, (0, 0), RetryPlan(160.0, 160.0, None, 1, 0)),
    (LOST, TIMER, (2, 0), RetryPlan(160.0, 160.0, None, 0, 0)),
])
def test_plan(kind, sched, counts, expected) -> None:
    failures, preemptions = counts
    assert plan(kind, 100.0, sched, attempt_no=3, resource_failures=failures,
                preemptions=preemptions) == expected


@pytest.mark.parametrize(("kind", "sched", "since"), [
    (IR, WHEN_FITS, 60.0), (LOST, WHEN_FITS, 60.0), (PRE, WHEN_FITS, 60.0),
    (PRE, TIMER, 60.0), (IR, TIMER, 120.0),  # timer: back in the scan after the delay
])
def test_plan_keeps_the_wait_before_the_failed_attempt(kind, sched, since) -> None:
    assert plan(kind, 100.0, sched, attempt_no=1, waited_s=40.0).runnable_since == since


def test_plan_refuses_a_negative_wait() -> None:
    with pytest.raises(ValueError, match="waited_s"):
        plan(IR, 100.0, WHEN_FITS, attempt_no=1, waited_s=-1.0)


def test_timer_mode_counts_attempts_without_the_preempted_ones() -> None:
    sched = SchedulerSettings(retry_mode="timer", retry_backoff="exponential",
                              retry_interval_s=10.0, retry_max_interval_s=1000.0)
    # attempt 4 failed, 2 earlier ones were preempted: the 2nd counted failure waits 20 s
    assert plan(IR, 0.0, sched, attempt_no=4, preemptions=2).next_run_at == 20.0
    assert counted(4, 2) == 2


def test_plan_refuses_what_is_not_retried() -> None:
    with pytest.raises(ValueError, match="not retryable"):
        plan(FailureKind.USER_ERROR, 0.0, WHEN_FITS, attempt_no=1)


@pytest.mark.parametrize(("failures", "expected"), [(0, 5.0), (1, 5.0), (2, 10.0),
                                                     (5, 60.0), (10_000, 60.0)])
def test_backoff(failures: int, expected: float) -> None:
    assert backoff(failures, WHEN_FITS) == expected
