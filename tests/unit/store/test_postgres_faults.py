"""PostgreSQL going away while the service runs: a write fails as ``StorageUnavailable``
(the API's 503, the scheduler's degraded state), never half-applied, and the store works
again by itself once the server is back (its connections are opened anew)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from support.postgres import PgServer, running_server

from service.domain.newtask import NewTask
from service.store.db import StorageUnavailable, storage_fault
from service.store.writer import Store

pytestmark = pytest.mark.postgres

T0 = 1_000.0


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A server of this test's own: it is stopped and started again."""
    with running_server() as server:
        yield server


def _task(i: int) -> NewTask:
    return NewTask(id_prefix="", workload="ppo", text=f"raw: {i}\n", spec={"i": i},
                   nnodes=1, n_gpus_per_node=1, user="alice", created_at=T0 + i, priority=0)


def test_a_lost_server_is_storage_unavailable_and_the_store_recovers(own_server) -> None:
    store = Store(own_server.database())
    try:
        store.tasks.create_task(_task(1), task_id="t-1")
        store.tasks.get_task("t-1")  # this thread's reader is open now
        own_server.halt()
        with pytest.raises(StorageUnavailable):
            store.tasks.create_task(_task(2), task_id="t-2")
        assert store.write_fault is not None
        with pytest.raises(StorageUnavailable):
            store.probe_write()
        with pytest.raises(Exception) as read:  # the API answers it 503 (middlewares.py)
            store.tasks.get_task("t-1")
        assert storage_fault(read.value) in {"database unavailable",
                                             "database connection lost"}, read.value
        own_server.resume()
        store.probe_write()  # the writer connects again by itself
        assert store.write_fault is None
        store.tasks.create_task(_task(3), task_id="t-3")
        assert store.tasks.get_task("t-1") is not None  # and so does the reader
        assert store.tasks.task_exists("t-3") and not store.tasks.task_exists("t-2")
    finally:
        store.close()


def test_a_write_after_the_server_restarted_behind_an_idle_writer_succeeds(own_server
                                                                           ) -> None:
    """The writing connection sends ``BEGIN`` with the transaction's statements (no round
    trip of its own that would fail on a dropped connection): a connection the server
    closed while idle is found so before anything is sent, and opened again."""
    store = Store(own_server.database())
    try:
        store.tasks.create_task(_task(1), task_id="t-1")
        own_server.halt()  # the server says goodbye to the idle connection
        own_server.resume()
        store.tasks.create_task(_task(2), task_id="t-2")  # no StorageUnavailable
        assert store.write_fault is None and store.tasks.task_exists("t-2")
    finally:
        store.close()


def _in_a_new_thread(call) -> BaseException | None:
    """What ``call`` raised in a thread of its own (whose reader is opened on first use)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except Exception as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    return raised[0] if raised else None


def test_a_reader_first_opened_while_the_server_is_down_is_a_storage_fault(own_server
                                                                           ) -> None:
    """A thread's reader is opened on its first read: with the server down that open fails
    (StoreOpenError, which names the server), and the API must answer it 503, not 500 (a
    submit right after a PostgreSQL restart, the container tier's HA test)."""
    store = Store(own_server.database())
    try:
        store.tasks.create_task(_task(1), task_id="t-1")
        own_server.halt()
        raised = _in_a_new_thread(lambda: store.tasks.get_task("t-1"))
        assert raised is not None and storage_fault(raised) == "database unavailable", raised
        own_server.resume()
        assert _in_a_new_thread(lambda: store.tasks.get_task("t-1")) is None
    finally:
        store.close()
