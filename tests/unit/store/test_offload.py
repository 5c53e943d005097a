"""Offload: blocking calls on dedicated threads, awaited from the event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.store.offload import Offload


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


# -- fair share between parties ----------------------------------------------------------------


async def _as(party: str, lane: Offload, fn, *args):
    """``lane.run`` from a coroutine of ``party`` (each task has its own context)."""
    from service.store.offload import PARTY
    PARTY.set(party)
    return await lane.run(fn, *args)


async def test_parties_are_served_in_turn_not_in_arrival_order() -> None:
    lane = Offload("turns", threads=1)
    gate, started = threading.Event(), threading.Event()
    order: list[str] = []

    def blocker() -> None:
        started.set()
        gate.wait(10)

    first = asyncio.ensure_future(_as("x", lane, blocker))
    assert await asyncio.to_thread(started.wait, 10)
    calls = [asyncio.ensure_future(_as(p, lane, order.append, f"{p}{i}"))
             for p, i in (("a", 1), ("a", 2), ("a", 3), ("b", 1))]
    for _ in range(10):
        await asyncio.sleep(0)  # all queued behind the blocker
    assert lane.waiting() == 4
    gate.set()
    await asyncio.gather(first, *calls)
    assert order == ["a1", "b1", "a2", "a3"]  # b waits for one of a's calls, not three
    lane.close()


async def test_one_party_never_holds_every_thread() -> None:
    """A heavy party's calls run at most threads - 1 at a time: another party's call
    starts while they still block."""
    lane = Offload("share", threads=2)
    assert lane.per_party == 1
    gate = threading.Event()
    running = 0
    most = 0
    lock = threading.Lock()

    def heavy() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait(10)
        with lock:
            running -= 1

    heavies = [asyncio.ensure_future(_as("mallory", lane, heavy)) for _ in range(4)]
    for _ in range(10):
        await asyncio.sleep(0)
    async with asyncio.timeout(10):  # served while mallory's first call still blocks
        assert await _as("alice", lane, threading.current_thread) is not None
    assert not gate.is_set() and most == 1
    gate.set()
    await asyncio.gather(*heavies)
    assert most == 1
    lane.close()


def test_a_share_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="per_party"):
        Offload("bad", threads=2, per_party=0)


async def _read_as(party: str, call):
    from service.store.offload import PARTY
    PARTY.set(party)
    return await call


async def test_the_stores_read_lane_runs_one_call_per_party_at_a_time(tmp_path) -> None:
    """A user's reads queue behind each other on the store's read lane (three threads):
    only one of them holds a thread and its CPU at a time, and another user's read runs
    meanwhile."""
    from service.store.aio import AsyncStore
    from service.store.writer import Store

    store = Store(str(tmp_path / "db.sqlite3"))
    reads = AsyncStore(store)
    gate = threading.Event()
    running = most = 0
    lock = threading.Lock()

    def slow_get_task(task_id: str) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait(10)
        with lock:
            running -= 1

    store.get_task = slow_get_task  # type: ignore[method-assign]
    try:
        heavies = [asyncio.ensure_future(_read_as("mallory", reads.get_task("t")))
                   for _ in range(3)]
        for _ in range(10):
            await asyncio.sleep(0)
        async with asyncio.timeout(10):  # served while mallory's first read blocks
            assert await _read_as("alice", reads.get_user("alice")) is None
        assert not gate.is_set() and most == 1
        gate.set()
        await asyncio.gather(*heavies)
        assert most == 1
    finally:
        gate.set()
        reads.close()
        store.close()
