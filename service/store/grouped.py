"""Group commit: writes queued at the same moment commit in one transaction.

A submit is a small write (its task, its event, its owner's JobSpec bytes), and under a
burst of them most of a write's cost is the transaction around it: on PostgreSQL the
``BEGIN``, the write lock and the ``COMMIT`` are three of a submit's seven statements,
each a cost in psycopg and in the server, and the ``COMMIT`` a flush of the WAL. The write
lane (``aio.AsyncStore.write(..., grouped=True)``) therefore runs the writes that queued
up while the previous ones ran as one transaction, ``GROUP_MAX`` at most, and answers each
caller once that transaction committed: each is as durable as it was alone, no caller
hears of a write that was not committed.

What a caller sees is what it would see alone, in the same order: the writes of a group
run in their order of arrival, each one reading what the ones before it wrote (a quota,
an idempotency key). When one of them fails (a refusal, a clash of a minted id, a fault),
the transaction is rolled back and the group is split where it failed: the writes before
it run again as a group, the one that failed runs alone (in a transaction of its own, so
its error is its own: ``QuotaExceeded``, ``StorageUnavailable``...), then the writes after
it as a group. When the ``COMMIT`` itself fails, every write of the group runs alone. A
failure costs at most the writes before it once more.

Only writes that do all their work in one ``WriteCore.tx`` and read nothing after it may be
grouped (a read on a reading connection would not yet see the group's uncommitted rows).
Inside a group a write's ``tx`` joins the group's transaction. Alone, a ``tx`` that raised
is rolled back whatever its caller does next; in a group only the group's rollback can undo
what it wrote, so an error inside it is raised as ``GroupSpoiled``, which no ``except
Exception`` of the write catches: a write that carries on after an error (``create_task``
tries another id after a clash) does so in a transaction of its own.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

GROUP_MAX = 64  # writes in one transaction at most: it holds the write lock meanwhile


class GroupSpoiled(BaseException):
    """A write's transaction failed inside a group: the group's is rolled back (the
    write's own error is the ``__cause__``). A ``BaseException`` so the write cannot catch
    it and carry on as if its failed transaction had been undone."""


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What one write gave: its result, or the error it raised."""

    result: T | None = None
    error: BaseException | None = None

    def get(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class _FailedAt(Exception):
    def __init__(self, at: int) -> None:
        super().__init__(at)
        self.at = at


def alone(call: Callable[[], T]) -> Outcome[T]:
    """``call()`` in its own transaction(s), as without grouping."""
    try:
        return Outcome(call())
    except BaseException as exc:  # handed to the write's caller
        return Outcome(error=exc)


def run_grouped(calls: Sequence[Callable[[], Any]],
                together: Callable[[], AbstractContextManager[Any]]) -> list[Outcome[Any]]:
    """Each of ``calls`` run in order, inside ``together()`` (one transaction) as far as
    they succeed, and its ``Outcome`` (see the module docstring for the splitting)."""
    out: list[Outcome[Any] | None] = [None] * len(calls)
    ranges: deque[tuple[int, int]] = deque([(0, len(calls))])
    while ranges:
        lo, hi = ranges.popleft()
        if hi - lo == 1:
            out[lo] = alone(calls[lo])
            continue
        results: list[Any] = []
        try:
            with together():
                for i in range(lo, hi):
                    try:
                        results.append(calls[i]())
                    except BaseException as exc:
                        raise _FailedAt(i) from exc
        except _FailedAt as failed:
            split = [(lo, failed.at), (failed.at, failed.at + 1), (failed.at + 1, hi)]
            ranges.extendleft(reversed([r for r in split if r[0] < r[1]]))
            continue
        except BaseException:  # the transaction's own BEGIN or COMMIT: each alone
            ranges.extendleft(reversed([(i, i + 1) for i in range(lo, hi)]))
            continue
        for i, result in enumerate(results, lo):
            out[i] = Outcome(result)
    return [o for o in out if o is not None]


class Entry(Generic[T]):
    """One grouped write waiting for its group, and then what it gave."""

    __slots__ = ("call", "outcome", "party")

    def __init__(self, call: Callable[[], T], party: str) -> None:
        self.call = call
        self.party = party
        self.outcome: Outcome[T] | None = None


class WriteGroups:
    """The grouped writes waiting for the write lane, taken in turn by party (as the lane
    serves its calls: one party's burst does not fill every group before another's write
    gets in); thread-safe."""

    def __init__(self, together: Callable[[], AbstractContextManager[Any]],
                 group_max: int = GROUP_MAX) -> None:
        self._together = together
        self._max = group_max
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Entry[Any]]] = {}  # by party, in turn of arrival

    def add(self, call: Callable[[], T], party: str) -> Entry[T]:
        entry = Entry(call, party)
        with self._lock:
            self._queues.setdefault(party, deque()).append(entry)
        return entry

    def discard(self, entry: Entry[Any]) -> None:
        """Forget ``entry`` if no group took it yet (its caller went away)."""
        with self._lock:
            queue = self._queues.get(entry.party)
            if queue is not None and entry in queue:
                queue.remove(entry)
                if not queue:
                    del self._queues[entry.party]

    def _take(self) -> list[Entry[Any]]:
        taken: list[Entry[Any]] = []
        with self._lock:
            while self._queues and len(taken) < self._max:
                for party in list(self._queues):
                    queue = self._queues[party]
                    taken.append(queue.popleft())
                    if not queue:
                        del self._queues[party]
                    if len(taken) == self._max:
                        break
        return taken

    def flush(self, entry: Entry[Any]) -> None:
        """On the write lane: run groups until ``entry`` has run (an earlier flush may
        have run it already: then nothing)."""
        while entry.outcome is None:
            group = self._take()
            if not group:  # discarded meanwhile: nothing to run
                return
            for taken, outcome in zip(group, run_grouped([e.call for e in group],
                                                         self._together), strict=True):
                taken.outcome = outcome
