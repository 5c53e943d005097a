"""The store's part of idempotent submits (``service.store.idempotency``): a key is kept
in the transaction of what it created, so one never exists without the other; a key seen
before replays or refuses before anything is written."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from service.domain.newtask import NewTask
from service.policy.idempotency import RETENTION_S, IdemKey
from service.store.idempotency import KeyMismatch, KeyReplayed
from service.store.writer import Store, TaskExists


def tid(i: int) -> str:
    return f"mvp2-ppo-20251223-143201-{i:04x}"


def new(i: int, now: float = 100.0) -> NewTask:
    return NewTask(id_prefix="", workload="ppo", text=f"raw: {i}\n", spec={"i": i},
                   nnodes=1, n_gpus_per_node=1, user="alice", created_at=now, priority=0)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(str(tmp_path / "db.sqlite3"))
    yield s
    s.close()


def rows(store: Store, table: str) -> int:
    with sqlite3.connect(store.db_path) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_a_key_is_kept_with_its_task_and_replays_it(store: Store) -> None:
    key = IdemKey("alice", "k", "fp-1")
    assert store.tasks.create_task(new(1), task_id=tid(1), key=key) == tid(1)
    with pytest.raises(KeyReplayed) as replay:
        store.tasks.create_task(new(2), task_id=tid(2), key=key)
    assert replay.value.result == {"task_id": tid(1), "state": "QUEUED"}
    with pytest.raises(KeyMismatch):
        store.tasks.create_task(new(3), task_id=tid(3), key=IdemKey("alice", "k", "fp-2"))
    assert rows(store, "tasks") == 1 and rows(store, "idempotency_keys") == 1
    # another user's key of the same name is another key
    store.tasks.create_task(new(4), task_id=tid(4), key=IdemKey("bob", "k", "fp-1"))
    assert rows(store, "idempotency_keys") == 2


def test_a_failed_insert_keeps_no_key(store: Store) -> None:
    store.tasks.create_task(new(1), task_id=tid(1))
    with pytest.raises(TaskExists):  # the task's insert fails after the key was checked
        store.tasks.create_task(new(2), task_id=tid(1), key=IdemKey("alice", "k", "fp"))
    assert rows(store, "idempotency_keys") == 0


def test_a_failed_key_write_keeps_no_task(store: Store, monkeypatch) -> None:
    """The other way round: the key's insert fails after the task's: both roll back."""
    def broken(*_a: object, **_k: object) -> None:
        raise sqlite3.IntegrityError("the key's insert failed")

    monkeypatch.setattr("service.store.tasks.record_key", broken)
    with pytest.raises(sqlite3.IntegrityError):
        store.tasks.create_task(new(1), task_id=tid(1), key=IdemKey("alice", "k", "fp"))
    assert rows(store, "tasks") == 0 and rows(store, "events") == 0


def test_expired_keys_are_purged_in_batches_as_keys_are_written(store: Store) -> None:
    for i in range(150):
        store.tasks.create_task(new(i, now=100.0), task_id=tid(i),
                                key=IdemKey("alice", f"k{i}", "fp"))
    later = 100.0 + RETENTION_S + 1
    store.tasks.create_task(new(500, now=later), task_id=tid(500),
                            key=IdemKey("alice", "new-1", "fp"))
    assert rows(store, "idempotency_keys") == 150 - 100 + 1  # one batch of 100 purged
    store.tasks.create_task(new(501, now=later), task_id=tid(501),
                            key=IdemKey("alice", "new-2", "fp"))
    assert rows(store, "idempotency_keys") == 2
