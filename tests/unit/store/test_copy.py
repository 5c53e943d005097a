"""``argus-api db copy`` (``service.store.copy``): a whole installation, filled through the
store's own API with every kind of row, moved from SQLite to PostgreSQL (and back), read
back through the store there, and taking new rows whose ids never collide; a target that
holds rows, a bad URL, an old source refused with nothing written; a tampered row found by
the check; a copy whose check fails rolled back; the CLI's lines."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from pathlib import Path

import pytest

from service.config import Settings
from service.domain.lease import Instance
from service.domain.newtask import NewTask
from service.domain.nodes import NodeSource
from service.domain.progress import Point, Progress
from service.domain.reasons import as_text
from service.domain.states import FailureKind, RayStatus, TaskState
from service.domain.users import hash_matches, parse_token_id
from service.domain.writes import AttemptEnd, ProgressUpdate, RetryPlan, Sample
from service.main import main
from service.policy.idempotency import IdemKey
from service.policy.pipelines import parse_pipeline
from service.store import copy as copy_module
from service.store import copy_sides
from service.store.copy import NOT_COPIED, CopyError, check_copy, copy_store, schema
from service.store.idempotency import KeyReplayed
from service.store.writer import Store
from service.usecases.pipeline_submit import submit_pipeline
from service.webhooks.events import EventType
from service.webhooks.policy import Decision

T0 = 1_766_600_000.0
URL = "https://93.184.215.14/hook"


def tid(i: int) -> str:
    return f"mvp2-ppo-20251223-143201-{i:04x}"


def new(i: int, user: str = "alice", now: float = T0) -> NewTask:
    return NewTask(id_prefix="", workload="ppo", text=f"raw: {i}\n", spec={"i": i, "lr": 1e-6},
                   nnodes=1, n_gpus_per_node=2, user=user, created_at=now + i, priority=i % 3)


def _run(store: Store, task_id: str, now: float) -> None:
    store.attempts.claim_for_submit(task_id, TaskState.QUEUED, now)
    store.attempts.mark_submitted(task_id, 1, now + 1)


def fill(path: Path, root: Path) -> dict[str, object]:
    """A SQLite installation with a row of every kind, written through the store's API;
    what the checks need to find it again."""
    store = Store(str(path))
    try:
        store.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=T0)
        store.users.create_user("alice", "user", T0)  # type: ignore[arg-type]
        token = store.users.create_token("alice", "laptop", None, T0, max_live=5)
        hook = store.webhooks.create_webhook(owner="alice", url=URL, events=[
            t.value for t in EventType if t != "task.canceled"], fmt="standard", now=T0,
            max_per_user=5).hook_id
        gone = store.webhooks.create_webhook(owner="alice", url=URL, events=["task.canceled"],
                                             fmt="slack", now=T0, max_per_user=5).hook_id
        for i in range(1, 5):  # QUEUED, SUCCEEDED, FAILED, retried (QUEUED again)
            store.tasks.create_task(new(i), task_id=tid(i),
                                    key=IdemKey("alice", f"k{i}", f"fp{i}") if i == 1 else None)
        for i in (2, 3, 4):
            _run(store, tid(i), T0 + 10)
        end = AttemptEnd(RayStatus.SUCCEEDED.value, None, None, T0 + 11, T0 + 20)
        store.attempts.finish_attempt(tid(2), TaskState.SUBMITTED, 1, end, TaskState.SUCCEEDED,
                                      None, T0 + 20)
        bad = AttemptEnd(RayStatus.FAILED.value, FailureKind.RUNTIME_ERROR.value, "boom",
                         T0 + 11, T0 + 21)
        store.attempts.finish_attempt(tid(3), TaskState.SUBMITTED, 1, bad, TaskState.FAILED,
                                      "boom", T0 + 21)
        lost = AttemptEnd(RayStatus.FAILED.value, FailureKind.CLUSTER_LOST.value, "node",
                          T0 + 11, T0 + 22)
        store.attempts.schedule_retry(tid(4), TaskState.SUBMITTED, 1, lost, RetryPlan(
            next_run_at=T0 + 80, runnable_since=T0 + 22), as_text("again"), T0 + 22)
        store.tasks.create_task(new(5), task_id=tid(5))
        store.progress.record_progress(ProgressUpdate(
            task_id=tid(2), attempt_no=1, expected_offset=0, log_offset=120,
            progress=Progress(step=2, total=10, first_step=1, first_at=T0 + 12,
                              last_at=T0 + 14),
            points=(Point(1, "loss", 1, 2.5), Point(1, "loss", 2, 1.25)),
            series={"loss": (1, 2)}), T0 + 15)
        store.console.record_sample(Sample(T0 + 60, 2, 1, 2.0, 8.0), keep_s=3600)
        store.console.record_sample(Sample(T0 + 120, 1, 0, None, None), keep_s=3600)
        store.nodes.cordon("gpu-07", NodeSource.OPERATOR, "admin", T0 + 40, "fan")
        [claim, *_] = store.webhooks.claim_webhook_deliveries(T0 + 50, 1, 60.0)
        store.webhooks.record_webhook_try(claim, Decision("DELIVERED", T0 + 51, None), 200,
                                          T0 + 51)
        store.tasks.cancel(tid(5), T0 + 55, by="alice")  # the last delivery, to `gone`
        store.webhooks.delete_webhook(gone)  # its delivery too: an id past the largest left
        text = (f"name: two\nstages:\n  a: {{jobspec: {spec(root)}}}\n"
                f"  b: {{after: {{ok: [a]}}, jobspec: {spec(root)}}}\n")
        pipeline, stages = submit_pipeline(store, parse_pipeline(text), text,
                                           Settings(shared_root=str(root)), "alice", T0 + 60)
        return {"token": token.secret, "hook": hook, "pipeline": pipeline, "stages": stages,
                "tasks": [tid(i) for i in range(1, 6)] + list(stages.values())}
    finally:
        store.close()


def spec(root: Path) -> str:
    return (f"{{workload: sft, code_path: {root}/verl, model_id: org/model, "
            f"train_file: {root}/train.parquet, val_file: null, nnodes: 1, "
            f"n_gpus_per_node: 4}}")


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    path = tmp_path / "src" / "argus.sqlite3"
    return path, fill(path, tmp_path)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty target: a new SQLite file, or a new PostgreSQL database with no tables."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'dst' / 'argus.sqlite3'}"
    return str(request.getfixturevalue("pg_server").database())


def sqlite_rows(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def same_reads(a: Store, b: Store, found: dict[str, object]) -> None:
    """What the store reads back on ``b`` is what it read on ``a``."""
    for task_id in found["tasks"]:  # type: ignore[attr-defined]
        assert b.tasks.get_task(task_id) == a.tasks.get_task(task_id), task_id
        assert b.tasks.events(task_id) == a.tasks.events(task_id), task_id
        assert b.attempts.list_attempts(task_id) == a.attempts.list_attempts(task_id)
    assert b.pipelines.get_pipeline(found["pipeline"]) == a.pipelines.get_pipeline(
        found["pipeline"])
    assert b.tasks.counts_by_state() == a.tasks.counts_by_state()  # the triggers' table
    assert b.change_seq() == a.change_seq()
    assert b.webhooks.webhook_deliveries(found["hook"], 100) == (
        a.webhooks.webhook_deliveries(found["hook"], 100))
    assert b.progress.task_progress(tid(2)) == a.progress.task_progress(tid(2))
    assert b.progress.metric_points(tid(2), ["loss"]) == a.progress.metric_points(
        tid(2), ["loss"])
    assert b.nodes.states() == a.nodes.states()
    assert b.nodes.events("gpu-07") == a.nodes.events("gpu-07")
    assert b.users.list_users() == a.users.list_users()


def test_an_installation_moves_and_works_there(source, target: str) -> None:
    path, found = source
    before = sqlite_rows(path, "SELECT name, seq FROM sqlite_sequence")
    report = copy_store(str(path), target)
    assert report.ok and report.committed and not report.mismatched
    assert {c.table for c in report.checks} == set(schema().tables) - set(NOT_COPIED)
    assert {c.table: c.rows for c in report.checks}["tasks"] == 7
    assert sum(c.rows for c in report.checks) > 50
    assert report.lines()[-1] == (f"copied {sum(c.rows for c in report.checks)} rows in "
                                  f"{len(report.checks)} tables, checksums match")
    assert sqlite_rows(path, "SELECT name, seq FROM sqlite_sequence") == before  # read only
    assert check_copy(str(path), target).ok  # once committed, checked again from outside

    a, b = Store(str(path)), Store(target)
    try:
        same_reads(a, b, found)
        secret = str(found["token"])
        auth = b.users.token_auth(parse_token_id(secret) or "")
        assert auth is not None and auth.user == "alice" and hash_matches(secret, auth.sha256)
        with pytest.raises(KeyReplayed):  # the idempotency key came along
            b.tasks.create_task(new(1), task_id=tid(0x100), key=IdemKey("alice", "k1", "fp1"))
        # new rows on the target: ids past everything the source ever gave
        b.tasks.create_task(new(9), task_id=tid(9))
        seqs = {t.task_id: t.seq for t in b.tasks.list_tasks(limit=100)[0]}
        assert seqs[tid(9)] > max(s for t, s in seqs.items() if t != tid(9))
        assert b.tasks.events(tid(9))[0].id > max(
            e.id for t in found["tasks"] for e in b.tasks.events(t))  # type: ignore[attr-defined]
        _run(b, tid(9), T0 + 90)  # and a delivery to the hook that was left
        b.attempts.finish_attempt(tid(9), TaskState.SUBMITTED, 1, AttemptEnd(
            RayStatus.SUCCEEDED.value, None, None, T0 + 91, T0 + 92), TaskState.SUCCEEDED,
            None, T0 + 92)
        [newest, *_] = b.webhooks.webhook_deliveries(found["hook"], 100)
        deleted_past = dict(before)["webhook_deliveries"]
        assert newest.delivery_id > deleted_past > max(  # the deleted hook's ids stay unused
            d.delivery_id for d in a.webhooks.webhook_deliveries(found["hook"], 100))
        b.nodes.cordon("gpu-08", NodeSource.OPERATOR, "admin", T0 + 95, "psu")
    finally:
        a.close()
        b.close()


@pytest.mark.postgres
def test_back_from_postgresql_to_sqlite_the_same_rows(source, pg_server, tmp_path) -> None:
    path, _ = source
    pg = pg_server.database()
    assert copy_store(str(path), pg).ok
    back = tmp_path / "back.sqlite3"
    report = copy_store(pg, str(back))
    assert report.ok and report.committed
    assert check_copy(str(path), str(back)).ok
    assert [c.checksum for c in report.checks] == [
        c.checksum for c in check_copy(str(path), pg).checks]
    # a SQLite target's AUTOINCREMENT sequences are past the source's ids too
    assert dict(sqlite_rows(back, "SELECT name, seq FROM sqlite_sequence")) == dict(
        sqlite_rows(path, "SELECT name, seq FROM sqlite_sequence"))


def test_a_target_that_holds_rows_is_refused_and_untouched(source, store_url: str) -> None:
    path, _ = source
    live = Store(store_url)
    live.users.create_user("bob", "user", T0)  # type: ignore[arg-type]
    live.tasks.create_task(new(1, "bob"), task_id=tid(1))
    live.close()
    before = check_copy(store_url, store_url).checks
    with pytest.raises(CopyError, match=r"already holds rows \(.*tasks \(1\).*never merges"):
        copy_store(str(path), store_url)
    assert check_copy(store_url, store_url).checks == before
    with pytest.raises(CopyError, match="same database"):
        copy_store(str(path), f"sqlite://{path}")


def test_a_lease_alone_makes_a_target_taken(source, tmp_path: Path) -> None:
    """A service that ran on the target once holds its lease row: a live installation."""
    path, _ = source
    taken = tmp_path / "taken.sqlite3"
    store = Store(str(taken))
    store.lease.take("service", Instance("h1", "host", 1, "http://x"), None, T0, 10.0)
    store.close()
    with pytest.raises(CopyError, match=r"service_lease \(1\)"):
        copy_store(str(path), str(taken))


def test_bad_urls_and_sources_are_one_clear_line(source, tmp_path: Path) -> None:
    path, _ = source
    dst = tmp_path / "new" / "argus.sqlite3"
    cases = [
        (str(path), "mysql://db/argus", "--to: .*unknown engine 'mysql'"),
        ("mysql://u:pw@db/argus", str(dst), "--from: .*unknown engine 'mysql'"),
        (str(path), "sqlite://relative.db", "sqlite:///absolute/path"),
        (str(tmp_path / "missing.sqlite3"), str(dst), "no database at .*missing"),
        (str(path), "postgresql://argus:hunter2@127.0.0.1:1/argus",
         r"cannot connect to PostgreSQL at postgresql://argus:\*\*\*@127.0.0.1:1/argus"),
    ]
    for src, to, message in cases:
        with pytest.raises(CopyError, match=message) as err:
            copy_store(src, to)
        assert "\n" not in str(err.value) and "hunter2" not in str(err.value)
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(CopyError, match="not an Argus database"):
        copy_store(str(other), str(dst))
    latest = schema().version
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {latest - 1}")
    with pytest.raises(CopyError, match=f"schema version {latest - 1}, this code {latest}: "
                                        "start this version's service on it once"):
        copy_store(str(path), str(dst))
    assert not dst.exists() and not dst.parent.exists()  # nothing written anywhere


def test_a_tampered_row_is_found_by_the_check(source, target: str) -> None:
    path, _ = source
    assert copy_store(str(path), target).ok
    b = Store(target)
    try:  # one column of one row, through the target's own connection
        b.core._conn.execute("UPDATE tasks SET error_summary = 'edited' WHERE task_id = :t",
                             {"t": tid(3)})
        b.core._conn.execute("DELETE FROM samples WHERE ts = :ts", {"ts": T0 + 60})
    finally:
        b.close()
    report = check_copy(str(path), target)
    assert not report.ok and sorted(report.mismatched) == ["samples", "tasks"]
    lines = {line.split()[0]: line for line in report.lines()[1:-1]}
    assert lines["tasks"].split()[1] == "7" and "MISMATCH: the target has 7 rows" in (
        lines["tasks"])
    assert "MISMATCH: the target has 1 rows" in lines["samples"]
    assert lines["events"].endswith("  ok")
    assert report.lines()[-1] == ("checksums differ in 2 tables: "
                                  f"{', '.join(report.mismatched)}")


def test_a_copy_whose_check_fails_is_rolled_back(source, target: str, monkeypatch) -> None:
    path, _ = source
    side = copy_sides.PostgresSide if target.startswith("postgresql") else copy_sides.SqliteSide
    insert = side.insert

    def lossy(self, table, columns, rows):  # one events row lost on the way
        rows = list(rows)
        return insert(self, table, columns, rows[:-1] if table == "events" else rows)

    monkeypatch.setattr(side, "insert", lossy)
    report = copy_store(str(path), target)
    assert not report.ok and not report.committed and report.mismatched == ["events"]
    assert "nothing was written (the copy was rolled back)" in report.lines()[-1]
    monkeypatch.setattr(side, "insert", insert)
    assert copy_store(str(path), target).ok  # the target was left empty: it copies now


class Writer(threading.Thread):
    """Submits tasks into the source until stopped (a service still running)."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.store = Store(str(path))
        self.stop = threading.Event()
        self.going = threading.Event()

    def run(self) -> None:
        i = 0x200
        while not self.stop.is_set() and i < 0xFFFF:
            self.store.tasks.create_task(new(i), task_id=tid(i))
            i += 1
            if i > 0x220:
                self.going.set()


def test_a_source_being_written_is_copied_as_of_one_commit(source, tmp_path: Path) -> None:
    path, _ = source
    writer = Writer(path)
    writer.start()
    try:
        assert writer.going.wait(timeout=60), "the writer wrote nothing"
        dst = tmp_path / "snapshot.sqlite3"
        report = copy_store(str(path), str(dst))
    finally:
        writer.stop.set()
        writer.join(timeout=60)
        writer.store.close()
    assert report.ok
    copied = Store(str(dst))
    try:  # every task with its CREATED event and its count: each one commit
        tasks, _ = copied.tasks.list_tasks(limit=10_000)
        assert len(tasks) > 7 + 0x20
        assert sum(copied.tasks.counts_by_state().values()) == len(tasks)
        assert all(copied.tasks.events(t.task_id) for t in tasks)
    finally:
        copied.close()


def test_the_cli_prints_a_line_per_table(source, target: str, capsys) -> None:
    path, _ = source
    with pytest.raises(SystemExit) as done:
        main(["db", "copy", "--from", f"sqlite://{path}", "--to", target])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    tables = len(schema().tables) - len(NOT_COPIED)
    assert lines[0].startswith(f"copy {path} -> ")
    rows = [line.split() for line in lines[1:1 + tables]]
    assert {r[0] for r in rows} == set(schema().tables) - set(NOT_COPIED)
    assert all(r[-1] == "ok" and len(r[2]) == 16 for r in rows)
    assert lines[-2].split()[0] == "service_lease" and "not copied" in lines[-2]
    assert lines[-1] == (f"copied {sum(int(r[1]) for r in rows)} rows in {tables} tables, "
                         "checksums match")
    with pytest.raises(SystemExit) as again:
        main(["db", "copy", "--from", str(path), "--to", target])
    assert again.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("argus-api db copy: ") and "already holds rows" in err
    assert err.count("\n") == 1


def test_the_tables_triggers_keep_arrive_as_they_were_whatever_the_order(
        source, target: str, monkeypatch) -> None:
    """Copied before the tasks, task_counts and task_changes would be counted again by the
    target's triggers as the tasks arrive, were the triggers on during the copy."""
    path, _ = source
    code = schema()
    first = ("task_counts", "task_changes")
    reordered = {t: code.tables[t] for t in first} | {
        t: c for t, c in code.tables.items() if t not in first}
    monkeypatch.setattr(copy_module, "schema",
                        lambda: dataclasses.replace(code, tables=reordered))
    report = copy_store(str(path), target)
    assert report.ok, report.mismatched
    b = Store(target)
    try:
        assert sum(b.tasks.counts_by_state().values()) == 7
        b.tasks.create_task(new(9), task_id=tid(9))  # and they are back on afterwards
        assert sum(b.tasks.counts_by_state().values()) == 8
    finally:
        b.close()


@pytest.mark.postgres
def test_a_database_owner_who_is_no_superuser_can_copy_into_it(source, pg_server) -> None:
    """The triggers are turned off as the tables' owner may (ALTER TABLE ... DISABLE
    TRIGGER USER), not by a superuser's session_replication_role."""
    path, _ = source
    role = f"argus_copy_{pg_server.port}"
    pg_server.sql(f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                  f"'{role}') THEN CREATE ROLE {role} LOGIN PASSWORD 'pw'; END IF; END $$")
    name = pg_server.database().rsplit("/", 1)[1]
    pg_server.sql(f"ALTER DATABASE {name} OWNER TO {role}")
    url = f"postgresql://{role}:pw@127.0.0.1:{pg_server.port}/{name}"
    report = copy_store(str(path), url)
    assert report.ok and report.committed
    assert "pw@" not in "\n".join(report.lines())
