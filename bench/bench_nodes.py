"""Nodes out of admission in the trace simulation (issue 55): a node cordoned for a window,
and one bad node that fails every attempt placed on it, with quarantine and without.

The real ``Scheduler`` and ``Store`` on the simulated 4 x 8-GPU cluster of
``bench/tracesim.py`` (the shipped ``plan`` policy), one seeded synthetic trace
(``bench/tracegen.py``). ``NodeFaultCluster`` plays Ray with the service's fence: a node
out of admission is out of Ray's placement too (the fence job holds its free GPUs), so
what reaches it is only what the scheduler sends there.

* **cordon window**: ``w1`` is cordoned by an operator from ``--cordon-from`` to
  ``--cordon-to`` hours after the first arrival, then resumed. Printed: attempts whose
  gang was placed on ``w1`` while it was cordoned (the floor: 0), and attempts there
  before and after.
* **bad node**: every gang placed on ``w3`` fails ``--fail-after`` seconds after its start
  with a CUDA error (RUNTIME_ERROR, a hardware pattern in its log), once with quarantine
  off and once on. Printed per run: attempts that failed there, the GPU-hours they held
  (lost), tasks that ended FAILED, whether and when the node was quarantined, and gangs
  placed there after that (the floor: 0).

    PYTHONPATH=$PWD .venv/bin/python bench/bench_nodes.py [--tasks N] [--load L] [--seed S]
        [--check]

``--check`` exits 1 when a floor fails: an attempt placed on the cordoned node while it
is cordoned, or (quarantine on) the bad node never quarantined or a gang placed there
after its quarantine. The attempts that fail there before it are those placed before
the evidence of two tasks was complete: with several attempts on the node at once that
can be more than the integration tier's 2 (it runs one at a time).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hostinfo import host_line
from bench.tracegen import TraceTask, make_trace
from bench.tracesim import (
    POLICY_BY_NAME,
    T0,
    SimCluster,
    Simulation,
    scheduler_settings,
    shm_dir,
)
from service.config import SchedulerSettings
from service.domain.nodes import NodeSource
from service.domain.states import RayStatus

CUDA_ERROR = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
CORDONED = "w1"
BAD = "w3"


class NodeFaultCluster(SimCluster):
    """``SimCluster`` with the fence (``fenced()`` names the nodes out of admission) and a
    set of bad nodes where every gang fails ``fail_after_s`` after it is placed."""

    def __init__(self, *args, fenced: Callable[[], set[str]], bad: frozenset[str] = frozenset(),
                 fail_after_s: float = 300.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fenced = fenced
        self.bad = bad
        self.fail_after_s = fail_after_s
        self.placed: list[tuple[float, str, frozenset[str]]] = []  # (when, sid, nodes)
        self.failed_on_bad: list[tuple[str, float]] = []  # (sid, GPU-seconds it held)

    def _placement(self, nnodes: int, gpus: int) -> dict[str, float] | None:
        fenced = self.fenced()
        workers, self.workers = self.workers, [w for w in self.workers if w not in fenced]
        try:
            return super()._placement(nnodes, gpus)
        finally:
            self.workers = workers

    def _try_place(self, sid: str) -> bool:
        if not super()._try_place(sid):
            return False
        nodes = frozenset(n for n, res in self.jobs[sid].holds.items() if res.get("GPU"))
        self.placed.append((self.clock, sid, nodes))
        if nodes & self.bad:
            self._push(self.clock + self.fail_after_s, "hwfail", sid)
        return True

    def _end(self, sid: str, kind: str) -> None:
        if kind != "hwfail":
            if kind == "end" and any(s == sid for s, _ in self.failed_on_bad):
                return  # already failed on the bad node
            super()._end(sid, kind)
            return
        rec = self.records[sid]
        self.finish(sid, RayStatus.FAILED, message=CUDA_ERROR,
                    log=f"Traceback (most recent call last):\n{CUDA_ERROR}\n", exit_code=1)
        self.failed_on_bad.append((sid, rec.gpu_s))


@dataclass
class Outcome:
    name: str
    on_node: dict[str, int]  # attempts placed on the node: before/during/after a window
    failed_on_bad: int
    lost_gpu_h: float
    tasks_failed: int
    quarantined_at_h: float | None
    placed_after: int  # gangs placed on the bad node after it was quarantined
    unfinished: int
    makespan_h: float


def run(trace: Sequence[TraceTask], settings: SchedulerSettings, name: str, *,
        cordon: tuple[float, float] | None, bad: frozenset[str], fail_after_s: float
        ) -> Outcome:
    policy = POLICY_BY_NAME["plan"]
    with tempfile.TemporaryDirectory(prefix="argus-nodes-", dir=shm_dir()) as tmp:
        fenced: set[str] = set()
        cluster = NodeFaultCluster({t.task_id: t for t in trace}, fenced=lambda: fenced,
                                   bad=bad, fail_after_s=fail_after_s)
        sim = Simulation(trace, policy, settings, Path(tmp), step_s=10.0, cluster=cluster)
        store = sim.store
        cluster.fenced = lambda: {r.name for r in store.nodes.states()}
        first = T0 + trace[0].arrival
        if cordon is not None:
            _schedule_cordon(sim, first + cordon[0] * 3600, first + cordon[1] * 3600)
        seen: dict[str, object] = {}
        result_of = sim._result

        def result(now: float, wall_s: float):  # read the store before ``run`` closes it
            seen["events"] = [e for n in bad for e in _events(store, n)]
            seen["failed"] = sum(1 for t in trace
                                 if store.tasks.get_task(t.task_id).state.value == "FAILED")
            return result_of(now, wall_s)

        sim._result = result
        result = sim.run()
        quarantined = [ts for ts, kind in seen["events"] if kind == "NODE_QUARANTINED"]
        failed = seen["failed"]
        after = sum(1 for when, _, nodes in cluster.placed
                    if nodes & bad and quarantined and when >= quarantined[0])
        return Outcome(
            name=name, on_node=_on_node(cluster, cordon, first),
            failed_on_bad=len(cluster.failed_on_bad),
            lost_gpu_h=sum(g for _, g in cluster.failed_on_bad) / 3600,
            tasks_failed=failed,
            quarantined_at_h=(quarantined[0] - first) / 3600 if quarantined else None,
            placed_after=after,
            unfinished=result.unfinished, makespan_h=result.makespan_s / 3600)


def _events(store, name: str) -> list[tuple[float, str]]:
    return [(e.ts, e.kind.value) for e in store.nodes.events(name)]


def _on_node(cluster: NodeFaultCluster, cordon: tuple[float, float] | None, first: float
             ) -> dict[str, int]:
    if cordon is None:
        return {}
    start, end = first + cordon[0] * 3600, first + cordon[1] * 3600
    out = {"before": 0, "during": 0, "after": 0}
    for when, _, nodes in cluster.placed:
        if CORDONED in nodes:
            out["before" if when < start else "during" if when < end else "after"] += 1
    return out


def _schedule_cordon(sim: Simulation, start: float, end: float) -> None:
    """Cordon ``CORDONED`` at ``start`` and resume it at ``end`` (an operator's), by
    wrapping the simulation's tick."""
    tick = sim._tick
    state = {"cordoned": False, "resumed": False}

    def wrapped(now: float) -> None:
        if not state["cordoned"] and now >= start:
            sim.store.nodes.cordon(CORDONED, NodeSource.OPERATOR, "ops", now, "bench: window")
            state["cordoned"] = True
        if state["cordoned"] and not state["resumed"] and now >= end:
            sim.store.nodes.resume(CORDONED, None, "ops", now, "bench: window over")
            state["resumed"] = True
        tick(now)

    sim._tick = wrapped


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--load", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cordon-from", type=float, default=2.0)
    ap.add_argument("--cordon-to", type=float, default=6.0)
    ap.add_argument("--fail-after", type=float, default=300.0)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    print(host_line())
    trace = make_trace(args.tasks, args.load, args.seed).tasks
    base = scheduler_settings(POLICY_BY_NAME["plan"])
    window = run(trace, base, "cordon window", cordon=(args.cordon_from, args.cordon_to),
                 bad=frozenset(), fail_after_s=args.fail_after)
    print(f"cordon window: {CORDONED} cordoned {args.cordon_from:g}-{args.cordon_to:g} h; "
          f"attempts placed there before {window.on_node['before']}, during "
          f"{window.on_node['during']}, after {window.on_node['after']}")
    rows = [run(trace, quarantine(base, on), f"quarantine {'on' if on else 'off'}",
                cordon=None, bad=frozenset({BAD}), fail_after_s=args.fail_after)
            for on in (False, True)]
    print(f"bad node {BAD} (every gang fails {args.fail_after:g} s in with a CUDA error), "
          f"{len(trace)} tasks at load {args.load:g}, seed {args.seed}:")
    print(f"{'':16} {'failed there':>12} {'GPU-h lost':>10} {'tasks FAILED':>12} "
          f"{'quarantined at':>14} {'placed after':>12} {'makespan h':>10}")
    for r in rows:
        q = "-" if r.quarantined_at_h is None else f"{r.quarantined_at_h:.2f} h"
        print(f"{r.name:16} {r.failed_on_bad:12d} {r.lost_gpu_h:10.2f} {r.tasks_failed:12d} "
              f"{q:>14} {r.placed_after:12d} {r.makespan_h:10.1f}")
    on = rows[1]
    ok = window.on_node["during"] == 0 and on.quarantined_at_h is not None \
        and on.placed_after == 0
    print(f"nodes: cordoned got {window.on_node['during']} attempts; bad node cost "
          f"{rows[0].failed_on_bad} failed attempts ({rows[0].lost_gpu_h:.2f} GPU-h, "
          f"{rows[0].tasks_failed} tasks FAILED) without quarantine, {on.failed_on_bad} "
          f"({on.lost_gpu_h:.2f} GPU-h, {on.tasks_failed} FAILED) with, "
          f"{on.placed_after} placed there after the quarantine")
    return 1 if args.check and not ok else 0


def quarantine(base: SchedulerSettings, on: bool) -> SchedulerSettings:
    """``base`` with quarantine on evidence (and the re-queue of its failed attempts) on or
    off (``v2.scheduler.quarantine``, ``quarantine_requeue``)."""
    return replace(base, quarantine=on, quarantine_requeue=on)


if __name__ == "__main__":
    sys.exit(main())
