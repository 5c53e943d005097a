"""GPU accounting by table: spans clipped to the window, running attempts up to now."""

from __future__ import annotations

import pytest

from service.policy.usage import (
    AttemptSpan,
    TaskPart,
    WholeTotals,
    account,
    clip,
    window_totals,
)

T = 1_000_000.0


def span(start: float, end: float | None, gpus: int = 4, *, task: str = "t1", no: int = 1,
         user: str | None = "alice", kind: str | None = None) -> AttemptSpan:
    return AttemptSpan(task, no, user, gpus, T + start, None if end is None else T + end,
                       "FAILED" if kind else ("RUNNING" if end is None else "SUCCEEDED"), kind)


@pytest.mark.parametrize(("s", "window", "now", "gpu_seconds"), [
    (span(0, 100), (0, 1000), 1000, 400.0),  # inside: whole span x 4 GPUs
    (span(0, 100), (50, 1000), 1000, 200.0),  # clipped at the start
    (span(0, 100), (0, 25), 1000, 100.0),  # clipped at the end
    (span(0, 100), (20, 30), 1000, 40.0),  # window inside the span
    (span(0, 100), (100, 200), 1000, 0.0),  # touching: nothing
    (span(0, 100), (-50, 0), 1000, 0.0),
    (span(0, None), (0, 1000), 60, 240.0),  # running: up to now
    (span(0, None), (0, 30), 60, 120.0),  # running, window ends before now
    (span(10, 5), (0, 100), 100, 0.0),  # end before start (clock skew): nothing
])
def test_clip(s, window, now, gpu_seconds) -> None:
    used = clip(s, T + window[0], T + window[1], T + now)
    assert used.gpu_seconds == pytest.approx(gpu_seconds)
    assert used.counted_to >= used.counted_from


def test_account_totals_per_task_and_user_with_failed_attempts_marked() -> None:
    spans = [
        span(0, 10, 4, task="a", no=1, kind="INSUFFICIENT_RESOURCES"),  # 40, failed
        span(70, 130, 4, task="a", no=2),  # 240
        span(0, 50, 2, task="b", user="bob"),  # 100
        span(100, None, 8, task="c", user="bob"),  # running: 8 x (150 - 100) = 400
        span(500, 600, 1, task="d", user="bob"),  # after the window: left out
    ]
    report = account(spans, T, T + 200, T + 150)
    users = {u.user: u for u in report.users}
    assert users["alice"].gpu_seconds == pytest.approx(280)
    assert users["alice"].failed_gpu_seconds == pytest.approx(40)
    assert (users["alice"].tasks, users["alice"].attempts) == (1, 2)
    assert users["bob"].gpu_seconds == pytest.approx(500)
    assert (users["bob"].tasks, users["bob"].attempts, users["bob"].running_attempts) == (
        2, 2, 1)
    tasks = {t.task_id: t for t in report.tasks}
    assert set(tasks) == {"a", "b", "c"}
    assert [a.span.attempt_no for a in tasks["a"].attempts] == [1, 2]
    assert tasks["a"].attempts[0].failed and not tasks["a"].attempts[1].failed
    assert tasks["c"].attempts[0].running
    assert sum(u.gpu_seconds for u in report.users) == pytest.approx(
        sum(t.gpu_seconds for t in report.tasks))


def test_account_refuses_an_empty_window() -> None:
    with pytest.raises(ValueError, match="empty window"):
        account([], T, T, T)


def test_window_totals_count_a_task_once_whether_whole_or_cut_and_rank_its_parts() -> None:
    """A whole task's running attempt adds to its whole total, an edge task counts once,
    and a part may lift a task above the whole tasks that used the most."""
    whole = [WholeTotals("alice", 100.0, 10.0, 2, 3), WholeTotals("bob", 0.0, 0.0, 0, 0)]
    parts = [TaskPart("a-run", "alice", 30.0, 0.0, 1, 1, whole_gpu_seconds=60.0),
             TaskPart("b-cut", "bob", 70.0, 5.0, 2, 0, whole_gpu_seconds=None)]
    users, top = window_totals(whole, parts, [("a-big", 80.0), ("a-run", 60.0)], 2)
    assert [(u.user, u.gpu_seconds, u.failed_gpu_seconds, u.tasks, u.attempts,
             u.running_attempts) for u in users] == [
        ("alice", 130.0, 10.0, 2, 4, 1), ("bob", 70.0, 5.0, 1, 2, 0)]
    assert top == ["a-run", "a-big"]  # 90 (60 whole + 30 running) over 80
