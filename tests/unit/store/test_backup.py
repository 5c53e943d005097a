"""``argus-api db backup`` (``service.store.backup``): a consistent copy of a database that
is being written, restored the documented way (docs/operations.md, "Backups": the service
stopped, the backup copied into place, started), opened by the Store with every task it
held; never over an existing file; the CLI's lines and exit codes."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from service.domain.newtask import NewTask
from service.main import db_main, main
from service.store.backup import MAIN_TABLES, BackupError, backup
from service.store.db import migration_files
from service.store.writer import Store

WRITTEN_FIRST = 50  # tasks written before the backup starts


def tid(i: int) -> str:
    return f"mvp2-ppo-20251223-143201-{i:04x}"


def new(i: int) -> NewTask:
    return NewTask(id_prefix="", workload="ppo", text=f"raw: {i}\n", spec={"i": i},
                   nnodes=1, n_gpus_per_node=1, user="alice", created_at=100.0 + i,
                   priority=0)


class Writer(threading.Thread):
    """Submits tasks one after another until stopped (the service's writes)."""

    def __init__(self, store: Store) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.written: list[str] = []
        self.stop = threading.Event()
        self.warm = threading.Event()  # WRITTEN_FIRST tasks are in
        self.more = threading.Event()  # and 20 more after the backup
        self.mark: int | None = None

    def run(self) -> None:
        i = 0
        while not self.stop.is_set() and i < 0xFFFF:
            self.written.append(self.store.tasks.create_task(new(i), task_id=tid(i)))
            i += 1
            if i >= WRITTEN_FIRST:
                self.warm.set()
            if self.mark is not None and i >= self.mark + 20:
                self.more.set()


def test_a_backup_of_a_store_being_written_restores_with_its_tasks(tmp_path: Path) -> None:
    live = tmp_path / "live" / "argus.sqlite3"
    store = Store(str(live))
    writer = Writer(store)
    writer.start()
    try:
        assert writer.warm.wait(timeout=60), "the writer wrote nothing"
        report = backup(str(live), str(tmp_path / "argus-backup.sqlite3"))
        writer.mark = len(writer.written)
        assert writer.more.wait(timeout=60), "writes stopped after the backup"
    finally:
        writer.stop.set()
        writer.join(timeout=60)
    total = len(writer.written)
    copied = report.rows["tasks"]
    assert WRITTEN_FIRST <= copied < total  # a snapshot, taken while writes went on
    assert report.rows["events"] == copied  # each task with its CREATED event: one commit
    assert set(report.rows) == set(MAIN_TABLES)
    assert report.schema_version == len(migration_files())
    assert report.size_bytes == Path(report.path).stat().st_size > 0
    assert not list(tmp_path.glob(".argus-backup*"))  # no partial or journal left
    store.close()

    # restore: the service stopped, the backup copied into place, the service started
    restored = tmp_path / "restored" / "argus.sqlite3"
    restored.parent.mkdir()
    shutil.copyfile(report.path, restored)
    again = Store(str(restored))
    try:
        for task_id in writer.written[:copied]:
            assert again.tasks.get_task(task_id) is not None, task_id
        assert sum(again.tasks.counts_by_state().values()) == copied
        assert again.tasks.get_task(writer.written[copied]) is None  # after the snapshot
        again.tasks.create_task(new(0xFFFF), task_id=tid(0xFFFF))  # and it takes writes
    finally:
        again.close()


def test_a_backup_never_overwrites_and_never_creates_a_source(tmp_path: Path) -> None:
    live = tmp_path / "argus.sqlite3"
    Store(str(live)).close()
    taken = tmp_path / "taken.sqlite3"
    taken.write_bytes(b"precious")
    with pytest.raises(BackupError, match="never overwrites"):
        backup(str(live), str(taken))
    assert taken.read_bytes() == b"precious"
    missing = tmp_path / "nowhere.sqlite3"
    with pytest.raises(BackupError, match="no database"):
        backup(str(missing), str(tmp_path / "b.sqlite3"))
    assert not missing.exists() and not (tmp_path / "b.sqlite3").exists()
    with pytest.raises(BackupError, match="not a directory"):
        backup(str(live), str(tmp_path / "no-dir" / "b.sqlite3"))


def test_a_file_that_is_not_an_argus_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(BackupError, match="schema version is 0"):
        backup(str(other), str(tmp_path / "b.sqlite3"))
    assert not (tmp_path / "b.sqlite3").exists()
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(BackupError):
        backup(str(garbage), str(tmp_path / "c.sqlite3"))
    assert not (tmp_path / "c.sqlite3").exists()


def test_the_cli_prints_what_it_wrote_and_refuses_an_existing_file(tmp_path, capsys) -> None:
    live = tmp_path / "argus.sqlite3"
    store = Store(str(live))
    store.tasks.create_task(new(1), task_id=tid(1))
    store.close()
    config = tmp_path / "argus.yaml"
    config.write_text(f"v2:\n  sqlite:\n    db_path: {live}\n")
    dest = tmp_path / "backup.sqlite3"
    with pytest.raises(SystemExit) as done:
        main(["db", "backup", "--config", str(config), "--to", str(dest)])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert f"backup written: {dest} (" in out and f"from {live}" in out
    assert "integrity_check ok" in out and "tasks 1, " in out and "events 1" in out
    assert db_main(["backup", "--db", str(live), "--to", str(dest)]) == 1
    assert "never overwrites" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        db_main(["backup", "--config", str(tmp_path / "missing.yaml"), "--to", "x"])
    assert bad.value.code == 2
    with pytest.raises(SystemExit) as usage:
        db_main(["backup"])  # --to is required
    assert usage.value.code == 2
