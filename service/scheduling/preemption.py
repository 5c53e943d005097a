"""Which running tasks to stop so that a waiting higher-priority gang fits (pure policy).

Asked only when preemption is on (``v2.scheduler.preemption``) and a gang that an idle
cluster could take has waited past ``preemption_grace_s``. The answer uses admission's
own per-node arithmetic (``FreePool.decide``): stopping a victim gives back, node by node,
the GPUs its placement groups hold there (and their ``cpus_per_gpu`` CPUs); its driver's
slot is not counted (where it runs is not known), so the answer errs on the safe side.

Victims are running tasks of a *lower* priority that write checkpoints (a restart resumes
them; ``preempt_without_checkpoint`` lifts that rule). They are taken lowest priority
first and, among equals, the least work at stake first (GPUs held x time since the start:
for gangs of one size, the most recently started), until the gang fits; then every victim
that is not needed is given back, the most valuable first (higher priority, then the
most work at stake). The result is a set where each victim is necessary, of the lowest
priorities that make room, losing as little work as that allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from service.domain.resources import CPU, GPU, Driver
from service.scheduling.admission import FreePool, Gang


@dataclass(frozen=True, slots=True)
class Running:
    """A running task as preemption sees it."""

    task_id: str
    attempt_no: int
    priority: int
    started_at: float  # when its attempt started (or was submitted)
    held_on: Mapping[str, float]  # node id -> GPUs its placement groups hold there
    cpus_per_gpu: float = 3.0
    checkpointing: bool = True


def eligible(running: Iterable[Running], priority: int, *, without_checkpoint: bool
             ) -> list[Running]:
    """The tasks a gang of ``priority`` may preempt."""
    return [r for r in running if r.priority < priority and r.held_on
            and (r.checkpointing or without_checkpoint)]


def _fits(pool: FreePool, gang: Gang, driver: Driver, victims: Iterable[Running]) -> bool:
    trial = pool.copy()
    for v in victims:
        for node_id, gpus in v.held_on.items():
            trial.release(node_id, {GPU: gpus, CPU: gpus * v.cpus_per_gpu})
    return trial.decide(gang, driver).fits


def choose_victims(pool: FreePool, gang: Gang, driver: Driver,
                   candidates: Sequence[Running], now: float) -> list[Running] | None:
    """The victims to stop so that ``gang`` fits ``pool``, or None when stopping every
    candidate would not make it fit (then nothing is stopped)."""
    def at_stake(r: Running) -> float:
        return sum(r.held_on.values()) * max(now - r.started_at, 0.0)

    order = sorted(candidates, key=lambda r: (r.priority, at_stake(r), r.task_id))
    chosen: list[Running] = []
    for victim in order:
        chosen.append(victim)
        if _fits(pool, gang, driver, chosen):
            break
    else:
        return None
    for victim in sorted(chosen, key=lambda r: (-r.priority, -at_stake(r), r.task_id)):
        rest = [c for c in chosen if c is not victim]
        if rest and _fits(pool, gang, driver, rest):
            chosen = rest
    return chosen
