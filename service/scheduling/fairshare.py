"""Fair share between users among equal priorities (pure policy, no I/O).

The order admission examines runnable tasks in:

1. **Priority**, higher first.
2. Within one priority, **the user with the smallest weighted share** goes next (DRF, as
   Volcano's ``drf`` plugin orders jobs): a user's dominant share is the largest fraction
   of any cluster resource their tasks hold. An Argus gang asks CPUs in proportion to its
   GPUs (``cpus_per_gpu``), so the GPU is every user's dominant resource and the share is
   the user's charge over the cluster's GPUs, divided by the user's weight
   (``v2.users.weights``, default 1). Ties go to the user whose next task was submitted
   first.
3. Within one user, FIFO (submission order; a retried task keeps its place).

The charge is the GPUs the user's active tasks hold or are about to (instantaneous DRF),
or, with ``fair_share_half_life_s`` set, the user's **decayed GPU usage** (Slurm's
``PriorityDecayHalfLife``): GPU-seconds where a second ``h`` half-lives ago counts
``2**-h``. Its scale is the cluster's: holding ``g`` GPUs for ever converges to
``g * half_life / ln 2``, so a share of decayed usage compares with a share of GPUs.

The order is dynamic: ``FairOrder.admitted`` adds a task that just started to its user's
charge, so one tick interleaves users as it admits (a user with 10 waiting tasks does not
get all free GPUs because their first task came first).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Protocol, TypeVar


class Candidate(Protocol):
    @property
    def seq(self) -> int: ...

    @property
    def user(self) -> str | None: ...

    @property
    def priority(self) -> int: ...


C = TypeVar("C", bound=Candidate)


@dataclass(frozen=True, slots=True)
class Share:
    """One user's standing, as the queue shows it."""

    charge: float  # GPUs held (or decayed GPU-seconds, in GPU units: see ``Ledger``)
    share: float  # charge / cluster GPUs
    weight: float

    @property
    def weighted(self) -> float:
        return self.share / self.weight


class FairOrder:
    """Iterate ``candidates`` (already in priority-then-FIFO order) in admission order.

    ``charges``: each user's charge (see the module docstring); ``total``: the cluster's
    GPUs (the scale of a share); ``weight``: a user's weight. With ``enabled`` False the
    candidates come out as given (priority, then FIFO).
    """

    def __init__(self, candidates: Sequence[C], charges: Mapping[str | None, float],
                 total: float, weight: Callable[[str | None], float], *,
                 enabled: bool = True) -> None:
        self._candidates = candidates
        self._charges: dict[str | None, float] = dict(charges)
        self._total = total if total > 0 else 1.0
        self._weight = weight
        self._weighted: dict[str | None, float] = {}  # ``weighted``'s answers
        self._enabled = enabled

    def share(self, user: str | None) -> Share:
        charge = self._charges.get(user, 0.0)
        return Share(charge, charge / self._total, self._weight(user))

    def weighted(self, user: str | None) -> float:
        """``share(user).weighted``, without making a ``Share``: the walk asks it for every
        task it examines (10k runnable: about a thousand times a tick), so each user's is
        kept until their charge changes (``admitted``)."""
        found = self._weighted.get(user)
        if found is None:
            found = self._weighted[user] = \
                self._charges.get(user, 0.0) / self._total / self._weight(user)
        return found

    def shares(self) -> dict[str | None, Share]:
        """Every user with a charge or a candidate, and their share now."""
        users = set(self._charges) | {c.user for c in self._candidates}
        return {u: self.share(u) for u in users}

    def admitted(self, user: str | None, charge: float) -> None:
        """A task of ``user`` started this tick: its charge counts from now on."""
        self._charges[user] = self._charges.get(user, 0.0) + charge
        self._weighted.pop(user, None)

    def __iter__(self) -> Iterator[C]:
        if not self._enabled:
            yield from self._candidates
            return
        for _, level in groupby(self._candidates, key=lambda c: c.priority):
            yield from self._level(list(level))

    def _level(self, tasks: list[C]) -> Iterator[C]:
        queues: dict[str | None, deque[C]] = {}
        for task in tasks:
            queues.setdefault(task.user, deque()).append(task)
        # (weighted share, seq of the user's next task, tie-break) per user with tasks
        heap = [(self.weighted(u), q[0].seq, i, u) for i, (u, q) in
                enumerate(queues.items())]
        heapq.heapify(heap)
        while heap:
            _, _, i, user = heapq.heappop(heap)
            queue = queues[user]
            yield queue.popleft()
            if queue:  # the share is read after the consumer said whether it started
                heapq.heappush(heap, (self.weighted(user), queue[0].seq, i, user))


# -- decayed usage ------------------------------------------------------------------------

def decay_factor(dt: float, half_life: float) -> float:
    return 2.0 ** (-max(dt, 0.0) / half_life)


def steady_charge(gpus: float, half_life: float) -> float:
    """What holding ``gpus`` for ever converges to in decayed GPU-seconds."""
    return gpus * half_life / math.log(2)


@dataclass(frozen=True, slots=True)
class Span:
    """An attempt's use of GPUs: ``gpus`` from ``start`` to ``end`` (None: still on)."""

    user: str | None
    gpus: float
    start: float
    end: float | None


def decayed_usage(spans: Iterable[Span], now: float, half_life: float
                  ) -> dict[str | None, float]:
    """Each user's decayed GPU-seconds at ``now`` from whole attempt spans:
    the integral of ``gpus * 2**-((now - t) / half_life)`` over each span."""
    k = math.log(2) / half_life
    out: dict[str | None, float] = {}
    for span in spans:
        end = now if span.end is None else min(span.end, now)
        if end <= span.start:
            continue
        value = span.gpus / k * (math.exp(-k * (now - end)) - math.exp(-k * (now - span.start)))
        out[span.user] = out.get(span.user, 0.0) + value
    return out


class Ledger:
    """Decayed usage kept up to date tick by tick (one exact step per tick, assuming each
    user's GPUs were constant since the last step, as the scheduler saw them)."""

    def __init__(self, half_life: float, usage: Mapping[str | None, float], at: float
                 ) -> None:
        if half_life <= 0:
            raise ValueError(f"half_life must be > 0, got {half_life}")
        self.half_life = half_life
        self.usage: dict[str | None, float] = dict(usage)
        self.at = at
        self._held: dict[str | None, float] = {}

    def advance(self, now: float, held: Mapping[str | None, float]) -> None:
        """Decay to ``now`` adding what was held since the last step; ``held`` (GPUs per
        user now) is what the next step adds."""
        dt = now - self.at
        if dt > 0:
            factor = decay_factor(dt, self.half_life)
            gained = 1.0 - factor
            users = set(self.usage) | set(self._held)
            self.usage = {u: self.usage.get(u, 0.0) * factor
                          + steady_charge(self._held.get(u, 0.0), self.half_life) * gained
                          for u in users}
            self.at = now
        self._held = dict(held)

    def charges(self) -> dict[str | None, float]:
        """Decayed usage in GPU units (a share of it over the cluster's GPUs compares
        with a share of GPUs held)."""
        scale = self.half_life / math.log(2)
        return {u: v / scale for u, v in self.usage.items()}
