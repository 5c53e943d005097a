"""Offload: blocking calls on dedicated threads, awaited from the event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.offload import Offload


async def test_runs_on_its_own_threads_and_returns_or_raises() -> None:
    lane = Offload("lane", threads=2)
    assert lane._threads == []  # started by the first call
    name = await lane.run(lambda: threading.current_thread().name)
    assert name.startswith("lane-") and name != threading.current_thread().name
    assert await lane.run(divmod, 7, 2) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        await lane.run(divmod, 1, 0)
    lane.close()


async def test_one_thread_serves_calls_in_order() -> None:
    lane = Offload("fifo", threads=1)
    seen: list[int] = []
    await asyncio.gather(*(lane.run(seen.append, i) for i in range(50)))
    assert seen == list(range(50))
    lane.close()


async def test_a_call_cancelled_before_it_started_is_skipped() -> None:
    lane = Offload("skip", threads=1)
    gate, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def blocker() -> None:
        started.set()
        gate.wait(10)
        ran.append("blocker")

    first = asyncio.ensure_future(lane.run(blocker))
    assert await asyncio.to_thread(started.wait, 10)
    second = asyncio.ensure_future(lane.run(ran.append, "second"))
    await asyncio.sleep(0)  # let it queue behind the blocker
    second.cancel()
    gate.set()
    await first
    assert await lane.run(ran.append, "third") is None
    assert ran == ["blocker", "third"]
    assert second.cancelled()
    lane.close()


async def test_close_finishes_queued_calls_then_refuses() -> None:
    lane = Offload("close", threads=1)
    gate = threading.Event()
    done: list[int] = []
    calls = [asyncio.ensure_future(lane.run(lambda: gate.wait(10)))]
    calls += [asyncio.ensure_future(lane.run(done.append, i)) for i in range(3)]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.to_thread(lane.close)
    await asyncio.gather(*calls)
    assert done == [0, 1, 2]
    with pytest.raises(RuntimeError, match="closed"):
        await lane.run(done.append, 3)


def test_threads_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Offload("none", threads=0)
