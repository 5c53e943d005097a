"""How to learn the state of many Ray jobs at once: one read per job, or one listing.

The reconcile asks Ray about every attempt on the cluster each tick. The Jobs SDK has two
ways: ``get_job_info`` per job (one HTTP round trip each, 6-10 ms measured on Ray 2.60
on this project's machine) or ``list_jobs`` (one round trip that returns *every* job the
head has ever run: ~27 ms for 40 jobs, ~137 ms for 340; ``bench/bench_job_reads.py``).
Which is cheaper depends on how many jobs are asked about and on the head's history,
which only grows, so the choice is made on measured costs: the listing whenever asking
one by one would take longer than the last listing did. Pure: the adapter
(``service.cluster.raycluster``) times the calls and tells.
"""

from __future__ import annotations

from dataclasses import dataclass

# Below this many jobs a listing (the head's whole history) is never worth it.
MIN_BATCH = 4
# Weight of the newest per-job read in the running mean of their cost.
CALL_WEIGHT = 0.3
# In per-job mode, the listing is timed again every this many batches: a slow moment
# measured once must not rule it out for good.
PROBE_EVERY = 32


@dataclass
class JobReadCosts:
    """What a per-job read and a listing cost lately (seconds; None: not measured yet).

    Not thread-safe: its owner guards it.
    """

    per_call_s: float | None = None
    list_s: float | None = None
    batches_since_list: int = 0

    def use_list(self, n: int) -> bool:
        """Whether ``n`` jobs are best read with one listing (counts the batch)."""
        if n < MIN_BATCH or self.per_call_s is None:
            return False  # few jobs, or the per-job cost is learnt first
        self.batches_since_list += 1
        if self.list_s is None or self.batches_since_list >= PROBE_EVERY:
            return True
        return n * self.per_call_s > self.list_s

    def note_call(self, seconds: float) -> None:
        """One per-job read took ``seconds``."""
        self.per_call_s = seconds if self.per_call_s is None else (
            CALL_WEIGHT * seconds + (1 - CALL_WEIGHT) * self.per_call_s)

    def note_list(self, seconds: float) -> None:
        """One listing took ``seconds`` (the newest figure wins: the history only grows)."""
        self.list_s = seconds
        self.batches_since_list = 0
