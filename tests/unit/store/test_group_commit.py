"""Submits committed together (service/store/grouped.py), on both engines: one
transaction for a group, and every caller's answer what it would be alone, in the same
order (a quota counts the group's earlier submits, a clash or a refusal is its own)."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from functools import partial

import pytest

from service.domain.ids import new_task_id
from service.domain.newtask import NewTask
from service.policy.quotas import Limits
from service.store import tasks as store_tasks
from service.store.aio import AsyncStore
from service.store.grouped import run_grouped
from service.store.inserts import DependencyError
from service.store.offload import PARTY
from service.store.sql import QUERIES as Q
from service.store.writer import QuotaExceeded, Store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store(store_url)
    yield s
    s.close()


def _task(i: int, user: str = "alice", after: tuple[tuple[str, str], ...] = ()) -> NewTask:
    return NewTask(id_prefix="mvp2", workload="ppo", text=f"raw: {i}\n", spec={"i": i},
                   nnodes=1, n_gpus_per_node=1, user=user, created_at=1766500321.0 + i,
                   priority=0, after=after)


def _i(store: Store, task_id: str) -> int:
    """Which ``_task`` a stored task was."""
    return int(store.tasks.get_task(task_id).created_at - 1766500321.0)


def _counts(store: Store) -> dict[str, int]:
    return {state: n for state, n in store.tasks.counts_by_state().items() if n}


def _events(store: Store, task_id: str) -> list[str]:
    return [e.event_type for e in store.tasks.events(task_id)]


def test_a_group_of_submits_is_one_commit_and_each_gets_its_task(store: Store) -> None:
    before = store.core.commits
    out = run_grouped([partial(store.tasks.create_task, _task(i)) for i in range(10)],
                      store.core.together)
    ids = [o.get() for o in out]
    assert store.core.commits == before + 1
    assert len(set(ids)) == 10
    assert [_i(store, t) for t in ids] == list(range(10))
    assert all(_events(store, t) == ["CREATED"] for t in ids)


def test_a_quota_counts_the_groups_earlier_submits_and_refuses_in_order(
        store: Store) -> None:
    quota = Limits(max_waiting_tasks=3)
    out = run_grouped([partial(store.tasks.create_task, _task(i), quota=quota)
                       for i in range(5)] + [partial(store.tasks.create_task, _task(5, "bob"),
                                                     quota=quota)], store.core.together)
    assert [o.error is None for o in out] == [True, True, True, False, False, True]
    with pytest.raises(QuotaExceeded):
        out[3].get()
    assert [_i(store, o.get()) for o in out if o.error is None] == [0, 1, 2, 5]
    assert _counts(store)["QUEUED"] == 4


def test_a_refused_dependency_keeps_nothing_of_its_task_and_the_rest_land(
        store: Store) -> None:
    first = store.tasks.create_task(_task(0))
    out = run_grouped([partial(store.tasks.create_task, _task(1, after=(("ok", first),))),
                       partial(store.tasks.create_task,
                               _task(2, after=(("ok", "mvp2-ppo-nobody-0000"),))),
                       partial(store.tasks.create_task, _task(3))], store.core.together)
    with pytest.raises(DependencyError, match="not found"):
        out[1].get()
    landed = [out[0].get(), out[2].get()]
    assert {_i(store, t) for t in landed} == {1, 3}
    assert _counts(store) == {"QUEUED": 2, "BLOCKED": 1}


def test_a_write_that_carries_on_after_its_transaction_failed_keeps_nothing_of_it(
        store: Store) -> None:
    """Alone, a transaction that raised is rolled back, whatever its caller does next; in
    a group only the group's rollback can undo it, and the write cannot catch that."""
    first = store.tasks.create_task(_task(0))

    def careless() -> str:
        try:
            with store.core.tx() as conn:
                conn.execute(Q["insert_event"], {"task_id": first, "ts": 1.0,
                                                 "event_type": "NOTE", "payload_json": "{}"})
                raise ValueError("refused after writing")
        except ValueError:
            return "carried on"

    out = run_grouped([partial(store.tasks.create_task, _task(1)), careless,
                       partial(store.tasks.create_task, _task(2))], store.core.together)
    assert out[1].get() == "carried on"
    assert _events(store, first) == ["CREATED"]  # no NOTE
    assert sorted(_i(store, o.get()) for o in (out[0], out[2])) == [1, 2]


def test_grouped_submits_whose_minted_ids_mostly_clash_all_land(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clash inside a group (on PostgreSQL found at a later statement or the COMMIT)
    rolls the group back; its submits run again and each lands once."""
    rng = random.Random(7)
    monkeypatch.setattr(store_tasks, "new_task_id",
                        partial(new_task_id, suffix=lambda: f"{rng.randrange(12):04x}"))
    made: list[str] = []
    for g in range(20):
        out = run_grouped([partial(store.tasks.create_task, _task(g))
                           for _ in range(5)], store.core.together)
        made += [o.get() for o in out]
    assert len(set(made)) == 100
    assert sum(len(_events(store, t)) for t in made) == 100
    assert _counts(store) == {"QUEUED": 100}


def test_the_write_lane_groups_the_submits_that_queued_behind_a_write(
        store: Store) -> None:
    """While one write holds the lane, twenty submits of two users queue up: they commit
    as one group, and each caller gets its own task."""
    lanes = AsyncStore(store)
    held, go = threading.Event(), threading.Event()

    def blocker(s: Store) -> None:
        held.set()
        go.wait(10)

    async def submit(i: int, user: str) -> str:
        PARTY.set(user)
        return await lanes.write(lambda s: s.tasks.create_task(_task(i, user)), grouped=True)

    async def run() -> list[str]:
        first = asyncio.create_task(lanes.write(blocker))
        await asyncio.to_thread(held.wait, 10)
        before = store.core.commits
        subs = [asyncio.create_task(submit(i, "alice" if i % 2 else "bob"))
                for i in range(20)]
        await asyncio.sleep(0)  # every submit queued behind the blocker
        go.set()
        await first
        ids = await asyncio.gather(*subs)
        assert store.core.commits == before + 1
        return ids

    try:
        ids = asyncio.run(run())
    finally:
        lanes.close()
    assert [_i(store, t) for t in ids] == list(range(20))
    assert [store.tasks.get_task(t).user for t in ids[:2]] == ["bob", "alice"]


def test_a_grouped_submit_cancelled_before_its_group_ran_writes_nothing(
        store: Store) -> None:
    lanes = AsyncStore(store)
    held, go = threading.Event(), threading.Event()

    def blocker(s: Store) -> None:
        held.set()
        go.wait(10)

    async def run() -> str:
        first = asyncio.create_task(lanes.write(blocker))
        await asyncio.to_thread(held.wait, 10)
        gone = asyncio.create_task(lanes.write(
            lambda s: s.tasks.create_task(_task(1)), grouped=True))
        kept = asyncio.create_task(lanes.write(
            lambda s: s.tasks.create_task(_task(2)), grouped=True))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        go.set()
        await first
        with pytest.raises(asyncio.CancelledError):
            await gone
        return await kept

    try:
        kept = asyncio.run(run())
    finally:
        lanes.close()
    assert _counts(store) == {"QUEUED": 1}
    assert _i(store, kept) == 2
