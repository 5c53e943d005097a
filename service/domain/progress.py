"""Where an attempt is, and the kept points of its metric curves (pure values).

``service.policy.progress`` reads verl's log lines into a :class:`Progress`;
``service.policy.curves`` thins and joins the :class:`Point` s the follower keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class Progress:
    """Where one attempt is. Steps are verl's global steps (a resumed attempt goes on
    from its checkpoint's); times are epoch seconds when the follower read the lines.

    ``first_step``/``first_at``: the last step of the first read that saw steps, and when;
    the rate runs from there (start-up, resumed steps and the unknown time the first
    read's steps took are not counted).
    """

    step: int | None = None
    total: int | None = None
    resumed_from: int | None = None
    first_step: int | None = None
    first_at: float | None = None
    last_at: float | None = None

    @property
    def rate(self) -> float | None:
        """Steps per second this attempt did (None until two reads saw steps apart)."""
        if (self.step is None or self.first_step is None or self.first_at is None
                or self.last_at is None):
            return None
        steps, seconds = self.step - self.first_step, self.last_at - self.first_at
        if steps <= 0 or seconds <= 0:
            return None
        return steps / seconds

    @property
    def fraction(self) -> float | None:
        """Done share of the run in [0, 1] (None without a step or a total)."""
        if self.total is None:
            return None
        return min(1.0, max(0, self.step or self.resumed_from or 0) / self.total)

    @property
    def eta_at(self) -> float | None:
        """When the last step should be done at the current rate (None: unknown)."""
        rate, total, step = self.rate, self.total, self.step
        if rate is None or total is None or step is None or self.last_at is None:
            return None
        return self.last_at + max(0, total - step) / rate


class Point(NamedTuple):
    """One kept point of a metric (a tuple: a page reads 10k of them)."""

    attempt_no: int
    key: str
    step: int
    value: float
