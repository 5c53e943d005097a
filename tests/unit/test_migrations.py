"""Schema: migrations reproduce schema.sql exactly; versions; pragmas; CHECKs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from service.states import FailureKind, RayStatus, TaskState
from service.store import (
    Store,
    StoreError,
    connect,
    initialize,
    migration_files,
    schema_version,
)


def _objects(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """Every table/index with its columns, normalised (comments and spacing aside)."""
    out = []
    for kind, name, tbl in conn.execute(
        "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
        "ORDER BY name"
    ):
        if kind == "table":
            cols = conn.execute(f"PRAGMA table_xinfo({name})").fetchall()
            detail = repr(cols) + repr(conn.execute(f"PRAGMA foreign_key_list({name})").fetchall())
        else:
            detail = repr(conn.execute(f"PRAGMA index_xinfo({name})").fetchall())
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
        where = sql.split(" WHERE ", 1)[1].split() if sql and " WHERE " in sql else []
        out.append((kind, f"{name}:{tbl}", detail + repr(where)))
    return out


def test_migrated_equals_fresh(tmp_path: Path) -> None:
    fresh = connect(str(tmp_path / "fresh.db"))
    migrated = connect(str(tmp_path / "migrated.db"))
    assert initialize(fresh, from_schema=True) == len(migration_files())
    assert initialize(migrated, from_schema=False) == len(migration_files())
    assert _objects(fresh) == _objects(migrated)
    assert len(_objects(fresh)) >= 7  # 3 tables + their indexes
    assert schema_version(fresh) == schema_version(migrated) == len(migration_files())


def test_reopen_is_idempotent_and_newer_db_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite3")
    Store(path).close()
    Store(path).close()  # nothing to apply the second time
    conn = connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match="newer than this code"):
        Store(path)


def test_foreign_db_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "other.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE x (a)")
    conn.close()
    with pytest.raises(StoreError, match="not an Argus database"):
        Store(path)


def test_pragmas(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "sub" / "dir" / "db.sqlite3"))  # parent dirs created
    conn = store._conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    store.close()


def test_check_constraints_mirror_the_enums(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "db.sqlite3"))
    conn = store._conn
    insert = ("INSERT INTO tasks (task_id, workload, state, jobspec_yaml, spec_json, nnodes, "
              "n_gpus_per_node, created_at, updated_at, next_run_at, runnable_since) "
              "VALUES (?, 'ppo', ?, '', '{}', 1, 1, 0, 0, 0, 0)")
    for i, state in enumerate(TaskState):
        conn.execute(insert, (f"t{i}", state.value))
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute(insert, ("bad", "LIMBO"))
    att = ("INSERT INTO attempts (task_id, attempt_no, ray_submission_id, ray_status, "
           "failure_kind, created_at) VALUES ('t0', ?, ?, ?, ?, 0)")
    for i, (rs, fk) in enumerate(zip(RayStatus, FailureKind, strict=False), start=1):
        conn.execute(att, (i, f"s{i}", rs.value, fk.value))
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute(att, (50, "s50", "DONE", None))
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        conn.execute(att.replace("'t0'", "'nope'"), (51, "s51", None, None))
    store.close()
