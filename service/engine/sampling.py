"""After each scheduler tick: the attempts admitted since the last one (for the admission
wait-time histogram) and, once per interval, a sample of the queue and the GPUs for the
console's charts. Samples older than ``keep_s`` are deleted as new ones are written, so
the table holds at most ``keep_s / interval_s`` rows (1,500 by default).
"""

from __future__ import annotations

import logging
from typing import Protocol

from service.cluster.boundary import ClusterSnapshot
from service.domain.rows import Admitted
from service.domain.writes import Sample
from service.engine.observed import gpu_totals

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 60.0
KEEP_S = 25 * 3600.0  # a little over the charts' 24 h


class SampleStore(Protocol):
    """What sampling reads and writes (``store.Store.console``)."""

    def admitted_between(self, since: float, until: float) -> list[Admitted]: ...

    def queue_sizes(self) -> tuple[int, int]: ...

    def last_sample_ts(self) -> float | None: ...

    def record_sample(self, sample: Sample, keep_s: float) -> None: ...


class Sampler:
    def __init__(self, store: SampleStore, *, interval_s: float = SAMPLE_INTERVAL_S,
                 keep_s: float = KEEP_S) -> None:
        self._samples = store
        self._interval_s = interval_s
        self._keep_s = keep_s
        self._admitted_until: float | None = None
        self._last_sample: float | None = None

    def admitted(self, now: float) -> list[Admitted]:
        """Attempts claimed since the previous call (none on the first: the process
        counts from its start)."""
        since, self._admitted_until = self._admitted_until, now
        if since is None:
            return []
        return self._samples.admitted_between(since, now)

    def sample(self, now: float, snapshot: ClusterSnapshot | None) -> Sample | None:
        """Write a sample when the interval has passed since the last one (also across
        restarts: the last one is read back once); the sample written, or None."""
        if self._last_sample is None:
            self._last_sample = self._samples.last_sample_ts() or float("-inf")
        if now - self._last_sample < self._interval_s:
            return None
        pending, running = self._samples.queue_sizes()
        used = total = None
        if snapshot is not None:
            used, total = gpu_totals(snapshot)
        sample = Sample(now, pending, running, used, total)
        self._samples.record_sample(sample, self._keep_s)
        self._last_sample = now
        return sample
