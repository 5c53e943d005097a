"""A window of a real public GPU cluster trace, replayed through ``bench/tracesim.py``.

``bench/data/philly-window.csv`` holds 1,000 consecutive jobs of three tenants from
Microsoft's Philly trace (2017; see ``bench/data/README.md`` for the rows, the source and
its terms): each job's submit time (seconds from the window's first), GPU count, run time
and tenant (the job's virtual cluster). ``--trace philly`` replays it on a 4 x 8 cluster:

* sizes are real: 1, 2, 4 and 8 GPUs run on one node (1x1 ``small``; 1x2, 1x4, 1x8
  ``medium``), 16 GPUs is a 2x8 gang (``large``, the largest class);
* durations are real (heavy-tailed: the median job runs 72 s, a fifth under a minute,
  the longest 72 h);
* arrivals are real up to one factor: the inter-arrival times are stretched (or squeezed)
  so that the window offers exactly ``load`` x the cluster's GPUs over its arrival span
  (the real cluster was far larger than 32 GPUs);
* tenants are the three virtual clusters; no job carries a priority (the trace has none)
  and none declares a time limit (Philly's users declared none), so a plan has only run
  history to go on; gangs of 2 GPUs or more checkpoint (may be preempted), as in the
  synthetic trace.

Pure apart from reading the CSV.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.tracegen import TaskClass, Trace, TraceTask, task_id

DATA = Path(__file__).resolve().parent / "data" / "philly-window.csv"
NAME = "philly"


@dataclass(frozen=True, slots=True)
class Job:
    arrival_s: float  # from the window's first submit
    gpus: int
    duration_s: float
    tenant: str


def read_jobs(path: Path = DATA) -> list[Job]:
    """The window's jobs in submit order."""
    with path.open(newline="") as f:
        return [Job(float(r["arrival_s"]), int(r["gpus"]), float(r["duration_s"]),
                    r["tenant"]) for r in csv.DictReader(f)]


def classes_for(gpus_per_node: int) -> Mapping[int, TaskClass]:
    """GPU count -> the class and gang shape it runs as on nodes of ``gpus_per_node``:
    a job that fits one node takes one node, a larger one whole nodes. Durations come from
    the trace, so the class's range is unused (0)."""
    out = {}
    for gpus in (1, 2, 4, 8, 16):
        nnodes = max(1, -(-gpus // gpus_per_node))
        name = "small" if gpus == 1 else ("medium" if nnodes == 1 else "large")
        out[gpus] = TaskClass(name, nnodes, gpus // nnodes, 0, 0, 0,
                              checkpoints=gpus > 1)
    return out


def make_replay(load: float, *, gpus: int = 32, gpus_per_node: int = 8,
                jobs: list[Job] | None = None) -> Trace:
    """The window as a ``Trace`` offering ``load`` x ``gpus`` GPUs over its arrival span.

    The factor applied to the inter-arrival times is ``work / (load * gpus * span)``;
    ``Trace.scale`` reports it per tenant (one factor for all)."""
    if load <= 0:
        raise ValueError("load must be > 0")
    jobs = read_jobs() if jobs is None else jobs
    if len(jobs) < 2:
        raise ValueError("a replay needs at least two jobs")
    classes = classes_for(gpus_per_node)
    t0 = jobs[0].arrival_s
    span = jobs[-1].arrival_s - t0
    work = sum(j.gpus * j.duration_s for j in jobs)
    factor = work / (load * gpus * span)
    tasks = [TraceTask(task_id(user(j.tenant), classes[j.gpus].name, i), user(j.tenant),
                       classes[j.gpus], (j.arrival_s - t0) * factor, j.duration_s)
             for i, j in enumerate(jobs)]
    return Trace(tasks, load, span * factor,
                 dict.fromkeys(sorted({user(j.tenant) for j in jobs}), factor))


def user(tenant: str) -> str:
    """The Argus user of a tenant (virtual cluster hash): ``vc`` + the hash."""
    return f"vc{tenant}"


def smallest_tenant(trace: Trace) -> str:
    """The user offering the fewest GPU-seconds (the one fair share must protect)."""
    work: dict[str, float] = {}
    for t in trace.tasks:
        work[t.user] = work.get(t.user, 0.0) + t.work
    return min(work, key=lambda u: (work[u], u))
