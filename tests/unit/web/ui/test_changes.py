"""The tasks' change sequence (triggers, read by key) and the process's one change feed;
live-stream slots per session and per user. No sleeps: the feed is refreshed by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.domain.newtask import NewTask
from service.store.sql import QUERIES as Q
from service.store.writer import Store
from service.web.ui.changes import ChangeFeed
from service.web.ui.slots import StreamSlots

T0 = 1_766_000_000.0


def _create(store: Store, task_id: str, user: str = "alice") -> None:
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x: 1", spec={"x": 1},
                                    nnodes=1, n_gpus_per_node=1, user=user, created_at=T0,
                                    priority=0), task_id=task_id)


def test_the_sequence_grows_with_every_created_or_moved_task(store_url: str) -> None:
    store = Store(store_url)
    try:
        first = store.change_seq()
        _create(store, "t-1")
        after_create = store.change_seq()
        assert after_create > first
        store.tasks.cancel("t-1", T0 + 1)  # a move (updated_at moves)
        assert store.change_seq() > after_create
        moved = store.change_seq()
        store.tasks.get_task("t-1")  # a read changes nothing
        assert store.change_seq() == moved
    finally:
        store.close()


def test_the_sequence_is_read_by_key_not_by_scanning_tasks(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "db.sqlite3"))
    try:
        plan = " ".join(r["detail"] for r in store.reads.reader().execute(
            "EXPLAIN QUERY PLAN " + Q["change_seq"]))
        assert "tasks" not in plan.replace("task_changes", "")
        assert "SCAN" not in plan
    finally:
        store.close()


async def test_the_feed_reads_once_for_every_waiter_and_wakes_them_all() -> None:
    value = 5
    reads = 0

    async def read() -> int:
        nonlocal reads
        reads += 1
        return value

    feed = ChangeFeed(read)
    assert await feed.latest() == 5
    waiters = [asyncio.create_task(feed.wait_past(5, timeout=30)) for _ in range(500)]
    await asyncio.sleep(0)  # let them all start waiting (no time passes)
    assert not any(w.done() for w in waiters)
    value = 6
    await feed.refresh()
    assert await asyncio.gather(*waiters) == [6] * 500
    # the first latest(), the first waiter's (nobody waited yet), the refresh: none more
    assert reads == 3
    assert await feed.wait_past(5, timeout=30) == 6  # already past: at once


async def test_the_feed_stops_and_wakes_waiters_when_closing() -> None:
    async def read() -> int:
        return 1

    feed = ChangeFeed(read, poll_s=3600)
    closing = asyncio.Event()
    runner = asyncio.create_task(feed.run(closing))
    assert await feed.latest() == 1
    waiter = asyncio.create_task(feed.wait_past(1, timeout=3600))
    await asyncio.sleep(0)
    closing.set()
    async with asyncio.timeout(5):
        await runner
        assert await waiter == 1


async def test_a_failing_read_is_retried_not_fatal() -> None:
    answers: list[int | Exception] = [3, OSError("disk I/O error"), 4]

    async def read() -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    feed = ChangeFeed(read, poll_s=0)
    closing = asyncio.Event()
    waiter = asyncio.create_task(feed.wait_past(3, timeout=30))
    await asyncio.sleep(0)  # it waits (it read 3)
    runner = asyncio.create_task(feed.run(closing))
    async with asyncio.timeout(5):
        assert await waiter == 4  # the failed poll was logged, the next one woke it
    closing.set()
    await runner
    assert answers == []


async def test_nobody_waiting_nothing_is_polled() -> None:
    reads = 0

    async def read() -> int:
        nonlocal reads
        reads += 1
        return 1

    feed = ChangeFeed(read, poll_s=0)
    closing = asyncio.Event()
    runner = asyncio.create_task(feed.run(closing))
    for _ in range(100):
        await asyncio.sleep(0)  # a hundred turns of the poll loop
    closing.set()
    await runner
    assert reads == 0


@pytest.mark.parametrize(("per_session", "per_user", "opens", "refused_at"), [
    (2, 10, [("s1", "a"), ("s1", "a"), ("s1", "a")], 2),  # a session's limit
    (0, 2, [("s1", "a"), ("s2", "a"), ("s3", "a")], 2),  # a user's, across sessions
    (2, 2, [("s1", "a"), ("s1", "a"), ("s2", "b"), ("s2", "b")], None),  # others unaffected
    (0, 0, [("s1", "a")] * 50, None),  # 0: no limit
])
def test_stream_slots_by_table(per_session, per_user, opens, refused_at) -> None:
    slots = StreamSlots(per_session, per_user)
    refusals = [slots.acquire(s, u) for s, u in opens]
    first_refused = next((i for i, r in enumerate(refusals) if r is not None), None)
    assert first_refused == refused_at
    accepted = sum(r is None for r in refusals)
    assert slots.open_streams() == accepted
    if refused_at is not None:
        assert "max_streams_per" in refusals[refused_at]
        slots.release(*opens[0])  # a closed stream frees its slot
        assert slots.acquire(*opens[refused_at]) is None
        assert slots.open_streams() == accepted


# -- sign-in backoff (pure, clock injected) ------------------------------------------------------


def test_sign_in_backoff_doubles_past_the_free_failures_and_success_clears_it() -> None:
    from service.policy import failure_guard as sg

    now = [0.0]
    guard = sg.FailureGuard(lambda: now[0])
    keys = ("address:10.0.0.9", "account:abc")
    for _ in range(sg.SIGN_IN.free_failures):
        assert guard.wait_s(*keys) == 0
        guard.failed(*keys)
    assert guard.wait_s(*keys) == 0  # the free ones cost nothing
    waits = []
    for _ in range(4):
        guard.failed(*keys)
        waits.append(guard.wait_s(*keys))
        now[0] += waits[-1]
    assert waits == [1.0, 2.0, 4.0, 8.0]
    for _ in range(40):
        guard.failed(*keys)
    assert guard.wait_s(*keys) == sg.SIGN_IN.max_s  # capped
    assert guard.wait_s("address:10.0.0.10", "account:other") == 0  # others unaffected
    guard.succeeded(*keys)
    assert guard.wait_s(*keys) == 0
    assert guard.report(60.0) == sg.SIGN_IN.free_failures + 44  # once, then nothing until due
    guard.failed("address:x")
    assert guard.report(60.0) == 0
    now[0] += 60.0
    assert guard.report(60.0) == 1


def test_sign_in_keys_are_forgotten_and_bounded() -> None:
    from service.policy import failure_guard as sg

    now = [0.0]
    guard = sg.FailureGuard(lambda: now[0], sg.Backoff(5, 1.0, 300.0, max_keys=10))
    for i in range(50):
        guard.failed(f"address:{i}")
    assert len(guard._keys) == 10
    now[0] += sg.FORGET_S
    guard.wait_s("address:49")
    assert len(guard._keys) == 0
