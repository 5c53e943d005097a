"""Free GPUs and CPUs per node over time: the forward plan's arithmetic.

``Timeline`` starts from what each node has free now and learns when resources come back
(an attempt's time limit: ``release``) and when they are promised (a waiting gang's
reservation, or a task started now until its limit: ``hold``). It answers two questions:

* ``earliest``: the first time, not before a given one, at which ``nnodes`` distinct nodes
  each have ``gpus`` GPUs and ``cpus`` CPUs free for a whole duration, and which nodes;
* ``fits``: whether given nodes have that much free over a window from now (a task that
  starts now delays no reservation made before it);

and ``place`` holds the room ``earliest`` finds for its owner (a reservation, or an
estimate that takes its room on the timeline from the tasks after it).

Durations may be ``math.inf`` (no time limit: the resources never come back within the
plan). Pure: numbers in, numbers out; nodes are ids.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple

INF = math.inf
EPS = 1e-9


class Hold(NamedTuple):
    """Resources promised on ``node`` from ``start`` to ``end`` (to ``owner``); a tuple:
    a plan makes a few hundred a tick."""

    node: str
    start: float
    end: float
    gpus: float
    cpus: float
    owner: str


class Timeline:
    def __init__(self, now: float, free: Mapping[str, tuple[float, float]]) -> None:
        """``free``: node id -> (GPUs, CPUs) free now."""
        self.now = now
        self._free = {node: (float(g), float(c)) for node, (g, c) in free.items()}
        # node -> [(time, d_gpus, d_cpus, owner)], sorted
        self._events: dict[str, list[tuple[float, float, float, str]]] = {n: [] for n in free}
        # node -> its profile, folded from its events, and the fold's state after each
        # event: a change refolds from the first event it touched (``_stale``), not from
        # the start (most holds land late in a node's list: the start estimates, in order)
        self._profiles: dict[str, list[tuple[float, float, float]]] = {}
        self._folds: dict[str, list[tuple[int, float, float, float]]] = {}
        self._stale: dict[str, int] = {}  # node -> the first event changed since its fold
        # node -> {(gpus, cpus, duration): its start intervals}, until the node changes
        self._starts: dict[str, dict[tuple[float, float, float], list[tuple[float, float]]]] \
            = {}
        # earliest's answers until the next change: a long queue asks the same few gang
        # shapes again and again, and a shape with no room finds none each time
        self._answers: dict[tuple[int, float, float, float, float | None],
                            tuple[float, tuple[str, ...]] | None] = {}
        self.holds: list[Hold] = []
        self._owners: set[str] = set()  # those with holds: most tasks unheld never had one

    @property
    def nodes(self) -> list[str]:
        return list(self._free)

    def release(self, node: str, at: float, gpus: float, cpus: float) -> None:
        """``gpus``/``cpus`` held on ``node`` now come back at ``at`` (never when inf)."""
        if node not in self._events or at == INF:
            return
        self._changed(node, self._insert(node, (max(at, self.now), gpus, cpus, "")))

    def hold(self, node: str, start: float, end: float, gpus: float, cpus: float,
             owner: str) -> None:
        """Promise ``gpus``/``cpus`` on ``node`` over ``[start, end)``."""
        if node not in self._events:
            return
        start = max(start, self.now)
        first = self._insert(node, (start, -gpus, -cpus, owner))
        if end != INF:
            first = min(first, self._insert(node, (end, gpus, cpus, owner)))
        self._changed(node, first)
        self.holds.append(Hold(node, start, end, gpus, cpus, owner))
        self._owners.add(owner)

    def unhold(self, owner: str) -> None:
        """Forget every hold of ``owner`` (its turn has come: it is placed anew)."""
        if not owner or owner not in self._owners:
            return
        self._owners.discard(owner)
        for node in {h.node for h in self.holds if h.owner == owner}:
            events = self._events[node]
            first = next(i for i, e in enumerate(events) if e[3] == owner)
            self._events[node] = [e for e in events if e[3] != owner]
            self._changed(node, first)
        self.holds = [h for h in self.holds if h.owner != owner]

    def _insert(self, node: str, event: tuple[float, float, float, str]) -> int:
        """Insert ``event`` in ``node``'s sorted events; its index."""
        events = self._events[node]
        at = bisect_right(events, event)
        events.insert(at, event)
        return at

    def _changed(self, node: str, first: int) -> None:
        """``node``'s events changed from index ``first`` on."""
        self._stale[node] = min(first, self._stale.get(node, first))
        self._starts.pop(node, None)
        self._answers.clear()

    def profile(self, node: str) -> list[tuple[float, float, float]]:
        """``[(from time, GPUs free, CPUs free)]``, each value holding until the next time:
        the events folded in time order, those within ``EPS`` of a step's time into it.
        The list is the timeline's own, brought up to date in place: read it before the
        next change."""
        out = self._profiles.get(node)
        first = self._stale.pop(node, None)
        if out is not None and first is None:
            return out
        if out is None:  # the first fold
            gpus, cpus = self._free[node]
            out = self._profiles[node] = [(self.now, gpus, cpus)]
            self._folds[node] = [(1, gpus, cpus, self.now)]
            first = 0
        folds = self._folds[node]
        steps, gpus, cpus, last = folds[first]  # the fold's state before event ``first``
        del out[steps:], folds[first + 1:]
        out[-1] = (last, gpus, cpus)
        for at, dg, dc, _ in self._events[node][first:]:
            gpus += dg
            cpus += dc
            if at <= last + EPS:
                out[-1] = (last, gpus, cpus)
            else:
                last = at
                out.append((at, gpus, cpus))
            folds.append((len(out), gpus, cpus, last))
        return out

    def starts(self, node: str, gpus: float, cpus: float, duration: float
               ) -> list[tuple[float, float]]:
        """The intervals ``[a, b]`` of start times at which ``node`` has ``gpus``/``cpus``
        free for ``duration`` (``b`` may be inf)."""
        return self._starts_of(node, (gpus, cpus, duration))

    def _starts_of(self, node: str, key: tuple[float, float, float]
                   ) -> list[tuple[float, float]]:
        cached = self._starts.get(node)
        if cached is None:
            cached = self._starts[node] = {}
        found = cached.get(key)
        if found is None:
            found = cached[key] = self._find_starts(node, *key)
        return found

    def _find_starts(self, node: str, gpus: float, cpus: float, duration: float
                     ) -> list[tuple[float, float]]:
        out: list[tuple[float, float]] = []
        need_g, need_c, long = gpus - EPS, cpus - EPS, duration - EPS
        run_start: float | None = None
        for at, g, c in self.profile(node):
            if g >= need_g and c >= need_c:
                if run_start is None:
                    run_start = at
            elif run_start is not None:
                if at - run_start >= long:
                    out.append((run_start, at - duration))
                run_start = None
        if run_start is not None:
            out.append((run_start, INF))
        return out

    def fits(self, nodes: Iterable[str], gpus: float, cpus: float, duration: float) -> bool:
        """Whether each of ``nodes`` has ``gpus``/``cpus`` free over ``[now, now +
        duration)``."""
        for node in nodes:
            if node not in self._free:
                return False
            if not _holds(self.starts(node, gpus, cpus, duration), self.now):
                return False
        return True

    def earliest(self, nnodes: int, gpus: float, cpus: float, duration: float,
                 not_before: float | None = None) -> tuple[float, list[str]] | None:
        """The first time ``t >= not_before`` at which ``nnodes`` distinct nodes each have
        ``gpus``/``cpus`` free over ``[t, t + duration)``, and those nodes (the ones with
        the fewest GPUs free at ``t`` first: best fit); None when no such time is known."""
        found = self._answer(nnodes, gpus, cpus, duration, not_before)
        return None if found is None else (found[0], list(found[1]))

    def place(self, nnodes: int, gpus: float, cpus: float, duration: float,
              not_before: float | None, owner: str) -> float | None:
        """Hold the room ``earliest`` finds for ``owner`` over ``duration`` on each of its
        nodes: its start (None: no room known)."""
        found = self._answer(nnodes, gpus, cpus, duration, not_before)
        if found is None:
            return None
        start, nodes = found
        for node in nodes:
            self.hold(node, start, start + duration, gpus, cpus, owner)
        return start

    def _answer(self, nnodes: int, gpus: float, cpus: float, duration: float,
                not_before: float | None) -> tuple[float, tuple[str, ...]] | None:
        """``_earliest``'s answer, kept until the timeline changes."""
        key = (nnodes, gpus, cpus, duration, not_before)
        if key not in self._answers:
            self._answers[key] = self._earliest(nnodes, gpus, cpus, duration, not_before)
        return self._answers[key]

    def _earliest(self, nnodes: int, gpus: float, cpus: float, duration: float,
                  not_before: float | None) -> tuple[float, tuple[str, ...]] | None:
        not_before = self.now if not_before is None else max(not_before, self.now)
        key = (gpus, cpus, duration)
        windows = {node: self._starts_of(node, key) for node in self._free}
        if nnodes == 1:  # the first time one node has room: the only one to try
            first = _first_start(windows.values(), not_before)
            times = [] if first is None else [first]
        else:
            times = sorted({not_before} | {a for ws in windows.values() for a, _ in ws
                                           if a > not_before})
        for t in times:
            ok = [node for node, ws in windows.items() if _holds(ws, t)]
            if len(ok) >= nnodes:
                ok.sort(key=lambda node: (self.free_at(node, t)[0], node))
                return t, tuple(ok[:nnodes])
        return None

    def free_at(self, node: str, at: float) -> tuple[float, float]:
        """(GPUs, CPUs) free on ``node`` at ``at``."""
        profile = self.profile(node)
        _, gpus, cpus = profile[max(0, bisect_right(profile, (at + EPS, INF, INF)) - 1)]
        return gpus, cpus

    def blocking(self, nodes: Iterable[str], until: float,
                 owners: Collection[str] | None = None) -> Hold | None:
        """The earliest hold on ``nodes`` that starts before ``until`` (what a task that
        would run until then delays), of one of ``owners`` when given, or None."""
        chosen = set(nodes)
        found = [h for h in self.holds if h.node in chosen and h.start < until - EPS
                 and h.start > self.now + EPS and (owners is None or h.owner in owners)]
        return min(found, key=lambda h: (h.start, h.owner)) if found else None


def _holds(windows: list[tuple[float, float]], t: float) -> bool:
    """Whether ``t`` lies in one of ``windows`` (a node's intervals of start times)."""
    for a, b in windows:  # noqa: SIM110 (a loop: any() over a generator took twice as long)
        if a - EPS <= t <= b + EPS:
            return True
    return False


def _first_start(windows: Iterable[list[tuple[float, float]]], not_before: float
                 ) -> float | None:
    """The first time ``>= not_before`` inside one of the ``windows`` (intervals of start
    times, sorted, per node), or None: the only time ``earliest`` need try for one node."""
    best: float | None = None
    for ws in windows:
        for a, b in ws:
            if b + EPS < not_before:
                continue
            t = not_before if a - EPS <= not_before else a
            best = t if best is None else min(best, t)
            break
    return best
