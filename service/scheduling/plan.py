"""What admission decides, as values: the planner's input and its plan.

``PlanInput`` is the snapshot a tick plans from; ``Plan`` the decisions the scheduler
applies: ``Start`` (submit now), ``Wait`` (with the reason shown to users), the nodes kept
for a waiting gang, at most one ``Preemption``, each user's fair share, and the estimated
start of the waiting tasks that have one. Plus the small rules both admission passes share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from service.cluster.boundary import ClusterSnapshot
from service.domain.reasons import Ahead, Backoff, Planned, Reason, WaitKind
from service.domain.rows import ActiveRow, RunnableRow
from service.scheduling.deep import DeepQueue
from service.scheduling.fairshare import Share
from service.scheduling.preemption import Running
from service.scheduling.runtimes import RuntimeModel


# Start and Wait are tuples: a tick with 10k runnable makes ~500 of them (a frozen
# dataclass took twice as long to build)
class Start(NamedTuple):
    """Submit this task now: its gang fits."""

    cand: RunnableRow


class Wait(NamedTuple):
    """This task keeps waiting, for this reason (a kind and its details)."""

    cand: RunnableRow
    why: Reason

    @property
    def reason(self) -> str:
        """The text people read (``reasons.render``)."""
        return self.why.text


@dataclass(frozen=True)
class Preemption:
    """Stop ``victims`` to make room for ``cand``, whose reason becomes ``why``."""

    cand: RunnableRow
    victims: tuple[Running, ...]
    why: Reason

    @property
    def reason(self) -> str:
        return self.why.text


@dataclass(frozen=True)
class PlanInput:
    now: float
    candidates: list[RunnableRow]  # runnable tasks, the backfill window, in index order
    active: list[ActiveRow]  # attempts SUBMITTING, SUBMITTED or RUNNING
    snapshot: ClusterSnapshot
    charges: dict[str | None, float]  # each user's fair-share charge now
    disabled: frozenset[str] = frozenset()  # users whose tasks may not start
    reservation: frozenset[str] = frozenset()  # the nodes the guard kept last tick
    runtimes: RuntimeModel | None = None  # expected run times (None: estimates from limits)
    reserved: frozenset[str] = frozenset()  # the tasks with a firm reservation last tick


@dataclass
class Plan:
    steps: list[Start | Wait] = field(default_factory=list)  # in admission order
    preemption: Preemption | None = None
    kept: frozenset[str] = frozenset()  # node ids the guard keeps after this tick
    shares: dict[str | None, Share] = field(default_factory=dict)
    # task id -> when it is planned to start (absent: no known time)
    estimates: dict[str, Planned] = field(default_factory=dict)
    # the waiting tasks past the tick's estimates, estimated a few a tick after it
    deep: DeepQueue | None = None
    # the tasks given a firm reservation this tick (next tick's ``PlanInput.reserved``)
    reserved: frozenset[str] = frozenset()


class Seen:
    """What admission examined so far this tick, to say what a waiting task is behind."""

    def __init__(self, fair: bool) -> None:
        self.fair = fair
        self.top_priority: int | None = None
        # per priority: each user's smallest weighted share when one of their tasks came up
        self.users_at: dict[int, dict[str | None, float]] = {}
        # ahead_of's answers until ``users_at`` changes: a long queue of few users asks the
        # same question for every task it examines
        self._ahead: dict[tuple[int, str | None, float], Ahead | None] = {}
        # behind's answers by the identity of the reason and of ahead_of's answer (both kept
        # in the value: an id is never reused while its entry lives): one value per pair, so
        # the applier tells the queue's few dozen reasons apart by identity, not by hashing
        self._behind: dict[tuple[int, int], tuple[Reason, Ahead | None, Reason]] = {}

    def add(self, cand: RunnableRow, weighted_share: float = 0.0) -> None:
        if self.top_priority is None or cand.priority > self.top_priority:
            self.top_priority = cand.priority
        users = self.users_at.setdefault(cand.priority, {})
        known = users.get(cand.user)
        if known is None or weighted_share < known:
            users[cand.user] = weighted_share
            self._ahead.clear()

    def ahead_of(self, cand: RunnableRow, weighted_share: float = 0.0) -> Ahead | None:
        """Tasks of higher priority, or users of a smaller fair share, when such came first
        in admission order: users whose weighted share was smaller than
        ``weighted_share`` (``cand``'s user's), not those that only came first on a tie
        (FIFO); else None."""
        if self.top_priority is not None and self.top_priority > cand.priority:
            return Ahead(higher_priority=True)
        if not self.fair:
            return None
        key = (cand.priority, cand.user, weighted_share)
        if key not in self._ahead:
            others = sorted(u or "-" for u, share in self.users_at.get(cand.priority, {}).items()
                            if u != cand.user and share < weighted_share - 1e-12)
            self._ahead[key] = Ahead(users=tuple(others)) if others else None
        return self._ahead[key]

    def behind(self, reason: Reason, cand: RunnableRow, weighted_share: float = 0.0
               ) -> Reason:
        """``reason`` saying what came first in admission order (``ahead_of``), the same
        value each time for the same reason and answer."""
        ahead = self.ahead_of(cand, weighted_share)
        key = (id(reason), id(ahead))
        found = self._behind.get(key)
        if found is None:
            found = self._behind[key] = (reason, ahead, reason.behind(ahead))
        return found[2]


def in_backoff(cand: RunnableRow, now: float) -> bool:
    return cand.retry_not_before is not None and cand.retry_not_before > now


def backoff(cand: RunnableRow) -> Reason:
    return Reason(WaitKind.RETRY_BACKOFF, Backoff(cand.attempt_no + 1, cand.retry_not_before))


def backoff_reason(cand: RunnableRow) -> str:
    return backoff(cand).text


