"""Training curves: which points an attempt keeps, and attempts joined on one step axis
(pure).

Downsampling keeps each metric of an attempt small however long the run: the n-th point
a series receives (n from 0) is kept when ``n % stride == 0``, so its first point always
is. When a series holds more than its cap, its stride doubles and every other kept point
is dropped (the kept points are the series' points 0, k, 2k, ...: those at 0, 2k, 4k, ...
stay). A 100k-step run keeps at most ``cap`` points per metric, evenly spread, and new
points keep arriving at the current stride. Counting points rather than steps keeps the
sparse series too (a validation metric logged every 10 steps).

Joining: verl's step numbers are global, and a resumed attempt goes on from its
checkpoint's step, so the attempts of a task share one axis. Where they overlap (an
attempt stopped at step 130, its successor resumed from the step-100 checkpoint), the
later attempt's points replace the earlier one's from its first step on: the curve shows
the training that the final weights came from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from operator import attrgetter

from service.domain.progress import Point

# The curves the console draws when nobody picked: a loss and a reward, in this order of
# preference (verl's PPO/GRPO names, then SFT's), else the first key containing the word.
PREFERRED = (
    ("train/loss", "actor/pg_loss", "critic/vf_loss", "val/loss"),
    ("critic/score/mean", "critic/rewards/mean", "val-core/reward"),
)
_WORDS = ("loss", "reward")


def keeps(index: int, stride: int) -> bool:
    """Whether a series at ``stride`` keeps its ``index``-th point (from 0)."""
    return index % stride == 0


def thin(steps: Sequence[int], stride: int, cap: int) -> tuple[int, list[int]]:
    """The stride and the steps to drop so that at most ``cap`` of a series' kept
    ``steps`` (in order, kept at ``stride``) remain."""
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    kept = list(steps)
    while len(kept) > cap:
        stride *= 2
        kept = kept[::2]
    return stride, sorted(set(steps) - set(kept))


def join(points: Iterable[Point]) -> dict[str, list[Point]]:
    """``{key: points by step}`` over all attempts; a later attempt's points replace the
    earlier ones' from its first step (any key) on.

    An attempt's point stays when it comes before every later attempt's first step; one
    pass from the last attempt back keeps the cost linear in the points.
    """
    by_attempt: dict[int, list[Point]] = {}
    for p in points:
        by_attempt.setdefault(p.attempt_no, []).append(p)
    cut = math.inf  # the lowest first step of the attempts after this one
    kept: list[list[Point]] = []
    for attempt_no in sorted(by_attempt, reverse=True):
        mine = by_attempt[attempt_no]
        kept.append([p for p in mine if p.step < cut])
        cut = min(cut, min(p.step for p in mine))
    out: dict[str, list[Point]] = {}
    for chunk in reversed(kept):
        for p in chunk:
            out.setdefault(p.key, []).append(p)
    by_step = attrgetter("step")
    return {key: sorted(pts, key=by_step) for key, pts in sorted(out.items())}


def default_keys(keys: Iterable[str]) -> list[str]:
    """A loss and a reward curve from ``keys`` (fewer when the run has none)."""
    have = list(keys)
    out: list[str] = []
    for preferred, word in zip(PREFERRED, _WORDS, strict=True):
        pick = next((k for k in preferred if k in have), None)
        if pick is None:
            pick = next((k for k in have if word in k.lower()), None)
        if pick is not None and pick not in out:
            out.append(pick)
    return out
