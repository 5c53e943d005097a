"""What the console's charts page reads: the samples of the queue and of the GPUs over a
window, and the GPU-seconds each user used in one (the cluster page's running tasks are
``queue.active_tasks``). Each function is one read of the store's read lane."""

from __future__ import annotations

from service.domain.writes import Sample
from service.usecases.reads import ReadDeps


async def samples_since(deps: ReadDeps, since: float) -> list[Sample]:
    return await deps.store.read(lambda s: s.console.samples_since(since))


async def gpu_seconds(deps: ReadDeps, window_from: float, window_to: float, now: float
                      ) -> dict[str | None, float]:
    """``{user: GPU-seconds}`` of the attempts in the window (None: no owner)."""
    return await deps.store.read(lambda s: s.usage.gpu_seconds_in_window(window_from,
                                                                          window_to, now))
