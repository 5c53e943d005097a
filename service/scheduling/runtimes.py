"""How long runs really take, from the runs that ended (pure).

A declared time limit is a bound, not a guess: users set it well above their longest run
(the trace bench's users, about twice; real ones often more), so a plan built from limits
says when a waiting task starts *at the latest*. For the estimate users read ("expected
start") Argus predicts each run as a share of its own limit, learned from the recent
runs that ended on their own (succeeded) or at their limit: the shares of the same user
and gang shape, else of the same user, else of everyone, once ``MIN_RUNS`` runs back
them; with no basis, the limit itself. A new run is expected to take the mean share; a
run that has already taken a share ``e`` of its limit, the mean of the shares above
``e`` (the runs as long as it so far), or halfway from ``e`` to its limit when none was
that long. (Shares of the limit rather than seconds carry over between a user's short
and long tasks of one shape; the user's own runs first because users differ most in how
generous their limits are: the approach of Tsafrir, Etsion and Feitelson's
system-generated predictions for backfilling. Means, not medians: an estimate adds up
the runs ahead of a task, and it is the means that add up.)
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

# A run at its limit holds its gang this much longer: the stop of an attempt past its limit
# takes a tick to send and Ray a few seconds to do (a task may use kept nodes when its limit
# ends this long before they surely drain).
LIMIT_SLACK_S = 30.0
MIN_RUNS = 3  # runs before a share is trusted
MIN_SHARE = 0.02  # a run predicted shorter than this share of its limit is not believed

Shape = tuple[int, int]  # (nnodes, GPUs per node)


@dataclass(frozen=True, slots=True)
class EndedRun:
    """A run that ended on its own or at its limit: who, which gang, how long, its limit."""

    user: str | None
    shape: Shape
    runtime_s: float
    limit_s: float


def held_for(limit_s: float | None) -> float:
    """How long a run under ``limit_s`` holds its gang at the latest: to its limit and the
    stop's slack (no limit: for good)."""
    return math.inf if limit_s is None else limit_s + LIMIT_SLACK_S


class RuntimeModel:
    def __init__(self, runs: Iterable[EndedRun]) -> None:
        by_key: dict[tuple[str | None, Shape], list[float]] = {}
        by_user: dict[str | None, list[float]] = {}
        everyone: list[float] = []
        for run in runs:
            if run.limit_s <= 0 or run.runtime_s < 0:
                continue
            share = min(1.0, max(MIN_SHARE, run.runtime_s / run.limit_s))
            by_key.setdefault((run.user, run.shape), []).append(share)
            by_user.setdefault(run.user, []).append(share)
            everyone.append(share)
        self._by_key = _trusted(by_key)
        self._by_user = _trusted(by_user)
        self._everyone = sorted(everyone) if len(everyone) >= MIN_RUNS else None
        # a new run's share per (user, shape): the deep estimates ask it a few times a tick
        self._new: dict[tuple[str | None, Shape], float | None] = {}

    @property
    def empty(self) -> bool:
        """No run backs any share: every expected length is the limit."""
        return self._everyone is None

    def _shares(self, user: str | None, shape: Shape) -> list[float] | None:
        found = self._by_key.get((user, shape))
        if found is None:
            found = self._by_user.get(user)
        return self._everyone if found is None else found

    def share(self, user: str | None, shape: Shape, elapsed: float = 0.0) -> float | None:
        """The share of its limit a run of ``user``'s of this shape is expected to take,
        given it has taken ``elapsed`` of it already (None: no basis)."""
        shares = self._shares(user, shape)
        if shares is None:
            return None
        longer = shares[bisect.bisect_right(shares, elapsed):]
        return statistics.fmean(longer) if longer else (elapsed + 1.0) / 2

    def duration(self, user: str | None, shape: Shape, limit_s: float) -> float | None:
        """A new run's expected length (None: no basis)."""
        key = (user, shape)
        if key not in self._new:
            self._new[key] = self.share(user, shape)
        share = self._new[key]
        return None if share is None else share * limit_s

    def length(self, user: str | None, shape: Shape, limit_s: float | None) -> float:
        """How long a new run is expected to hold its gang: as the runs say, or with no
        basis its limit and the stop's slack, as planned (no limit: for good)."""
        expected = None if limit_s is None else self.duration(user, shape, limit_s)
        return held_for(limit_s) if expected is None else expected

    def end(self, user: str | None, shape: Shape, limit_s: float, start: float,
            now: float) -> float | None:
        """When a run that started at ``start`` is expected to end, knowing it has not
        yet (never after its limit, never before now; None: no basis)."""
        elapsed = min(1.0, max(0.0, (now - start) / limit_s)) if limit_s > 0 else 1.0
        share = self.share(user, shape, elapsed)
        return None if share is None else max(now, start + min(share, 1.0) * limit_s)


def _trusted(groups: dict[tuple[str | None, Shape] | str | None, list[float]]) -> dict:
    return {k: sorted(v) for k, v in groups.items() if len(v) >= MIN_RUNS}
