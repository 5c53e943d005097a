from __future__ import annotations

import pytest

from service.config import SchedulerSettings
from service.retry import delay, may_retry


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
