"""Schema: migrations reproduce schema.sql exactly; versions; pragmas; CHECKs."""

from __future__ import annotations

import sqlite3
import tomllib
from pathlib import Path

import pytest

from service.domain.states import FailureKind, RayStatus, TaskState
from service.store.db import (
    SchemaError,
    connect,
    connect_reader,
    initialize,
    migration_files,
    schema_version,
)
from service.store.writer import Store


def _tuples(conn: sqlite3.Connection, sql: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in conn.execute(sql)]


def _objects(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """Every table/index with its columns, normalised (comments and spacing aside)."""
    out = []
    for kind, name, tbl in conn.execute(
        "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
        "ORDER BY name"
    ):
        if kind == "table":
            cols = _tuples(conn, f"PRAGMA table_xinfo({name})")
            detail = repr(cols) + repr(_tuples(conn, f"PRAGMA foreign_key_list({name})"))
        else:
            detail = repr(_tuples(conn, f"PRAGMA index_xinfo({name})"))
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
    with pytest.raises(SchemaError, match="newer than this code"):
        Store(path)


def test_foreign_db_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "other.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE x (a)")
    conn.close()
    with pytest.raises(SchemaError, match="not an Argus database"):
        Store(path)


def test_pragmas(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "sub" / "dir" / "db.sqlite3"))  # parent dirs created
    conn = store.core._conn
    assert conn.execute("PRAGMA journal_mode").fetchone()["journal_mode"] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()["synchronous"] == 1  # NORMAL
    assert conn.execute("PRAGMA foreign_keys").fetchone()["foreign_keys"] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()["timeout"] >= 1000
    reader = connect_reader(store.db_path)
    assert reader.execute("PRAGMA query_only").fetchone()["query_only"] == 1
    assert reader.execute("PRAGMA busy_timeout").fetchone()["timeout"] >= 1000
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.execute("DELETE FROM events")
    reader.close()
    store.close()


def test_rows_are_read_by_name(tmp_path: Path) -> None:
    conn = connect(str(tmp_path / "db.sqlite3"))
    assert conn.row_factory is sqlite3.Row
    assert conn.execute("SELECT 7 AS seven").fetchone()["seven"] == 7
    conn.close()


def test_check_constraints_mirror_the_enums(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "db.sqlite3"))
    conn = store.core._conn
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


def _shipped(path: Path, root: Path, package_data: dict[str, list[str]]) -> bool:
    """Whether a setuptools package-data pattern (relative to its package) names ``path``."""
    for package, patterns in package_data.items():
        base = root / package.replace(".", "/")
        if path.is_relative_to(base):
            rel = path.relative_to(base)
            if any(rel.match(p) and len(rel.parts) == len(Path(p).parts) for p in patterns):
                return True
    return False


def test_every_sql_file_ships_with_the_package() -> None:
    """The schema, migrations and queries are read at run time: each must be matched by a
    package-data pattern in pyproject.toml, or an installed service cannot start."""
    root = Path(__file__).resolve().parents[3]
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    package_data = pyproject["tool"]["setuptools"]["package-data"]
    sql_files = sorted((root / "service").rglob("*.sql"))
    assert len(sql_files) >= 3
    for path in sql_files:
        assert _shipped(path, root, package_data), f"{path.relative_to(root)} is not shipped"


def test_preempted_is_a_failure_kind_the_attempts_table_takes(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "db.sqlite3"))
    conn = store.core._conn
    conn.execute("INSERT INTO tasks (task_id, workload, state, jobspec_yaml, spec_json, "
                 "nnodes, n_gpus_per_node, created_at, updated_at, next_run_at, "
                 "runnable_since) VALUES ('t', 'ppo', 'QUEUED', '', '{}', 1, 1, 0, 0, 0, 0)")
    conn.execute("INSERT INTO attempts (task_id, attempt_no, ray_submission_id, failure_kind, "
                 "created_at, preempted_for) VALUES ('t', 1, 's1', 'PREEMPTED', 0, 'other')")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE tasks SET priority = 1001 WHERE task_id = 't'")
    store.close()


def _database_at(path: str, version: int) -> sqlite3.Connection:
    """A database built by the first ``version`` migrations, as an older Argus left it."""
    conn = connect(path)
    for number, migration in migration_files()[:version]:
        conn.executescript(f"BEGIN;\n{migration.read_text()}\nPRAGMA user_version = {number};"
                           "\nCOMMIT;")
    return conn


def test_the_scheduling_migration_keeps_every_task_and_attempt(tmp_path: Path) -> None:
    """A database of the version before the scheduling policy (4) with tasks and attempts:
    migrated, nothing is lost, old tasks get priority 0, indexes and CHECKs are the new."""
    path = str(tmp_path / "db.sqlite3")
    conn = _database_at(path, 4)
    conn.execute("INSERT INTO tasks (task_id, workload, state, jobspec_yaml, spec_json, nnodes, "
                 "n_gpus_per_node, user, created_at, updated_at, next_run_at, runnable_since, "
                 "latest_attempt_no) VALUES ('old', 'ppo', 'PENDING_RESOURCES', 'y', '{}', 1, "
                 "4, 'alice', 1, 2, 3, 4, 2)")
    for n, kind in ((1, "INSUFFICIENT_RESOURCES"), (2, None)):
        conn.execute("INSERT INTO attempts (task_id, attempt_no, ray_submission_id, "
                     "ray_status, failure_kind, message, created_at, start_time, end_time) "
                     "VALUES ('old', ?, ?, 'FAILED', ?, 'm', 10, 11, 12)",
                     (n, f"old--a0{n}", kind))
    conn.close()
    store = Store(path)
    assert schema_version(store.core._conn) == len(migration_files())
    task = store.tasks.get_task("old")
    assert (task.priority, task.user, task.queue_position) == (0, "alice", 1)
    attempts = store.attempts.list_attempts("old")
    assert [(a.attempt_no, a.failure_kind, a.message, a.start_time, a.preempted_for)
            for a in attempts] == [(1, "INSUFFICIENT_RESOURCES", "m", 11, None),
                                   (2, None, "m", 11, None)]
    fresh = connect(str(tmp_path / "fresh.db"))
    initialize(fresh)
    assert _objects(store.core._conn) == _objects(fresh)
    store.close()


def test_the_time_limit_migration_keeps_attempts_and_takes_time_limit(tmp_path: Path) -> None:
    """A version-5 database with a preempted attempt: 0006 rebuilds attempts (TIME_LIMIT
    in its CHECK) keeping every column, preempted_for included; old tasks have no limit."""
    path = str(tmp_path / "db.sqlite3")
    conn = _database_at(path, 5)
    conn.execute("INSERT INTO tasks (task_id, workload, state, jobspec_yaml, spec_json, nnodes, "
                 "n_gpus_per_node, user, created_at, updated_at, next_run_at, runnable_since, "
                 "latest_attempt_no, priority) VALUES ('old', 'ppo', 'PENDING_RESOURCES', 'y', "
                 "'{}', 1, 4, 'alice', 1, 2, 3, 4, 1, -5)")
    conn.execute("INSERT INTO attempts (task_id, attempt_no, ray_submission_id, ray_status, "
                 "failure_kind, message, created_at, submitted_at, start_time, end_time, "
                 "exit_code, stop_requested, preempted_for) VALUES ('old', 1, 's1', 'STOPPED', "
                 "'PREEMPTED', 'm', 10, 11, 12, 13, 0, 1, 'boss')")
    before = _tuples(conn, "SELECT * FROM attempts")
    conn.close()
    store = Store(path)
    conn = store.core._conn
    assert schema_version(conn) == len(migration_files())
    assert _tuples(conn, "SELECT * FROM attempts") == before
    task = store.tasks.get_task("old")
    assert (task.priority, task.max_runtime_s) == (-5, None)
    conn.execute("UPDATE attempts SET failure_kind = 'TIME_LIMIT' WHERE task_id = 'old'")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE tasks SET max_runtime_s = 0 WHERE task_id = 'old'")
    store.close()


def test_the_usage_rollup_migration_counts_the_attempts_that_ended_before_it(
        tmp_path: Path) -> None:
    """A version-8 database with ended, failed, zero-length, unstarted and running
    attempts: 0009 gives each task its running totals, the same the usage window sums."""
    path = str(tmp_path / "db.sqlite3")
    conn = _database_at(path, 8)
    tasks = (("a", 4, "SUCCEEDED"), ("b", 2, "RUNNING"), ("c", 1, "FAILED"))
    for task_id, gpus, state in tasks:
        conn.execute("INSERT INTO tasks (task_id, workload, state, jobspec_yaml, spec_json, "
                     "nnodes, n_gpus_per_node, user, created_at, updated_at, next_run_at, "
                     "runnable_since, latest_attempt_no) "
                     "VALUES (?, 'ppo', ?, 'y', '{}', 1, ?, 'alice', 1, 2, 3, 4, 2)",
                     (task_id, state, gpus))
    for task_id, n, kind, start, end in (
            ("a", 1, "CLUSTER_LOST", 10, 40), ("a", 2, None, 50, 150),
            ("b", 1, None, 10, 10),  # held its gang no time: not counted
            ("b", 2, None, 20, None),  # running: counted up to now by the reader, not here
            ("c", 1, "USER_ERROR", None, None)):  # never started
        conn.execute("INSERT INTO attempts (task_id, attempt_no, ray_submission_id, "
                     "ray_status, failure_kind, created_at, start_time, end_time) "
                     "VALUES (?, ?, ?, 'FAILED', ?, 1, ?, ?)",
                     (task_id, n, f"{task_id}--a0{n}", kind, start, end))
    conn.close()
    store = Store(path)
    assert schema_version(store.core._conn) == len(migration_files())
    assert _tuples(store.core._conn, "SELECT * FROM task_usage ORDER BY task_id") == [
        ("a", "alice", 4 * 130.0, 4 * 30.0, 2, 10.0, 150.0)]  # span: 0014
    summary = store.usage.usage_summary(0.0, 200.0, 200.0, None, 5)
    [alice] = summary.users
    assert (alice.gpu_seconds, alice.failed_gpu_seconds, alice.tasks, alice.attempts,
            alice.running_attempts) == (4 * 130.0 + 2 * 180.0, 4 * 30.0, 2, 3, 1)
    # a window across a's span: its attempts clipped at the edge (0014's span says so)
    [alice] = store.usage.usage_summary(30.0, 200.0, 200.0, None, 5).users
    assert (alice.gpu_seconds, alice.failed_gpu_seconds, alice.tasks, alice.attempts) == (
        4 * 110.0 + 2 * 170.0, 4 * 10.0, 2, 3)
    store.close()
