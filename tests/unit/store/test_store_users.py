"""Store: users, tokens (only hashes kept), ownership at start-up, per-user reads and the
GPU accounting query."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.domain.newtask import NewTask
from service.domain.reasons import as_text
from service.domain.states import TaskState
from service.domain.users import Role
from service.domain.writes import AttemptEnd
from service.store.db import connect, initialize, migration_files
from service.store.sql import QUERIES
from service.store.writer import (
    RetryPlan,
    Store,
    TokenNotFound,
    TooManyTokens,
    UserDisabled,
    UserExists,
    UserNotFound,
)

S = TaskState
T0 = 1_000.0


@pytest.fixture
def store(store_url: str) -> Store:
    s = Store(store_url)
    yield s
    s.close()


def add(store: Store, i: int, user: str | None, *, g: int = 1, now: float = T0) -> str:
    task_id = f"mvp2-ppo-20251223-143201-{i:04x}"
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="", spec={}, nnodes=1,
                                    n_gpus_per_node=g, user=user, created_at=now, priority=0),
                            task_id=task_id)
    return task_id


def run_attempt(store: Store, task_id: str, start: float, end: float | None, *,
                kind: str | None = None, retry: bool = False) -> None:
    """Claim, submit and start attempt N; end it (retryably, or for good) unless None."""
    state = store.tasks.get_task(task_id).state
    claim = store.attempts.claim_for_submit(task_id, state, start)
    store.attempts.mark_submitted(task_id, claim.attempt_no, start)
    store.attempts.sync_attempt(task_id, claim.attempt_no, ray_status="RUNNING", message=None,
                                start_time=start, now=start, to_running_from=S.SUBMITTED)
    if end is None:
        return
    ended = AttemptEnd("FAILED" if kind else "SUCCEEDED", kind, None, start, end)
    if retry:
        store.attempts.schedule_retry(task_id, S.RUNNING, claim.attempt_no, ended,
                                      RetryPlan(next_run_at=end, runnable_since=end), as_text("r"),
                                      end)
    else:
        store.attempts.finish_attempt(task_id, S.RUNNING, claim.attempt_no, ended,
                                      S.FAILED if kind else S.SUCCEEDED, None, end)


# -- users ----------------------------------------------------------------------------------


def test_ensure_users_creates_both_and_adopts_ownerless_tasks(store: Store) -> None:
    old = [add(store, i, None) for i in range(3)]
    mine = add(store, 9, "carol")
    assert store.users.ensure_users(bootstrap_admin="root", default_user="legacy", now=T0) == 3
    assert [store.tasks.get_task(t).user for t in old] == ["legacy"] * 3
    assert store.tasks.get_task(mine).user == "carol"
    root, legacy = store.users.get_user("root"), store.users.get_user("legacy")
    assert (root.role, root.enabled, legacy.role) == (Role.ADMIN, True, Role.USER)
    # idempotent: a second start changes nothing
    assert store.users.ensure_users(bootstrap_admin="root", default_user="legacy", now=T0 + 1) == 0
    assert store.users.get_user("root").created_at == T0


def test_ensure_users_makes_the_bootstrap_admin_an_enabled_admin(store: Store) -> None:
    store.users.create_user("root", Role.USER, T0)
    store.users.set_user_enabled("root", False, T0)
    store.users.ensure_users(bootstrap_admin="root", default_user="root", now=T0)
    root = store.users.get_user("root")
    assert (root.role, root.enabled, root.disabled_at) == (Role.ADMIN, True, None)


def test_create_user_and_duplicates(store: Store) -> None:
    user = store.users.create_user("alice", Role.USER, T0)
    assert user == store.users.get_user("alice")
    with pytest.raises(UserExists, match="user alice already exists"):
        store.users.create_user("alice", Role.ADMIN, T0)
    assert store.users.get_user("alice").role is Role.USER  # unchanged
    for bad in ("Alice", "bo--b", "me", ""):
        with pytest.raises(ValueError):
            store.users.create_user(bad, Role.USER, T0)
    assert [u.name for u in store.users.list_users()] == ["alice"]


def test_the_schema_refuses_a_malformed_name_even_past_the_store(store: Store) -> None:
    refused = store.core.engine.integrity_errors
    with pytest.raises(refused, match=r"(?i)check"):
        store.core._conn.execute(QUERIES["insert_user"], {"name": "Bad Name", "role": "user",
                                                          "now": T0})
    with pytest.raises(refused, match=r"(?i)check"):
        store.core._conn.execute(QUERIES["insert_user"], {"name": "ok", "role": "root", "now": T0})


def test_disable_and_enable_are_guarded_and_count_the_users_tasks(store: Store) -> None:
    store.users.create_user("alice", Role.USER, T0)
    running = add(store, 1, "alice")
    run_attempt(store, running, T0, None)
    add(store, 2, "alice")
    add(store, 3, "alice")
    add(store, 4, "bob")
    change = store.users.set_user_enabled("alice", False, T0 + 5)
    assert (change.changed, change.active_tasks, change.runnable_tasks) == (True, 1, 2)
    assert (change.user.enabled, change.user.disabled_at) == (False, T0 + 5)
    assert store.users.disabled_users() == {"alice"}
    again = store.users.set_user_enabled("alice", False, T0 + 9)
    assert not again.changed and again.user.disabled_at == T0 + 5  # first time kept
    back = store.users.set_user_enabled("alice", True, T0 + 10)
    assert back.changed and back.user.enabled and back.user.disabled_at is None
    assert store.tasks.get_task(running).state is S.RUNNING  # tasks untouched
    with pytest.raises(UserNotFound):
        store.users.set_user_enabled("nobody", False, T0)


# -- tokens ---------------------------------------------------------------------------------


@pytest.mark.sqlite_only("reads the database file's bytes")
def test_only_the_hash_of_a_token_is_stored(store: Store, tmp_path: Path) -> None:
    store.users.create_user("alice", Role.USER, T0)
    created = store.users.create_token("alice", "laptop", None, T0, max_live=5)
    assert created.secret.startswith(f"argus_{created.row.token_id}_")
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("db.sqlite3*"))
    # all after argus_<id>_ (the secret may hold "_" itself: token_urlsafe)
    secret_part = created.secret.removeprefix(f"argus_{created.row.token_id}_").encode()
    assert len(secret_part) == 43
    assert created.row.token_id.encode() in raw  # the public id is the lookup key
    assert secret_part not in raw and created.secret.encode() not in raw


def test_token_auth_reads_the_token_with_its_user(store: Store) -> None:
    store.users.create_user("alice", Role.ADMIN, T0)
    created = store.users.create_token("alice", "ci", T0 + 100, T0, max_live=5)
    auth = store.users.token_auth(created.row.token_id)
    assert (auth.user, auth.role, auth.user_enabled, auth.expires_at) == (
        "alice", Role.ADMIN, True, T0 + 100)
    assert auth.sha256 != created.secret and len(auth.sha256) == 64
    store.users.touch_token(created.row.token_id, T0 + 50)
    store.users.touch_token(created.row.token_id, T0 + 40)  # never backwards
    assert store.users.token_auth(created.row.token_id).last_used_at == T0 + 50
    assert store.users.token_auth("000000000000") is None


def test_create_token_refusals_change_nothing(store: Store) -> None:
    with pytest.raises(UserNotFound):
        store.users.create_token("ghost", "x", None, T0, max_live=5)
    store.users.create_user("alice", Role.USER, T0)
    with pytest.raises(ValueError, match="label"):
        store.users.create_token("alice", "", None, T0, max_live=5)
    store.users.set_user_enabled("alice", False, T0)
    with pytest.raises(UserDisabled, match="user alice is disabled"):
        store.users.create_token("alice", "x", None, T0, max_live=5)
    store.users.set_user_enabled("alice", True, T0)
    for i in range(2):
        store.users.create_token("alice", f"t{i}", None, T0, max_live=2)
    with pytest.raises(TooManyTokens, match="already has 2 live tokens"):
        store.users.create_token("alice", "t3", None, T0, max_live=2)
    assert len(store.users.list_tokens("alice")) == 2


def test_expired_and_revoked_tokens_free_their_place(store: Store) -> None:
    store.users.create_user("alice", Role.USER, T0)
    short = store.users.create_token("alice", "short", T0 + 10, T0, max_live=2)
    other = store.users.create_token("alice", "other", None, T0 + 1, max_live=2)
    store.users.create_token("alice", "after expiry", None, T0 + 11, max_live=2)
    token, changed = store.users.revoke_token("alice", other.row.token_id, T0 + 12)
    assert changed and token.revoked_at == T0 + 12
    token, changed = store.users.revoke_token("alice", other.row.token_id, T0 + 13)
    assert not changed and token.revoked_at == T0 + 12
    store.users.create_token("alice", "after revoke", None, T0 + 14, max_live=2)
    assert [t.label for t in store.users.list_tokens("alice")] == [
        "short", "other", "after expiry", "after revoke"]
    assert short.row.token_id in {t.token_id for t in store.users.list_tokens("alice")}


def test_revoke_needs_the_tokens_own_user(store: Store) -> None:
    for name in ("alice", "bob"):
        store.users.create_user(name, Role.USER, T0)
    bobs = store.users.create_token("bob", "b", None, T0, max_live=5)
    with pytest.raises(TokenNotFound, match="user alice has no token"):
        store.users.revoke_token("alice", bobs.row.token_id, T0)
    assert store.users.get_token(bobs.row.token_id).revoked_at is None


# -- per-user reads ---------------------------------------------------------------------------


def test_list_and_queue_by_user_keep_global_positions(store: Store) -> None:
    a1, b1, a2, b2 = (add(store, i, u) for i, u in enumerate(["alice", "bob", "alice", "bob"]))
    run_attempt(store, a1, T0, None)
    pending, running = store.tasks.queue("bob")
    assert [(t.task_id, t.queue_position) for t in pending] == [(b1, 1), (b2, 3)]
    assert running == []
    pending, running = store.tasks.queue("alice")
    assert [(t.task_id, t.queue_position) for t in pending] == [(a2, 2)]
    assert [t.task_id for t in running] == [a1]
    page, more = store.tasks.list_tasks(user="alice", limit=1)
    assert [t.task_id for t in page] == [a2] and more is not None
    page, more = store.tasks.list_tasks(user="alice", limit=1, before_seq=more)
    assert [t.task_id for t in page] == [a1] and more is None
    page, _ = store.tasks.list_tasks(user="bob", state=S.QUEUED)
    assert [t.task_id for t in page] == [b2, b1]
    assert store.tasks.list_tasks(user="carol")[0] == []
    assert store.tasks.counts_by_user_and_state() == {
        ("alice", "RUNNING"): 1, ("alice", "QUEUED"): 1, ("bob", "QUEUED"): 2}
    assert store.tasks.gpus_in_use_by_user() == {"alice": 1}


def _plan(store: Store, name: str, params: dict[str, object]) -> str:
    rows = store.core._conn.execute("EXPLAIN QUERY PLAN " + QUERIES[name], params)
    return " ".join(r["detail"] for r in rows)


@pytest.mark.sqlite_only("SQLite's query plans")
def test_per_user_queries_walk_their_indexes(store: Store) -> None:
    plan = _plan(store, "list_tasks_of_user", {"user": "a", "before_seq": 9, "limit": 3})
    assert "tasks_user_seq (user=? AND seq<?)" in plan and "TEMP B-TREE" not in plan, plan
    plan = _plan(store, "list_tasks_of_user_in_state",
                 {"user": "a", "state": "QUEUED", "before_seq": 9, "limit": 3})
    assert "tasks_user_state_seq (user=? AND state=? AND seq<?)" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
    for counts in ("counts_by_user_and_state", "counts_by_state"):
        plan = _plan(store, counts, {})
        assert "task_counts" in plan and "tasks" not in plan.replace("task_counts", ""), plan
    plan = _plan(store, "adopt_ownerless_tasks", {"user": "x"})
    assert "tasks_user" in plan, plan
    plan = _plan(store, "usage_spans", {"from": 1.0, "to": 2.0, "user": None})
    assert "attempts_end_time" in plan, plan


# -- accounting ------------------------------------------------------------------------------


def test_usage_spans_of_a_window(store: Store) -> None:
    a = add(store, 1, "alice", g=4)
    run_attempt(store, a, 100, 110, kind="INSUFFICIENT_RESOURCES", retry=True)
    run_attempt(store, a, 170, 230)
    b = add(store, 2, "bob", g=2)
    run_attempt(store, b, 0, 50)
    c = add(store, 3, "bob", g=8)
    run_attempt(store, c, 150, None)  # still running
    d = add(store, 4, "bob")
    run_attempt(store, d, 500, 600)  # after the window
    spans = sorted(store.usage.usage_spans(60, 200), key=lambda s: (s.task_id, s.attempt_no))
    assert [(s.task_id, s.attempt_no, s.user, s.gpus, s.end_time, s.failure_kind)
            for s in spans] == [
        (a, 1, "alice", 4, 110, "INSUFFICIENT_RESOURCES"),
        (a, 2, "alice", 4, 230, None),
        (c, 1, "bob", 8, None, None),
    ]
    assert sorted(s.task_id for s in store.usage.usage_spans(0, 1000, "bob")) == [b, c, d]
    assert store.usage.gpu_seconds_by_user() == {"alice": 4 * 10 + 4 * 60, "bob": 2 * 50 + 100}


def test_a_migrated_database_gets_users_and_owners(tmp_path: Path) -> None:
    """A database of schema 1 (tasks without owners) upgrades, and its tasks get one."""
    path = str(tmp_path / "old.sqlite3")
    conn = connect(path)
    migrations = Path(__file__).resolve().parents[3] / "service" / "store" / "sql" / "migrations"
    conn.executescript((migrations / "0001_init.sql").read_text() + "\nPRAGMA user_version = 1;")
    conn.execute("INSERT INTO tasks (task_id, workload, state, jobspec_yaml, spec_json, "
                 "nnodes, n_gpus_per_node, created_at, updated_at, next_run_at, "
                 "runnable_since) VALUES ('mvp2-ppo-20250101-000000-0001', 'ppo', "
                 "'SUCCEEDED', '', '{}', 1, 4, 1, 1, 1, 1)")
    conn.execute("INSERT INTO attempts (task_id, attempt_no, ray_submission_id, created_at, "
                 "start_time, end_time) VALUES ('mvp2-ppo-20250101-000000-0001', 1, "
                 "'mvp2-ppo-20250101-000000-0001--a01', 1, 10, 70)")
    conn.close()
    store = Store(path)
    try:
        assert initialize(store.core._conn) == len(migration_files())
        assert store.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=T0) == 1
        assert store.tasks.get_task("mvp2-ppo-20250101-000000-0001").user == "admin"
        assert store.usage.gpu_seconds_by_user() == {"admin": 60 * 4}  # its GPU time came along
        assert store.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=T0) == 0
        assert store.usage.gpu_seconds_by_user() == {"admin": 60 * 4}  # and only once
    finally:
        store.close()


def _random_history(store: Store, seed: int) -> float:
    """60 tasks of three users, each with 1-3 attempts (retried, failed, ended, a few
    still running); returns the time after the last."""
    import random

    rng = random.Random(seed)
    users = ["alice", "bob", "carol"]
    now = T0
    for i in range(60):
        task = add(store, i, users[i % 3], g=rng.choice([1, 2, 4]), now=now)
        for _ in range(rng.randint(1, 3)):
            start = now + rng.random() * 10
            end = None if rng.random() < 0.1 else start + rng.random() * 100
            retry = end is not None and rng.random() < 0.5
            run_attempt(store, task, start, end, kind="CLUSTER_LOST" if retry else None,
                        retry=retry)
            now += 200
            if end is None or not retry:
                break
    return now


def test_the_gpu_seconds_ledger_equals_the_sum_of_ended_attempts(store: Store) -> None:
    """Every way an attempt ends adds to its owner's total, exactly once."""
    now = _random_history(store, seed=5)
    expected: dict[str, float] = {}
    for span in store.usage.usage_spans(0, now * 2):
        if span.end_time is not None:
            expected[span.user] = expected.get(span.user, 0.0) + (
                span.end_time - span.start_time) * span.gpus
    got = store.usage.gpu_seconds_by_user()
    assert set(got) == set(expected) and len(expected) == 3
    for user, total in expected.items():
        assert got[user] == pytest.approx(total)


@pytest.mark.parametrize(("window", "user", "limit"), [
    ((0, 10**7), None, 5), ((T0 + 3000, T0 + 6000), None, 3), ((0, 10**7), "bob", 100),
    ((T0 + 1000, T0 + 1500), "alice", 0),
    # all history (to: now): from each task's running totals, no ended attempt read
    ((0, None), None, 5), ((0, None), "bob", 3), ((0, None), "carol", 0),
    ((0, None), None, 100),
    # windows that cut tasks' spans (one task each for the last two): those tasks'
    # attempts are clipped one by one
    ((T0 + 3000, None), None, 5), ((T0 + 205, T0 + 4100), "alice", 3),
    ((T0 + 2990, T0 + 3010), None, 100),
])
def test_usage_summed_in_sql_matches_accounting_attempt_by_attempt(
        store: Store, window: tuple[float, float | None], user: str | None, limit: int,
        monkeypatch) -> None:
    """The usage route sums users in SQL and reads only the top tasks' attempts: the same
    figures as ``usage.account`` over every attempt (failed and running ones included)."""
    from service.policy.usage import account, report_of
    from service.web.api.views import usage_json

    now = _random_history(store, seed=11)
    lo, hi = window
    hi = now if hi is None else hi
    edges: list[str] = []
    parts = type(store.usage)._usage_parts

    def spy(conn, params, crossing):
        edges.extend(crossing)
        return parts(conn, params, crossing)
    monkeypatch.setattr(store.usage, "_usage_parts", spy)
    summary = store.usage.usage_summary(lo, hi, now, user, limit)
    # attempts are read one by one only for the tasks whose ended attempts' span crosses
    # an edge of the window (none over all history)
    span: dict[str, tuple[float, float]] = {}
    for s in store.usage.usage_spans(0, 10**7, user):
        if s.end_time is not None and s.end_time > s.start_time:
            first, last = span.get(s.task_id, (s.start_time, s.end_time))
            span[s.task_id] = (min(first, s.start_time), max(last, s.end_time))
    assert sorted(edges) == sorted(t for t, (first, last) in span.items()
                                   if last > lo and first < hi
                                   and not (first >= lo and last <= hi))
    assert not (lo == 0 and edges)
    got = usage_json(report_of(summary, lo, hi, now), now, limit)
    want = usage_json(account(store.usage.usage_spans(lo, hi, user), lo, hi, now), now, limit)
    assert got["tasks_total"] == want["tasks_total"] and want["tasks_total"] > 0
    assert [t["task_id"] for t in got["tasks"]] == [t["task_id"] for t in want["tasks"]]
    assert got["tasks"] == want["tasks"]
    assert len(got["users"]) == len(want["users"])
    for mine, theirs in zip(got["users"], want["users"], strict=True):
        assert mine == pytest.approx(theirs)
    assert len(summary.top_spans) <= sum(len(t["attempts"]) for t in want["tasks"][:limit])


def test_recent_runs_are_those_that_ended_on_their_own_or_at_their_limit(store: Store) -> None:
    """What the expected starts learn from: a run that succeeded or hit its limit, with
    the task's limit; not a failed one, one still running, or a task without a limit."""
    from service.scheduling.runtimes import EndedRun

    def limited(i: int, user: str, limit: float | None) -> str:
        task_id = f"mvp2-ppo-20251223-143201-{i:04x}"
        store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="", spec={}, nnodes=1,
                                        n_gpus_per_node=4, user=user, created_at=T0,
                                        max_runtime_s=limit, priority=0), task_id=task_id)
        return task_id

    run_attempt(store, limited(1, "alice", 600.0), T0, T0 + 100)
    run_attempt(store, limited(2, "bob", 600.0), T0, T0 + 630, kind="TIME_LIMIT")
    run_attempt(store, limited(3, "bob", 600.0), T0, T0 + 50, kind="USER_ERROR")
    run_attempt(store, limited(4, "carol", None), T0, T0 + 100)
    run_attempt(store, limited(5, "carol", 600.0), T0, None)
    assert sorted(store.attempts.recent_runs(100), key=lambda r: r.user) == [
        EndedRun("alice", (1, 4), 100.0, 600.0), EndedRun("bob", (1, 4), 630.0, 600.0)]
    assert len(store.attempts.recent_runs(1)) == 1  # only the attempts that ended last are read
