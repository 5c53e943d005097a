"""The background checkpointer: while it runs no commit checkpoints the WAL, its pass
copies what was committed (and only when something was), and stopping it gives the
checkpoints back to the commits."""

from __future__ import annotations

import time
from pathlib import Path

from service.domain.states import TaskState
from service.store.checkpointer import Checkpointer
from service.store.writer import BulkTask, Store

T0 = 1_766_000_000.0


def _load(store: Store, n: int) -> None:
    store.tasks.bulk_load(BulkTask(task_id=f"mvp2-ppo-20251223-000000-{i:04x}", workload="ppo",
                                   state=TaskState.QUEUED, created_at=T0 + i, user="alice")
                    for i in range(n))


def _write(store: Store, fill: str) -> None:
    """One commit of about 1,500 pages (every task's reason, 2 KB each)."""
    with store.core.tx() as conn:
        conn.execute("UPDATE tasks SET pending_reason = printf('%.2000c', ?)", (fill,))


def _autocheckpoint(store: Store) -> int:
    return store.core._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]


def test_commits_leave_the_wal_to_the_checkpointer(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "db.sqlite3"))
    _load(store, 3000)  # bulk_load checkpoints what it wrote: the WAL is all copied
    wal = Path(f"{store.db_path}-wal")
    checkpointer = Checkpointer(store, every_s=3600.0)  # passes run by hand below
    try:
        checkpointer.start()
        assert _autocheckpoint(store) == 0
        _write(store, "a")
        one = wal.stat().st_size
        assert one > 1000 * 4096
        _write(store, "b")  # no commit checkpointed the first: the WAL grows
        two = wal.stat().st_size
        assert two > one + 1000 * 4096
        assert checkpointer.run_once()  # copies both
        assert not checkpointer.run_once()  # nothing committed since: no pass
        _write(store, "c")  # all copied: the WAL starts over, within its size
        assert wal.stat().st_size == two
        assert checkpointer.run_once()
    finally:
        checkpointer.stop()
    assert _autocheckpoint(store) == 1000
    _write(store, "d")
    _write(store, "e")  # the commits checkpoint again: each starts the WAL over
    assert wal.stat().st_size == two
    store.close()


def test_the_thread_checkpoints_on_its_own(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "db.sqlite3"))
    checkpointer = Checkpointer(store, every_s=0.01)
    checkpointer.start()
    try:
        _load(store, 50)
        deadline = time.monotonic() + 10
        while checkpointer._version is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert checkpointer._version is not None, "no checkpoint within 10 s"
    finally:
        checkpointer.stop()
        store.close()
