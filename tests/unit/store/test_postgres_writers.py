"""Several stores on one PostgreSQL database (as several service processes would be):
each write transaction takes the one advisory lock, so writers queue as on SQLite and each
guarded write has exactly one winner."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from support.postgres import PgServer

from service.domain.newtask import NewTask
from service.domain.states import TaskState
from service.store.writer import StaleState, Store, TaskExists

pytestmark = pytest.mark.postgres

DEADLINE_S = 10.0
T1, T2 = "mvp2-ppo-20251223-143201-0001", "mvp2-ppo-20251223-143201-0002"


def _task(i: int) -> NewTask:
    return NewTask(id_prefix="", workload="ppo", text=f"raw: {i}\n", spec={"i": i},
                   nnodes=1, n_gpus_per_node=1, user="alice", created_at=1000.0 + i, priority=0)


@pytest.fixture
def stores(pg_server: PgServer) -> Iterator[list[Store]]:
    url = pg_server.database()
    opened = [Store(url) for _ in range(4)]
    yield opened
    for store in opened:
        store.close()


def _race(stores: list[Store], write) -> list[str]:  # type: ignore[no-untyped-def]
    barrier, results = threading.Barrier(len(stores)), []

    def one(store: Store) -> None:
        barrier.wait()
        try:
            write(store)
            results.append("won")
        except (StaleState, TaskExists):
            results.append("lost")

    threads = [threading.Thread(target=one, args=(s,)) for s in stores]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sorted(results)


def test_a_claim_raced_by_four_stores_has_one_winner(stores: list[Store]) -> None:
    stores[0].tasks.create_task(_task(1), task_id=T1)
    results = _race(stores, lambda s: s.attempts.claim_for_submit(T1, TaskState.QUEUED,
                                                                  1010.0))
    assert results == ["lost"] * 3 + ["won"]
    assert len(stores[1].attempts.list_attempts(T1)) == 1


def test_one_id_created_by_four_stores_is_created_once(stores: list[Store]) -> None:
    results = _race(stores, lambda s: s.tasks.create_task(_task(2), task_id=T2))
    assert results == ["lost"] * 3 + ["won"]
    assert [e.event_type for e in stores[2].tasks.events(T2)] == ["CREATED"]


def test_a_write_waits_for_another_stores_open_write(stores: list[Store]) -> None:
    first, second = stores[0], stores[1]
    done = threading.Event()
    with first.core.tx():
        waiter = threading.Thread(target=lambda: (second.probe_write(), done.set()))
        waiter.start()
        with psycopg.connect(first.db_path, autocommit=True) as watch:
            deadline = time.monotonic() + DEADLINE_S
            while not watch.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND NOT granted AND database = (SELECT oid FROM pg_database "
                    "WHERE datname = current_database())").fetchone()[0]:
                assert time.monotonic() < deadline, "the second writer never queued"
        assert not done.is_set()  # queued on the lock while the first is open
    waiter.join(DEADLINE_S)
    assert done.is_set()
