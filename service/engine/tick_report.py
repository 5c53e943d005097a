"""What one scheduler tick did, counted (``Scheduler.tick`` returns it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TickReport:
    reconciled: int = 0  # on-cluster attempts checked with Ray
    submitted: int = 0  # attempts handed to Ray this tick
    retried: int = 0  # attempts that failed retryably and were re-queued
    finished: int = 0  # tasks that reached a terminal state
    pending: int = 0  # runnable tasks examined that keep waiting
    preempted: int = 0  # running attempts asked to stop for a higher-priority gang
    requeued: int = 0  # attempts asked to stop: their node is drained with requeue
    released: int = 0  # BLOCKED tasks whose dependencies now hold (queued this tick)
    unreachable: str | None = None  # Ray's error when it did not answer
    duration_s: float = 0.0
