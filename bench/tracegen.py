"""The seeded synthetic trace of ``bench/bench_trace.py`` and the bounds it is judged by.

Shaped like Kueue's scheduler performance test (small / medium / large workload classes
from several tenants), on an Argus cluster of 4 workers x 8 GPUs:

* ``small``: 1x1 GPU, 3-15 min; ``medium``: 1x4, 15-45 min; ``large``: 2x8 (two whole
  nodes), 30-90 min; medium and large checkpoint (``save_freq`` set, so they may be
  preempted);
* ``failfast``: 1x4 whose first attempt dies like verl's fail-fast resource check (FAILED
  30 s after its driver starts, never holding its gang; Argus retries it) and whose
  second attempt runs 10-30 min.

Every task declares a time limit (``max_runtime_s``) as a user who knows the class would:
its longest run plus a third, in round minutes (small 20 min, medium 1 h, large 2 h,
fail-fast 40 min), times the user's duration scale when that is above 1 (rounded up to a
minute); runs never reach it.

Three users with different mixes (alice mostly small, bob mostly medium, carol many
large) but the same offered GPU load each, so equal shares are achievable. Each user's
tasks arrive as a Poisson process whose rate makes the three together offer ``load`` x
the cluster's GPUs. About ``priority_share`` of the tasks carry priority 10 (the others
0); policies without priorities ignore it. Pure: no I/O, ``random.Random`` only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

NODES = 4
GPUS_PER_NODE = 8
GPUS = NODES * GPUS_PER_NODE
HIGH_PRIORITY = 10
FAILFAST_AFTER_S = 30.0  # the fail-fast attempt ends this long after its driver starts
FAILFAST_MESSAGE = "ValueError: Total available GPUs 2.0 is less than total desired GPUs 4"


@dataclass(frozen=True, slots=True)
class TaskClass:
    name: str
    nnodes: int
    gpus_per_node: int
    min_s: float  # duration, uniform in [min_s, max_s]
    max_s: float
    limit_s: float  # the max_runtime_s its tasks declare
    checkpoints: bool = False  # save_freq >= 1: preemptible, resumes from its checkpoint
    fail_fast: bool = False  # first attempt fails like verl's resource check

    @property
    def gpus(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def mean_s(self) -> float:
        return (self.min_s + self.max_s) / 2


CLASSES: Mapping[str, TaskClass] = {
    c.name: c for c in (
        TaskClass("small", 1, 1, 180, 900, 1200),
        TaskClass("medium", 1, 4, 900, 2700, 3600, checkpoints=True),
        TaskClass("large", 2, 8, 1800, 5400, 7200, checkpoints=True),
        TaskClass("failfast", 1, 4, 600, 1800, 2400, fail_fast=True),
    )
}
CLASS_ORDER = tuple(CLASSES)


def classes_for(gpus_per_node: int) -> Mapping[str, TaskClass]:
    """The classes on nodes of ``gpus_per_node`` GPUs: no gang asks more of one node than
    it has (on 4-GPU nodes the large gang is 2x4), durations and limits unchanged."""
    return {name: replace(c, gpus_per_node=min(c.gpus_per_node, gpus_per_node))
            for name, c in CLASSES.items()}

# share of each user's tasks per class (by count)
MIXES: Mapping[str, Mapping[str, float]] = {
    "alice": {"small": 0.80, "medium": 0.15, "failfast": 0.05},
    "bob": {"small": 0.30, "medium": 0.55, "failfast": 0.10, "large": 0.05},
    "carol": {"small": 0.50, "medium": 0.20, "failfast": 0.05, "large": 0.25},
}


@dataclass(frozen=True, slots=True)
class TraceTask:
    task_id: str
    user: str
    cls: TaskClass
    arrival: float  # seconds from the trace's start
    duration: float  # seconds of work with the gang held (the successful run)
    priority: int = 0
    limit_s: float | None = None  # the max_runtime_s it declares (None: none)

    @property
    def gpus(self) -> int:
        return self.cls.gpus

    @property
    def work(self) -> float:
        """GPU-seconds of useful work."""
        return self.gpus * self.duration


def task_id(user: str, cls: str, i: int) -> str:
    """A well-formed Argus task id (``service.domain.ids``) that shows the owner and class."""
    return f"sim-{user}-{cls}-20251223-{i // 65536:06d}-{i % 65536:04x}"


def mean_work(mix: Mapping[str, float], classes: Mapping[str, TaskClass] = CLASSES) -> float:
    """Expected GPU-seconds of one task drawn from ``mix``."""
    return sum(share * classes[c].gpus * classes[c].mean_s for c, share in mix.items())


def _user_tasks(rng: random.Random, user: str, rate: float, horizon: float,
                priority_share: float, classes: Mapping[str, TaskClass] = CLASSES
                ) -> list[tuple[float, str, float, int]]:
    """Poisson arrivals of one user up to ``horizon``: (arrival, class, duration, prio)."""
    names = list(MIXES[user])
    weights = [MIXES[user][c] for c in names]
    out, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t > horizon:
            return out
        cls = classes[rng.choices(names, weights)[0]]
        duration = rng.uniform(cls.min_s, cls.max_s)
        prio = HIGH_PRIORITY if rng.random() < priority_share else 0
        out.append((t, cls.name, duration, prio))


@dataclass(frozen=True, slots=True)
class Trace:
    tasks: list[TraceTask]  # in arrival order
    load: float
    horizon: float  # arrivals fall in [0, horizon]
    scale: Mapping[str, float]  # user -> factor applied to their drawn durations


def make_trace(n_tasks: int, load: float, seed: int, *, gpus: int = GPUS,
               priority_share: float = 0.10,
               mixes: Mapping[str, Mapping[str, float]] = MIXES,
               classes: Mapping[str, TaskClass] = CLASSES) -> Trace:
    """About ``n_tasks`` tasks offering exactly ``load`` x ``gpus`` GPUs over the horizon.

    Each user offers ``load * gpus / len(mixes)`` GPUs on average; the horizon is chosen
    so the expected task count is ``n_tasks``. A few large tasks more or less would move
    the offered load far from ``load`` (a 2x8 task is ~200 small ones), so each user's
    drawn durations are then scaled by one factor (``Trace.scale``, near 1 for long
    traces) that makes their GPU-seconds exactly ``load * gpus / len(mixes) * horizon``.
    Every user draws from a generator seeded by ``(seed, user)``, so one user's tasks do
    not depend on the others'.
    """
    if n_tasks < 1 or load <= 0:
        raise ValueError("n_tasks must be >= 1 and load > 0")
    per_user = load * gpus / len(mixes)
    rates = {u: per_user / mean_work(mix, classes) for u, mix in mixes.items()}
    horizon = n_tasks / sum(rates.values())
    raw, scale = [], {}
    for user, rate in rates.items():
        rng = random.Random(f"{seed}:{user}")
        drawn = _user_tasks(rng, user, rate, horizon, priority_share, classes)
        work = sum(classes[c].gpus * d for _, c, d, _ in drawn)
        scale[user] = per_user * horizon / work if work else 1.0
        raw.extend((t, user, c, d * scale[user], p) for t, c, d, p in drawn)
    raw.sort()
    tasks = [TraceTask(task_id(u, c, i), u, classes[c], t, d, p,
                       math.ceil(classes[c].limit_s * max(scale[u], 1.0) / 60) * 60)
             for i, (t, u, c, d, p) in enumerate(raw)]
    return Trace(tasks, load, horizon, scale)


@dataclass(frozen=True, slots=True)
class LowerBound:
    value: float  # seconds from the first arrival
    term: str  # which term binds
    terms: Mapping[str, float]


def lower_bound(trace: Sequence[TraceTask], gpus: int = GPUS) -> LowerBound:
    """A valid lower bound on the makespan (from the first arrival), and its binding term.

    * ``work/GPUs``: all useful GPU-seconds spread over every GPU;
    * ``longest task``;
    * ``arrival+duration``: no task ends before it arrived and ran;
    * ``work after t``: the work arriving at or after t cannot run before t, so the
      makespan is at least ``t + (work arriving at or after t) / GPUs`` for every t
      (``work/GPUs`` is this at the first arrival).
    """
    t0 = trace[0].arrival
    after = 0.0
    tail = 0.0
    for t in reversed(trace):
        after += t.work
        tail = max(tail, t.arrival - t0 + after / gpus)
    terms = {
        "work/GPUs": sum(t.work for t in trace) / gpus,
        "longest task": max(t.duration for t in trace),
        "arrival+duration": max(t.arrival - t0 + t.duration for t in trace),
        "work after t": tail,
    }
    term = max(terms, key=lambda k: terms[k])
    return LowerBound(terms[term], term, terms)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100]); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def jain(shares: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all shares are equal, 1/n when one takes all."""
    total = sum(shares)
    squares = sum(x * x for x in shares)
    if not shares or squares == 0:
        return math.nan
    return total * total / (len(shares) * squares)
