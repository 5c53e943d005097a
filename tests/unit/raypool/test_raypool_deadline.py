"""One deadline for an operation of several waits, on a fake clock."""

from __future__ import annotations

from raypool.deadline import Deadline, poll


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_left_passed_and_capped():
    clock = FakeClock()
    deadline = Deadline.after(10, clock)
    assert deadline.left() == 10 and deadline.left(cap=3) == 3 and not deadline.passed()
    step = deadline.capped(4)
    assert (step.at, step.length_s) == (104.0, 4)
    clock.now = 108.0
    assert deadline.capped(4).at == 110.0  # a step never outlasts the operation
    assert deadline.capped(4).length_s == 2
    clock.now = 111.0
    assert deadline.left() == 0 and deadline.passed() and deadline.capped(4).length_s == 0


def test_poll_returns_the_first_value():
    clock = FakeClock()
    answers = iter([None, None, "ok"])
    assert poll(lambda: next(answers), Deadline.after(10, clock), 0.5, clock.sleep) == "ok"
    assert clock.sleeps == [0.5, 0.5]


def test_poll_checks_once_and_never_sleeps_past_the_deadline():
    clock = FakeClock()
    checks = []
    assert poll(lambda: checks.append(clock.now), Deadline.after(1.2, clock), 0.5,
                clock.sleep) is None
    assert checks == [100.0, 100.5, 101.0, 101.2]
    assert clock.now == 101.2
    expired = Deadline.after(0, clock)
    assert poll(lambda: checks.append("late"), expired, 0.5, clock.sleep) is None
    assert checks[-1] == "late" and clock.now == 101.2
