"""What a statement costs on PostgreSQL is mostly its round trip to the server
(service/store/pg.py): a write transaction sends its statements in a pipeline, reading a
result only when the store looks at it, and a task's page sends its five reads together.
These tests count the round trips and check that nothing else changed: a failed statement
still rolls its whole transaction back, a conflict is still the caller's own error, and a
prefetched read answers once, then reads again."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
from psycopg import pq
from support.postgres import PgServer

from service.domain.newtask import NewTask
from service.domain.nodes import NodeSource
from service.domain.states import TaskState
from service.store import pg
from service.store.grouped import run_grouped
from service.store.sql import QUERIES as Q
from service.store.writer import Store, TaskExists, UserExists
from service.usecases.reads import task_view_of

pytestmark = pytest.mark.postgres

T1 = "mvp2-ppo-20251223-143201-0001"


def _task(i: int, user: str | None = "alice") -> NewTask:
    return NewTask(id_prefix="mvp2", workload="ppo", text=f"raw: {i}\n", spec={"i": i},
                   nnodes=1, n_gpus_per_node=1, user=user, created_at=1000.0 + i, priority=0)


@pytest.fixture
def store(pg_server: PgServer) -> Iterator[Store]:
    opened = Store(pg_server.store_database())
    yield opened
    opened.close()


def _notes(store: Store) -> int:
    return store.reads.reader().execute(
        "SELECT count(*) AS n FROM events WHERE event_type = 'NOTE'").fetchone()["n"]


class Trips:
    """The round trips of one connection, read off the wire (libpq's trace of the
    messages sent): each ``Sync`` (the end of a statement, or of a pipeline's batch) or
    simple ``Query`` is one wait for the server (psycopg follows a pipeline's ``Sync`` by a
    ``Flush``, sent with it)."""

    def __init__(self, conn: pg.PgConnection, path: Path) -> None:
        self.pgconn = conn._conn.pgconn
        self.path = path
        self.file = path.open("w")
        self.pgconn.trace(self.file.fileno())
        self.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)

    @property
    def n(self) -> int:
        self.file.flush()
        return len(re.findall(r"^F\t\d+\t(?:Sync|Query)\b", self.path.read_text(),
                              flags=re.M))

    def stop(self) -> None:
        self.pgconn.untrace()
        self.file.close()


def test_a_write_whose_results_nobody_reads_is_one_round_trip(
        store: Store, tmp_path: Path) -> None:
    store.tasks.create_task(_task(1), task_id=T1)
    trips = Trips(store.core._conn, tmp_path / "trace")
    try:
        with store.core.tx() as conn:
            for i in range(5):
                conn.execute(Q["insert_event"], {"task_id": T1, "ts": float(i),
                                                 "event_type": "NOTE", "payload_json": "{}"})
        assert trips.n == 1  # BEGIN, the lock, the five and the COMMIT (one per statement
        # before: 1 + 1 + 5 + 1)
        with store.core.tx() as conn:
            cur = conn.execute(Q["insert_event"], {"task_id": T1, "ts": 9.0,
                                                   "event_type": "NOTE", "payload_json": "{}"})
            assert cur.lastrowid is not None  # a result looked at: one round trip more
        assert trips.n == 1 + 2
    finally:
        trips.stop()
    assert _notes(store) == 6


def test_a_failed_statement_whose_result_was_not_read_rolls_the_whole_write_back(
        store: Store) -> None:
    store.tasks.create_task(_task(1), task_id=T1)
    with pytest.raises(pg.psycopg.Error), store.core.tx() as conn:
        conn.execute(Q["insert_event"], {"task_id": T1, "ts": 1.0, "event_type": "NOTE",
                                         "payload_json": "{}"})
        conn.execute("INSERT INTO no_such_table VALUES (1)")
        conn.execute(Q["insert_event"], {"task_id": T1, "ts": 2.0, "event_type": "NOTE",
                                         "payload_json": "{}"})
    assert _notes(store) == 0
    assert not store.core._conn.in_transaction
    store.tasks.set_priority(T1, 3, 2000.0)  # the connection writes again
    assert store.tasks.get_task(T1).priority == 3  # type: ignore[union-attr]


def test_a_conflict_is_still_the_callers_own_error(store: Store) -> None:
    store.tasks.create_task(_task(1), task_id=T1)
    with pytest.raises(TaskExists):
        store.tasks.create_task(_task(2), task_id=T1)
    store.users.create_user("bob", "user", 1.0)  # type: ignore[arg-type]
    with pytest.raises(UserExists):
        store.users.create_user("bob", "user", 2.0)  # type: ignore[arg-type]
    assert store.tasks.get_task(T1).spec is not None  # type: ignore[union-attr]


def test_a_result_read_inside_the_write_sees_the_statements_before_it(store: Store) -> None:
    store.tasks.create_task(_task(1), task_id=T1)
    with store.core.tx() as conn:
        for i in range(3):
            conn.execute(Q["insert_event"], {"task_id": T1, "ts": float(i),
                                             "event_type": "NOTE", "payload_json": "{}"})
        n = conn.execute("SELECT count(*) AS n FROM events WHERE event_type = 'NOTE'"
                         ).fetchone()["n"]
        last = conn.execute(Q["insert_event"], {"task_id": T1, "ts": 3.0,
                                                "event_type": "NOTE", "payload_json": "{}"})
        assert n == 3 and last.lastrowid is not None and last.rowcount == 1


def test_a_task_page_is_one_statement_and_its_dependencies_one_more(
        store: Store, tmp_path: Path) -> None:
    store.tasks.create_task(_task(1), task_id=T1)
    child = T1[:-4] + "0002"
    store.tasks.create_task(replace(_task(2), after=(("ok", T1),)), task_id=child)
    trips = Trips(store.reads.reader(), tmp_path / "trace")
    try:
        page = task_view_of(store, T1)
        assert trips.n == 1  # five statements before, sent together
        with_deps = task_view_of(store, child)
        assert trips.n == 1 + 2  # the page, then its dependencies' rows
    finally:
        trips.stop()
    assert page is not None and page.task.task_id == T1 and page.dependencies.after == []
    assert with_deps is not None and [d.parent_id for d in with_deps.dependencies.after] == [T1]
    assert with_deps.task.state is TaskState.BLOCKED


def test_a_prefetched_read_answers_once_then_reads_again(store: Store, tmp_path: Path
                                                         ) -> None:
    store.tasks.create_task(_task(1), task_id=T1)
    trips = Trips(store.reads.reader(), tmp_path / "trace")
    try:
        with store.reads.prefetched([(Q["get_task"], {"task_id": T1}),
                                     (Q["task_progress"], {"task_id": T1})]):
            first = store.tasks.get_task(T1)
            assert store.progress.task_progress(T1) is None
            assert trips.n == 1  # both in one
            store.tasks.set_priority(T1, 7, 2000.0)
            again = store.tasks.get_task(T1)  # answered once: this one reads anew
            assert trips.n > 1
    finally:
        trips.stop()
    assert first is not None and again is not None
    assert (first.priority, again.priority) == (0, 7)


def test_a_page_of_no_task_and_an_id_postgresql_cannot_hold(store: Store) -> None:
    assert store.task_page("mvp2-ppo-20251223-143201-ffff") is None
    assert store.task_page("bad\x00id") is None


def test_a_submit_is_one_round_trip_of_the_writer_none_of_a_reader_and_a_transition_three(
        store: Store, tmp_path: Path) -> None:
    trips = Trips(store.core._conn, tmp_path / "trace")
    reads = Trips(store.reads.reader(), tmp_path / "reads")
    try:
        task_id = store.tasks.create_task(_task(1))
        # BEGIN, the lock, the task's INSERT, the spec bytes, the CREATED event and the
        # COMMIT (a minted id's clash found there: seven before the pipeline, and a
        # reader's look for a free id first)
        assert trips.n == 1 and reads.n == 0
        with store.core.tx() as conn:
            store.core.transition(conn, task_id, TaskState.QUEUED, TaskState.CANCELED,
                                  2000.0)
        # BEGIN and the guarded UPDATE (its count read); the event with the webhook facts
        # read back together; the outbox row and the COMMIT
        assert trips.n == 1 + 3
    finally:
        trips.stop()
        reads.stop()
    events = store.reads.reader().execute(
        "SELECT event_type FROM events WHERE task_id = :t ORDER BY id", {"t": task_id}
    ).fetchall()
    assert [e["event_type"] for e in events] == ["CREATED", "STATE_TRANSITION"]
    assert store.tasks.get_task(task_id).state is TaskState.CANCELED  # type: ignore[union-attr]


def test_a_tick_asks_the_server_once_for_what_it_reads_again_unchanged(
        store: Store, tmp_path: Path) -> None:
    """Inside a tick (``tick_scope``) the active tasks and the node states are read once
    while this process commits nothing: on PostgreSQL asking whether anything changed was a
    round trip as dear as the read. A commit of this process is seen at once; outside a
    tick every read asks the server."""
    store.tasks.create_task(_task(1), task_id=T1)
    trips = Trips(store.reads.reader(), tmp_path / "trace")
    try:
        with store.tick_scope():
            for _ in range(5):
                assert store.tasks.active() == []
                assert store.nodes.states() == []
            assert trips.n == 2  # one read of each
            store.nodes.cordon("w1", NodeSource.OPERATOR, "ops", 10.0, "disk")  # a commit
            assert [s.name for s in store.nodes.states()] == ["w1"]
            assert trips.n == 3
        store.nodes.states()
        store.nodes.states()
        assert trips.n == 3 + 4  # outside a tick: the server's version, then the rows
    finally:
        trips.stop()


def test_a_fair_share_ticks_heads_of_the_queue_are_one_round_trip(
        store: Store, tmp_path: Path) -> None:
    for i, user in enumerate(("alice", "bob", "carol", "dave")):
        store.tasks.create_task(_task(i, user), task_id=f"{T1[:-4]}{i:04x}")
    trips = Trips(store.reads.reader(), tmp_path / "trace")
    try:
        rows = store.tasks.runnable(5000.0, 100, per_user=True)
        # BEGIN; the owners; the four heads together; the COMMIT (each head its own before)
        assert trips.n == 4
    finally:
        trips.stop()
    assert sorted(r.user for r in rows) == ["alice", "bob", "carol", "dave"]


def test_a_group_of_submits_is_one_round_trip(store: Store, tmp_path: Path) -> None:
    """Submits committed together (service/store/grouped.py): one BEGIN, lock and COMMIT
    for the group, and nothing read, so one wait for the server in all."""
    store.tasks.create_task(_task(0))  # the owner's older JobSpec bytes dropped once
    trips = Trips(store.core._conn, tmp_path / "trace")
    try:
        out = run_grouped([partial(store.tasks.create_task, _task(i)) for i in range(1, 11)],
                          store.core.together)
        assert trips.n == 1
    finally:
        trips.stop()
    assert all(store.tasks.task_exists(o.get()) for o in out)
