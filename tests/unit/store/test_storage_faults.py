"""Storage faults: disk full, read-only, locked. The store says so, the API answers 503,
the scheduler loop reports itself degraded, and everything resumes by itself.

The disk-full and read-only cases run on a real tmpfs of a few MB, mounted by the test
(root only; skipped with the reason otherwise), filled with a ballast file.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from service.cluster.fake import FakeCluster
from service.config import ConfigError, Settings
from service.config_load import settings_from_mapping
from service.domain.newtask import NewTask
from service.engine.scheduler import SchedulerLoop, TickReport
from service.main import build_service
from service.store import db
from service.store.core import WriteCore
from service.store.writer import StorageUnavailable, Store

T0 = 1_700_000_000.0
TOKEN = "t0ken"


# -- a small tmpfs ------------------------------------------------------------------------


@dataclass
class Tmpfs:
    path: Path
    ballast: Path = field(init=False)

    def __post_init__(self) -> None:
        self.ballast = self.path / "ballast"

    def fill(self) -> None:
        """Write the ballast until the file system is full (to the last block)."""
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (1 << 16, 512):
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)

    def free(self, nbytes: int | None = None) -> None:
        """Give back ``nbytes`` of the ballast (all of it by default)."""
        if nbytes is None:
            self.ballast.unlink()
        else:
            os.truncate(self.ballast, max(0, self.ballast.stat().st_size - nbytes))



@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Tmpfs]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield Tmpfs(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def create(store: Store, task_id: str, size: int = 200) -> None:
    store.tasks.create_task(NewTask(id_prefix="", workload="sft", text="y" * size, spec={},
                                    nnodes=1, n_gpus_per_node=1, user=None, created_at=T0,
                                    priority=0), task_id=task_id)


# -- the store ------------------------------------------------------------------------------


def test_disk_full_is_storage_unavailable_and_recovers(tmpfs, caplog):
    store = Store(str(tmpfs.path / "db.sqlite3"))
    try:
        for i in range(20):
            create(store, f"t{i}")
        tmpfs.fill()
        with pytest.raises(StorageUnavailable) as exc:
            for i in range(100):  # the WAL may have room for a few more
                create(store, f"u{i}")
        assert exc.value.reason == "disk full"
        assert store.write_fault == "disk full"
        assert not store.core._conn.in_transaction, "no transaction is left open"
        with pytest.raises(StorageUnavailable):
            store.probe_write()
        assert store.tasks.get_task("t0") is not None, "reads still work"

        tmpfs.free()
        store.probe_write()
        assert store.write_fault is None
        create(store, "after")
        assert {t.task_id for t in store.tasks.list_tasks(limit=500)[0]} >= {
            "after", *(f"t{i}" for i in range(20))}
    finally:
        store.close()
    assert "database writes fail: disk full" in caplog.text
    assert "database writes work again" in caplog.text


def _accepted_after_a_small_free(tmpfs: Tmpfs, store: Store, freed: int, n: int) -> int:
    """A database whose WAL is mid-way to its checkpoint size; fill the disk, give back
    ``freed`` bytes, then try ``n`` writes: how many are accepted."""
    for i in range(300):
        create(store, f"p{i}", 1000)
    side = sqlite3.connect(store.db_path)
    side.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # pages in the database file ...
    side.close()
    for i in range(40):  # ... and a WAL that grew again since
        create(store, f"q{i}", 1000)
    tmpfs.fill()
    with pytest.raises(StorageUnavailable):
        for i in range(100):
            create(store, f"r{i}", 1000)
    tmpfs.free(freed)
    accepted = 0
    for i in range(n):
        try:
            create(store, f"s{i}", 1000)
            accepted += 1
        except StorageUnavailable:
            pass
    return accepted


def test_the_wal_does_not_eat_the_space_that_comes_back(tmpfs):
    """After a disk-full, a little space back must be worth more than a few writes: the
    WAL, which had not reached its checkpoint size yet, would otherwise grow into it."""
    store = Store(str(tmpfs.path / "db.sqlite3"))
    try:
        accepted = _accepted_after_a_small_free(tmpfs, store, 256 * 1024, 40)
    finally:
        store.close()
    assert accepted == 40


def test_without_the_recovery_checkpoints_the_wal_eats_the_space(tmpfs, monkeypatch):
    """The same run with the store's checkpoints switched off: the case the test above
    guards against is real (a few writes, then full again)."""
    monkeypatch.setattr(WriteCore, "checkpoint", lambda self: None)
    store = Store(str(tmpfs.path / "db.sqlite3"))
    try:
        accepted = _accepted_after_a_small_free(tmpfs, store, 256 * 1024, 40)
    finally:
        store.close()
    assert accepted < 20


def test_a_read_only_database_is_storage_unavailable(tmp_path):
    """SQLite's own read-only mode on the writing connection stands in for a file system
    gone read-only (tmpfs refuses ``remount,ro`` while the database is open for writing;
    SQLite answers both with SQLITE_READONLY)."""
    store = Store(str(tmp_path / "db.sqlite3"))
    try:
        create(store, "t0")
        store.core._conn.execute("PRAGMA query_only = ON")
        with pytest.raises(StorageUnavailable) as exc:
            create(store, "t1")
        assert exc.value.reason == "database is read-only"
        assert store.write_fault == "database is read-only"
        store.core._conn.execute("PRAGMA query_only = OFF")
        store.probe_write()
        create(store, "t1")
        assert store.write_fault is None
    finally:
        store.close()


def test_a_lock_held_past_the_busy_timeout_is_storage_unavailable(tmp_path, monkeypatch):
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 50)
    store = Store(str(tmp_path / "db.sqlite3"))
    other = sqlite3.connect(store.db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StorageUnavailable) as exc:
            create(store, "t0")
        assert exc.value.reason == "database is locked"
        other.execute("ROLLBACK")
        create(store, "t0")
        assert store.write_fault is None
    finally:
        other.close()
        store.close()


def test_other_errors_pass_through_unchanged(tmp_path):
    store = Store(str(tmp_path / "db.sqlite3"))
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table"), store.core.tx() as c:
            c.execute("SELECT * FROM missing_table")
        assert store.write_fault is None and not store.core._conn.in_transaction
    finally:
        store.close()


# -- durability setting ----------------------------------------------------------------------


@pytest.mark.parametrize("mode, value", [("FULL", 2), ("NORMAL", 1)])
def test_synchronous_is_applied(tmp_path, mode, value):
    store = Store(str(tmp_path / "db.sqlite3"), synchronous=mode)
    try:
        assert store.core._conn.execute("PRAGMA synchronous").fetchone()[0] == value
    finally:
        store.close()


def test_synchronous_config_key():
    assert Settings().sqlite_synchronous == db.DEFAULT_SYNCHRONOUS
    settings = settings_from_mapping({"v2": {"sqlite": {"synchronous": "normal"}}})
    assert settings.sqlite_synchronous == "NORMAL"
    with pytest.raises(ConfigError, match=r"v2\.sqlite\.synchronous: one of FULL, NORMAL"):
        settings_from_mapping({"v2": {"sqlite": {"synchronous": "OFF"}}})
    with pytest.raises(ValueError, match="synchronous"):
        db.connect(":memory:", synchronous="OFF")


# -- the scheduler loop: degraded while the storage is out -------------------------------------


class FakeStorage:
    def __init__(self) -> None:
        self.write_fault: str | None = None
        self.probes = 0
        self.full = False

    def probe_write(self) -> None:
        self.probes += 1
        if self.full:
            self.write_fault = "disk full"
            raise StorageUnavailable("disk full", "database or disk is full")
        self.write_fault = None


class FakeScheduler:
    def __init__(self, storage: FakeStorage) -> None:
        self.storage = storage
        self.ticks = 0
        self.fail_with: Exception | None = None

    def startup(self, now: float) -> TickReport:
        return TickReport()

    def tick(self, now: float) -> TickReport:
        self.ticks += 1
        if self.fail_with is not None:
            raise self.fail_with
        if self.storage.full:  # a tick that writes fails like the store's writes
            self.storage.write_fault = "disk full"
            raise StorageUnavailable("disk full", "database or disk is full")
        return TickReport(duration_s=0.001)


def test_loop_is_degraded_while_writes_fail_and_recovers(caplog):
    storage = FakeStorage()
    scheduler = FakeScheduler(storage)
    loop = SchedulerLoop(scheduler, 1.0, clock=lambda: T0, storage=storage)  # type: ignore[arg-type]
    loop.run_once()
    assert loop.degraded is None and storage.probes == 0

    storage.full = True
    for _ in range(5):
        loop.run_once()
    assert loop.degraded == "storage unavailable: disk full"
    assert loop.errors == 5 and loop.last_error.startswith("StorageUnavailable: disk full")
    assert storage.probes == 4, "once a write failed, each turn probes first"
    assert scheduler.ticks == 2, "no tick while the probe fails"
    lines = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(lines) == 1 and not lines[0].exc_info, "one line, no traceback per tick"

    storage.full = False
    loop.run_once()
    assert loop.degraded is None and loop.last_error is None
    assert "writable again" in caplog.text


def test_an_api_write_fault_degrades_the_loop_until_a_probe_succeeds():
    storage = FakeStorage()
    loop = SchedulerLoop(FakeScheduler(storage), 1.0, clock=lambda: T0,  # type: ignore[arg-type]
                         storage=storage)
    storage.write_fault = "disk full"  # a submit failed; the scheduler has nothing to write
    assert loop.degraded == "storage unavailable: disk full"
    loop.run_once()
    assert storage.probes == 1 and loop.degraded is None


def test_other_tick_errors_keep_their_traceback(caplog):
    storage = FakeStorage()
    scheduler = FakeScheduler(storage)
    scheduler.fail_with = RuntimeError("bug")
    loop = SchedulerLoop(scheduler, 1.0, clock=lambda: T0, storage=storage)  # type: ignore[arg-type]
    loop.run_once()
    assert loop.degraded is None and loop.last_error == "RuntimeError: bug"
    assert any(r.exc_info for r in caplog.records)


# -- the service on a full disk --------------------------------------------------------------


def _spec(shared: Path) -> str:
    return (f"workload: sft\ncode_path: {shared}/code\nmodel_id: org/model\n"
            f"train_file: {shared}/train.parquet\nval_file: null\nnnodes: 1\n"
            "n_gpus_per_node: 4\n")


async def _poll(fetch, predicate, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        value = await fetch()
        if predicate(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)  # polling a real scheduler thread (tick_s below)


async def test_service_on_a_full_disk_answers_503_degrades_and_recovers(tmpfs, aiohttp_client,
                                                                         caplog):
    caplog.set_level(logging.WARNING)
    shared = tmpfs.path / "shared"
    settings = settings_from_mapping({
        "ray": {"shared_root": str(shared)}, "v2": {"scheduler": {"tick_s": 0.2}}})
    cluster = FakeCluster()
    cluster.add_node("w1", gpus=2)  # nothing fits: tasks wait, the queue grows
    client = await aiohttp_client(build_service(settings, TOKEN, cluster))
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"}

    async def submit() -> tuple[int, dict]:
        resp = await client.post("/api/v2/tasks", data=_spec(shared), headers=headers)
        return resp.status, await resp.json()

    async def health() -> dict:
        resp = await client.get("/healthz")
        assert resp.status == 200
        return await resp.json()

    for _ in range(10):
        assert (await submit())[0] == 201
    tmpfs.fill()
    status, body = (201, {})
    for _ in range(200):  # until the WAL has no room left
        status, body = await submit()
        if status != 201:
            break
    assert status == 503, body
    assert body["error"]["code"] == "storage_unavailable"
    assert "disk full" in body["error"]["message"]
    got = await _poll(health, lambda h: h["status"] == "degraded", 5)
    assert got["status"] == "degraded" and got["reason"] == "storage unavailable: disk full"
    await asyncio.sleep(0.5)  # several ticks fail meanwhile
    got = await health()
    assert got["status"] == "degraded" and got["scheduler"]["alive"]

    tmpfs.free()
    freed_at = time.monotonic()
    got = await _poll(health, lambda h: h["status"] == "ok", 10)
    assert got["status"] == "ok", got
    assert got["scheduler"]["last_error"] is None, "no stale error once ticks succeed"
    assert (await submit())[0] == 201
    assert time.monotonic() - freed_at < 5.0
    assert not [r for r in caplog.records if r.exc_info], "a full disk logs no traceback"
