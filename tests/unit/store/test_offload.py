"""Offload: blocking calls on dedicated threads, awaited from the event loop."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

from service.store.offload import PARTY, QUIET_HORIZONS, SWEEP_EVERY, Offload, TimeShare


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


async def test_the_stores_read_lane_holds_a_party_to_its_share_of_threads(store_url: str
                                                                          ) -> None:
    """A user's reads beyond its share of the read lane queue behind each other: one at a
    time on SQLite (a read there holds the interpreter lock), all threads but one on
    PostgreSQL (a read there waits for the server); another user's read runs meanwhile."""
    from service.store.aio import PG_READ_PER_PARTY, AsyncStore
    from service.store.writer import Store

    store = Store(store_url)
    reads = AsyncStore(store)
    share = 1 if store.engine_name == "sqlite" else PG_READ_PER_PARTY
    assert reads.read_per_party == share
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

    store.tasks.get_task = slow_get_task  # type: ignore[method-assign]
    try:
        heavies = [asyncio.ensure_future(_read_as("mallory",
                                                  reads.read(lambda s: s.tasks.get_task("t"))))
                   for _ in range(share + 3)]
        async with asyncio.timeout(10):  # mallory's share of threads taken
            while most < share:
                await asyncio.sleep(0.001)
        async with asyncio.timeout(10):  # served while mallory's reads block
            assert await _read_as("alice", reads.read(lambda s: s.users.get_user("alice"))) is None
        assert not gate.is_set() and most == share
        gate.set()
        await asyncio.gather(*heavies)
        assert most == share
    finally:
        gate.set()
        reads.close()
        store.close()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _as(party: str, lane: Offload, fn, *args):
    PARTY.set(party)  # this task's context only
    return await lane.run(fn, *args)


def test_time_share_holds_a_party_over_its_share_only_while_another_is_served() -> None:
    clock = FakeClock()
    share = TimeShare(0.25, horizon_s=1.0, clock=clock)
    share.seen("mallory")
    share.spent("mallory", 1.0)  # a whole core for the last second
    assert share.hold_s("mallory") == 0.0  # alone: she takes what she wants
    share.seen("alice")
    assert share.hold_s("mallory") == pytest.approx(math.log(1.0 / 0.25))
    assert share.hold_s("alice") == 0.0  # under her share
    clock.now += math.log(4.0)  # decayed to the allowance
    assert share.hold_s("mallory") == 0.0
    share.spent("mallory", 1.0)
    clock.now += 1.01  # alice last asked over a horizon ago: forgotten
    assert share.hold_s("mallory") == 0.0 and "alice" not in share._seen
    share.spent("", 50.0)  # the service's own calls are never held, nor hold anyone
    share.seen("")
    share.seen("@127.0.0.1")  # nor does a request whose user is not known yet
    assert share.hold_s("") == 0.0 and share.hold_s("mallory") == 0.0
    with pytest.raises(ValueError, match="share must be"):
        TimeShare(0.0)


def test_a_party_under_its_share_when_last_charged_is_answered_without_the_clock() -> None:
    """Most calls: the use charged last is at most the allowance, and only decays since."""
    clock = FakeClock()
    share = TimeShare(0.25, horizon_s=1.0, clock=clock)
    share.seen("alice")
    share.seen("bob")
    share.spent("alice", 0.25)  # exactly the allowance
    asked: list[float] = []
    share.clock = lambda: asked.append(clock.now) or clock.now  # type: ignore[func-returns-value]
    assert share.hold_s("alice") == 0.0 and share.hold_s("carol") == 0.0
    assert asked == []
    share.clock = clock
    share.spent("alice", 0.01)  # over it: the decayed figure decides, with bob served
    assert share.hold_s("alice") == pytest.approx(math.log(0.26 / 0.25))


def test_time_share_forgets_the_parties_gone_quiet() -> None:
    """Addresses come and go (a party each): the table keeps only the recent ones."""
    clock = FakeClock()
    share = TimeShare(0.25, horizon_s=1.0, clock=clock)
    for i in range(SWEEP_EVERY - 1):
        share.spent(f"@10.0.{i // 256}.{i % 256}", 0.001)
    clock.now += QUIET_HORIZONS + 1.0
    share.spent("alice", 0.001)  # the sweep's call
    assert list(share._used) == ["alice"]


async def test_a_party_over_its_time_share_waits_while_others_are_served() -> None:
    clock = FakeClock()
    share = TimeShare(0.25, horizon_s=1.0, clock=clock)
    lane = Offload("share", threads=1, share=share)
    order: list[str] = []
    await asyncio.ensure_future(_as("alice", lane, order.append, "alice"))
    share.spent("mallory", 1.0)
    mallory = asyncio.ensure_future(_as("mallory", lane, order.append, "mallory"))
    await asyncio.ensure_future(_as("alice", lane, order.append, "alice again"))
    assert order == ["alice", "alice again"] and not mallory.done()
    clock.now += 2.0  # her use decays under the share; the next call wakes the lane
    await asyncio.ensure_future(_as("alice", lane, order.append, "alice last"))
    await asyncio.wait_for(mallory, 10)
    assert order == ["alice", "alice again", "mallory", "alice last"]
    lane.close()


async def test_a_call_is_charged_the_cpu_time_it_took() -> None:
    share = TimeShare(0.01, horizon_s=1.0)
    lane = Offload("charge", threads=1, share=share)

    def burn() -> None:
        deadline = time.thread_time() + 0.05
        while time.thread_time() < deadline:
            pass

    await asyncio.ensure_future(_as("heavy", lane, burn))
    share.seen("other")
    assert share.hold_s("heavy") > 0.0  # 50 ms of CPU just now: past 1% of a core
    lane.close()
