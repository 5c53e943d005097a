"""Expected starts: the reservation plan replayed with expected run times (pure).

``service.scheduling.reservations`` plans from time limits, which makes each reserved task's planned
start a bound (it starts then at the latest, when nothing ahead of it overruns). Users
also want the likely time. The plan's own decisions are replayed on a second
``Timeline``: the attempts on the cluster end when
``service.scheduling.runtimes.RuntimeModel`` expects, the tasks started this tick (and the
nodes kept for good) hold their nodes for their expected length, and each reserved task,
in the plan's order, takes the earliest room it finds for its expected length (the plan
reserves a task of a higher priority before the lower ones past the starvation guard, so
the replay needs no order of its own).
Decisions stay the limits' (a forecast that runs late must never have delayed a
reservation); only the estimate shown changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from service.scheduling.runtimes import RuntimeModel, Shape
from service.scheduling.timeline import INF, Timeline


class Placed(NamedTuple):
    """One decision of the reservation walk, in its order: a task started now on
    ``nodes`` (held for its expected length, or its limit), a reservation (``nodes``
    None: the replay finds the room), or nodes held for good (``forever``). A tuple: a
    plan records one per decision, ~130 a tick with 10k runnable."""

    task_id: str
    user: str | None
    shape: Shape
    cpus_per_node: float
    limit_s: float | None
    nodes: tuple[str, ...] | None = None
    not_before: float | None = None  # a retry backoff: not before then
    forever: bool = False


@dataclass(frozen=True, slots=True)
class Releasing:
    """GPUs/CPUs an attempt holds on each node, and when it is expected to end."""

    held: Mapping[str, tuple[float, float]]
    end: float


class Forecast(NamedTuple):
    """The replay's answer: ``{task id: expected start}``, and its timeline after every
    decision (the deep estimates go on placing the rest of the queue on it)."""

    starts: dict[str, float]
    timeline: Timeline


def expected_starts(now: float, free: Mapping[str, tuple[float, float]],
                    running: Sequence[Releasing], placed: Sequence[Placed],
                    model: RuntimeModel) -> Forecast:
    """The expected start of every reservation in ``placed`` the replay finds room for
    (a task without a limit runs for good in the replay too). A run expected to end on
    its own frees its room then: no stop to wait for, unlike at a limit."""
    timeline = Timeline(now, free)
    for rel in running:
        for node, (gpus, cpus) in rel.held.items():
            timeline.release(node, rel.end, gpus, cpus)
    out: dict[str, float] = {}
    for p in placed:
        timeline.unhold(p.task_id)  # placed anew (its turn came): only the last counts
        out.pop(p.task_id, None)
        gpus = float(p.shape[1])
        length = INF if p.forever else model.length(p.user, p.shape, p.limit_s)
        if p.nodes is not None:
            start = max(now, p.not_before or now)
            for node in p.nodes:
                timeline.hold(node, now, start + length, gpus, p.cpus_per_node, p.task_id)
            continue
        start = timeline.place(p.shape[0], gpus, p.cpus_per_node, length, p.not_before,
                               p.task_id)
        if start is not None:
            out[p.task_id] = start
    return Forecast(out, timeline)

