"""Store: creation, typed rows, queue positions, pagination, cancel, CAS, named queries."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import threading
from functools import partial
from pathlib import Path

import pytest

from service.domain.ids import new_task_id
from service.domain.newtask import NewTask
from service.domain.reasons import WaitKind, as_text
from service.domain.states import RUNNABLE, PipelineState, TaskState
from service.store import tasks as store_tasks
from service.store.sql import QUERIES, QUERIES_FILE, parse_queries
from service.store.writer import (
    ACTIVE,
    MAX_SEQ,
    AttemptEnd,
    BulkTask,
    CancelKind,
    RetryPlan,
    StaleState,
    Store,
    TaskExists,
    TaskNotFound,
    TaskRow,
    truncate_message,
)

S = TaskState


def tid(i: int) -> str:
    return f"mvp2-ppo-20251223-143201-{i:04x}"


@pytest.fixture
def store(store_url: str) -> Store:
    s = Store(store_url)
    yield s
    s.close()


def add(store: Store, i: int, now: float = 100.0, nnodes: int = 1, g: int = 1) -> str:
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text=f"raw: {i}\n",
                                    spec={"i": i}, nnodes=nnodes, n_gpus_per_node=g, user="alice",
                                    created_at=now, priority=0), task_id=tid(i))
    return tid(i)


def test_priority_and_time_limit_are_stored_once_in_their_columns(store: Store) -> None:
    """The JobSpec JSON leaves out what a column holds; reading it back for the submit
    takes the columns' values, so a changed priority is the one everywhere."""
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="priority: 3\n",
                                    spec={"workload": "ppo", "priority": 3, "max_runtime_s": None},
                                    nnodes=1, n_gpus_per_node=1, user="alice", created_at=100.0,
                                    priority=3, max_runtime_s=60.0), task_id=tid(1))
    stored = store.reads.reader().execute("SELECT spec_json FROM tasks WHERE task_id = ?",
                                          (tid(1),)).fetchone()["spec_json"]
    assert json.loads(stored) == {"workload": "ppo"}
    assert store.tasks.set_priority(tid(1), 9, 101.0).priority == 9
    claim = store.attempts.claim_for_submit(tid(1), S.QUEUED, 102.0)
    assert (claim.spec["priority"], claim.spec["max_runtime_s"]) == (9, 60.0)
    assert claim.spec["workload"] == "ppo"


def test_a_row_stored_with_its_priority_in_the_json_reads_the_column(store: Store) -> None:
    add(store, 1)
    with store.core.tx() as conn:  # as a task stored before the JSON left the priority out
        conn.execute("UPDATE tasks SET spec_json = '{\"priority\": 1}', priority = 5")
    assert store.attempts.claim_for_submit(tid(1), S.QUEUED, 101.0).spec["priority"] == 5


def test_create_and_view(store: Store) -> None:
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="a: 1  # raw\n",
                                    spec={"workload": "ppo"}, nnodes=2, n_gpus_per_node=4,
                                    user=None, created_at=1766500321.5, priority=0), task_id=tid(1))
    view = store.tasks.get_task(tid(1))
    assert view == TaskRow(
        seq=1, task_id=tid(1), state=S.QUEUED, workload="ppo", user=None, nnodes=2,
        n_gpus_per_node=4, created_at=1766500321.5, updated_at=1766500321.5,
        next_run_at=1766500321.5, error_summary=None, pending_reason=None,
        cancel_requested_at=None, latest_attempt=None, queue_position=1,
        spec={"description": None, "labels": None, "max_attempts": None},  # shown: none
    )
    assert view.total_gpus == 8 and not view.cancel_requested
    assert store.tasks.task_exists(tid(1)) and not store.tasks.task_exists(tid(2))
    assert store.tasks.get_task(tid(2)) is None
    with pytest.raises(TaskExists):
        add(store, 1)
    claim = store.attempts.claim_for_submit(tid(1), S.QUEUED, 2.0)
    assert claim.jobspec_yaml == "a: 1  # raw\n"
    assert claim.spec == {"workload": "ppo", "priority": 0, "max_runtime_s": None}
    assert [e.event_type for e in store.tasks.events(tid(1))] == ["CREATED", "STATE_TRANSITION"]


def test_queue_positions_follow_fifo_among_runnable(store: Store) -> None:
    ids = [add(store, i) for i in range(1, 6)]
    store.attempts.claim_for_submit(ids[1], S.QUEUED, 101.0)  # leaves the queue
    store.attempts.mark_pending([(ids[2], S.QUEUED, as_text("no room"))], 101.0)  # still runnable
    positions = {i: store.tasks.get_task(i).queue_position for i in ids}
    assert positions == {ids[0]: 1, ids[1]: None, ids[2]: 2, ids[3]: 3, ids[4]: 4}
    pending, running = store.tasks.queue()
    assert [(t.task_id, t.queue_position) for t in pending] == [
        (ids[0], 1), (ids[2], 2), (ids[3], 3), (ids[4], 4)]
    assert [t.task_id for t in running] == [ids[1]]
    assert pending[1].pending_reason == "no room" and pending[1].state is S.PENDING_RESOURCES
    counts = store.tasks.counts_by_state()
    assert counts["QUEUED"] == 3 and counts["PENDING_RESOURCES"] == 1
    assert counts["SUBMITTING"] == 1 and counts["FAILED"] == 0


def test_pagination_newest_first(store: Store) -> None:
    ids = [add(store, i) for i in range(1, 8)]
    store.attempts.claim_for_submit(ids[2], S.QUEUED, 101.0)
    seen, before, pages = [], None, []
    while True:
        page, before = store.tasks.list_tasks(limit=3, before_seq=before)
        seen += [t.task_id for t in page]
        pages.append(len(page))
        if before is None:
            break
        assert before == page[-1].seq  # the next page starts below the last row
    assert seen == ids[::-1] and pages == [3, 3, 1]
    page, before = store.tasks.list_tasks(state=S.SUBMITTING, limit=3)
    assert [t.task_id for t in page] == [ids[2]] and before is None
    assert page[0].latest_attempt.ray_submission_id == ids[2] + "--a01"
    page, before = store.tasks.list_tasks(state=S.QUEUED, limit=2, before_seq=6)
    assert [t.task_id for t in page] == [ids[4], ids[3]] and before == 4
    assert [t.queue_position for t in page] == [4, 3]  # ids[2] left the queue
    for bad in (0, -1, MAX_SEQ + 1, True, "5"):
        with pytest.raises(ValueError, match="before_seq"):
            store.tasks.list_tasks(limit=3, before_seq=bad)
    with pytest.raises(ValueError, match="limit"):
        store.tasks.list_tasks(limit=0)


def test_attempt_numbers_and_reuse_of_unaccepted_ids(store: Store) -> None:
    t = add(store, 1)
    c1 = store.attempts.claim_for_submit(t, S.QUEUED, 101.0)
    assert (c1.attempt_no, c1.ray_submission_id) == (1, t + "--a01")
    # Ray never accepted it: the same id is used again.
    down = as_text("Ray cluster unreachable: x", WaitKind.CLUSTER_UNREACHABLE)
    assert store.attempts.release_claim(t, 1, down, 102.0) is S.PENDING_RESOURCES
    assert store.tasks.get_task(t).pending_reason == "Ray cluster unreachable: x"
    assert store.tasks.get_task(t).reason_kind == "cluster_unreachable"
    again = store.attempts.claim_for_submit(t, S.PENDING_RESOURCES, 103.0)
    assert again.ray_submission_id == t + "--a01"
    store.attempts.mark_submitted(t, 1, 104.0)
    store.attempts.schedule_retry(t, S.SUBMITTED, 1, AttemptEnd("FAILED", "INSUFFICIENT_RESOURCES",
                                                                "m"),
                         RetryPlan(next_run_at=200.0, runnable_since=105.0),
                         reason=as_text("retry later"), now=105.0)
    view = store.tasks.get_task(t)
    assert view.state is S.PENDING_RESOURCES and view.next_run_at == 200.0
    assert view.pending_reason == "retry later"
    assert store.tasks.runnable(199.9, 10) == [] and len(store.tasks.runnable(200.0, 10)) == 1
    c2 = store.attempts.claim_for_submit(t, S.PENDING_RESOURCES, 201.0)
    assert c2.ray_submission_id == t + "--a02"  # accepted ids are never reused
    assert [a.attempt_no for a in store.attempts.list_attempts(t)] == [1, 2]
    assert store.attempts.get_attempt(t).attempt_no == 2
    first = store.attempts.get_attempt(t, 1)
    assert first.failure_kind == "INSUFFICIENT_RESOURCES" and first.submitted_at == 104.0
    assert (first.created_at, first.ray_status, first.message) == (101.0, "FAILED", "m")
    assert store.attempts.get_attempt(t, 3) is None
    kinds = [e.event_type for e in store.tasks.events(t)]
    assert "SUBMIT" in kinds and "RETRY_SCHEDULED" in kinds


@pytest.mark.parametrize("state", list(TaskState))
def test_cancel_from_every_state(store: Store, state: TaskState) -> None:
    t = add(store, 1)
    with store.core.tx() as conn:  # set-up: put the row in ``state`` with an attempt
        conn.execute("INSERT INTO attempts (task_id, attempt_no, ray_submission_id, "
                     "created_at) VALUES (?, 1, ?, 0)", (t, t + "--a01"))
        conn.execute("UPDATE tasks SET state = ?, latest_attempt_no = 1 WHERE task_id = ?",
                     (state.value, t))
    out = store.tasks.cancel(t, 150.0)
    K = CancelKind
    expected = {S.BLOCKED: K.CANCELED, S.QUEUED: K.CANCELED, S.PENDING_RESOURCES: K.CANCELED,
                S.SUBMITTING: K.STOPPING, S.SUBMITTED: K.STOPPING, S.RUNNING: K.STOPPING}
    assert out.kind is expected.get(state, K.TERMINAL)
    if out.kind is K.CANCELED:
        assert out.task.state is S.CANCELED and out.task.queue_position is None
    elif out.kind is K.STOPPING:
        assert out.task.state is state and out.task.cancel_requested
        assert out.ray_submission_id == t + "--a01"
        assert store.tasks.cancel(t, 151.0).kind is K.STOPPING  # idempotent: one event only
        assert [e.event_type for e in store.tasks.events(t)].count("CANCEL_REQUESTED") == 1
    else:
        assert out.task.state is state and not out.task.cancel_requested
    missing = store.tasks.cancel(tid(99), 150.0)
    assert missing.kind is K.NOT_FOUND and missing.task is None


def test_cancel_during_submitting_completes_when_claim_released(store: Store) -> None:
    t = add(store, 1)
    store.attempts.claim_for_submit(t, S.QUEUED, 101.0)
    assert store.tasks.cancel(t, 102.0).kind is CancelKind.STOPPING
    assert store.attempts.release_claim(t, 1, as_text("unreachable"), 103.0) is S.CANCELED
    assert store.tasks.get_task(t).state is S.CANCELED


def test_guarded_writes_never_overwrite(store: Store) -> None:
    t = add(store, 1)
    store.tasks.cancel(t, 101.0)
    with pytest.raises(StaleState, match="expected state QUEUED, found CANCELED"):
        store.attempts.claim_for_submit(t, S.QUEUED, 102.0)
    assert store.attempts.list_attempts(t) == []  # the failed claim left nothing behind
    # mark_pending skips rows that moved meanwhile instead of resurrecting them.
    assert store.attempts.mark_pending([(t, S.QUEUED, as_text("x"))], 103.0) == 0
    assert store.tasks.get_task(t).state is S.CANCELED
    with pytest.raises(ValueError, match="not a runnable state"):
        store.attempts.mark_pending([(t, S.RUNNING, as_text("x"))], 103.0)
    with pytest.raises(ValueError, match="terminal outcome"):
        store.attempts.finish_attempt(t, S.RUNNING, 1, AttemptEnd("RUNNING"), S.RUNNING, None, 1.0)


def test_mark_pending_batch_moves_only_rows_in_the_expected_state(store: Store) -> None:
    ids = [add(store, i) for i in range(1, 7)]
    store.tasks.cancel(ids[1], 101.0)  # moved meanwhile: the batch must skip it
    store.attempts.mark_pending([(ids[2], S.QUEUED, as_text("old reason"))],
                                101.0)  # already pending
    items = [(ids[0], S.QUEUED, as_text("needs 1x8")), (ids[1], S.QUEUED, as_text("needs 1x8")),
             (ids[2], S.PENDING_RESOURCES, as_text("needs 2x4")),
             (ids[3], S.QUEUED, as_text("needs 2x4")),
             (ids[4], S.QUEUED, as_text("needs 1x8")),
             (ids[5], S.PENDING_RESOURCES, as_text("needs 1x8"))]
    assert store.attempts.mark_pending(items, 102.0) == 4  # ids[1] canceled, ids[5] still QUEUED
    states = {t: store.tasks.get_task(t) for t in ids}
    assert states[ids[1]].state is S.CANCELED
    assert states[ids[5]].state is S.QUEUED and states[ids[5]].pending_reason is None
    for t, reason in ((ids[0], "needs 1x8"), (ids[2], "needs 2x4"), (ids[3], "needs 2x4"),
                      (ids[4], "needs 1x8")):
        assert states[t].state is S.PENDING_RESOURCES and states[t].pending_reason == reason
    moves = {e.task_id: e.payload for t in ids for e in store.tasks.events(t)
             if e.event_type == "STATE_TRANSITION" and e.ts == 102.0}
    assert moves == {t: {"from": "QUEUED", "to": "PENDING_RESOURCES", "reason": r}
                     for t, r in ((ids[0], "needs 1x8"), (ids[3], "needs 2x4"),
                                  (ids[4], "needs 1x8"))}


def test_concurrent_claims_one_winner(store: Store) -> None:
    t = add(store, 1)
    results: list[str] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        try:
            store.attempts.claim_for_submit(t, S.QUEUED, 101.0)
            results.append("won")
        except StaleState:
            results.append("lost")

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(results) == ["lost"] * 7 + ["won"]
    assert len(store.attempts.list_attempts(t)) == 1


def test_runnable_and_active_reads(store: Store) -> None:
    a, b, c = add(store, 1, nnodes=2, g=4), add(store, 2), add(store, 3)
    store.attempts.claim_for_submit(b, S.QUEUED, 101.0)
    store.attempts.mark_submitted(b, 1, 102.0)
    store.attempts.sync_attempt(b, 1, ray_status="RUNNING", message="", start_time=103.0, now=103.0,
                                to_running_from=S.SUBMITTED)
    rows = store.tasks.runnable(100.0, 10)
    assert [(r.task_id, r.nnodes, r.n_gpus_per_node) for r in rows] == [(a, 2, 4), (c, 1, 1)]
    assert [r.task_id for r in store.tasks.runnable(100.0, 1)] == [a]
    (act,) = store.tasks.active()
    assert (act.task_id, act.state, act.ray_status, act.start_time) == (
        b, S.RUNNING, "RUNNING", 103.0)
    assert store.tasks.active([S.SUBMITTING]) == []


def test_active_rows_decode_every_column_of_the_query_by_position(store: Store) -> None:
    """``_active`` reads the query's columns by position: each field is the one its
    column holds, checked against the columns by name."""
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="", spec={"save_freq": 5},
                                    nnodes=2, n_gpus_per_node=4, user="bob", created_at=100.0,
                                    priority=7, max_runtime_s=600.0), task_id=tid(1))
    store.attempts.claim_for_submit(tid(1), S.QUEUED, 101.0)
    store.attempts.mark_submitted(tid(1), 1, 102.0)
    store.attempts.sync_attempt(tid(1), 1, ray_status="RUNNING", message="up", start_time=103.0,
                                now=103.0, to_running_from=S.SUBMITTED)
    store.tasks.cancel(tid(1), 104.0)
    (row,) = store.tasks.active()
    named = store.reads.reader().execute(QUERIES["active"]).fetchone()
    assert (row.task_id, row.state, row.user, row.nnodes, row.n_gpus_per_node,
            row.attempt_no, row.ray_submission_id, row.ray_status, row.message,
            row.start_time, row.submitted_at, row.priority, row.preemptions,
            row.resource_failures, row.preempted_for, row.max_runtime_s) == (
        named["task_id"], S(named["state"]), named["user"], named["nnodes"],
        named["n_gpus_per_node"], named["attempt_no"], named["ray_submission_id"],
        named["ray_status"], named["message"], named["start_time"], named["submitted_at"],
        named["priority"], named["preemptions"], named["resource_failures"],
        named["preempted_for"], named["max_runtime_s"])
    assert (row.user, row.nnodes, row.priority, row.max_runtime_s, row.message) == (
        "bob", 2, 7, 600.0, "up")
    assert (row.cancel_requested, row.checkpointing) == (True, True)
    assert row.stop_requested is bool(named["stop_requested"])


def _write_from_another_connection(store: Store, sql: str, params: tuple) -> None:
    """A commit by a connection that is not the store's (as another process would)."""
    if store.engine_name == "sqlite":
        other = sqlite3.connect(store.db_path)
        with other:
            other.execute(sql, params)
        other.close()
        return
    import psycopg

    with psycopg.connect(store.db_path, autocommit=True) as conn:
        conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]


def test_active_rows_are_read_again_only_after_a_commit(store: Store) -> None:
    """Nothing committed since this thread's last read: the same rows, not read again. A
    commit of the store's own writer, or of another connection (another process), is
    seen at once."""
    a, b = add(store, 1), add(store, 2)
    store.attempts.claim_for_submit(a, S.QUEUED, 101.0)
    first = store.tasks.active()
    assert [r.task_id for r in first] == [a]
    again = store.tasks.active()
    assert again[0] is first[0] and again is not first  # the caller's list is its own
    store.attempts.claim_for_submit(b, S.QUEUED, 102.0)
    assert [r.task_id for r in store.tasks.active()] == [a, b]
    assert [r.task_id for r in store.tasks.active([S.SUBMITTING])] == [a, b]
    _write_from_another_connection(store, "UPDATE tasks SET priority = 9 WHERE task_id = ?",
                                   (a,))
    assert [(r.task_id, r.priority) for r in store.tasks.active()] == [(a, 9), (b, 0)]
    assert store.tasks.active([S.RUNNING]) == []
    seen: list[list[str]] = []
    reader = threading.Thread(target=lambda: seen.append([r.task_id for r in store.tasks.active()]))
    reader.start()
    reader.join()
    assert seen == [[a, b]]


@pytest.mark.parametrize("per_user", [False, True])
def test_runnable_rows_unchanged_are_reused_and_changed_ones_read_anew(
        store: Store, per_user: bool) -> None:
    """A tick reads the same rows again and again: one whose columns did not change is the
    row of the last read, one that changed (its reason here) is new, with the change."""
    a, b = add(store, 1), add(store, 2)
    first = {r.task_id: r for r in store.tasks.runnable(100.0, 10, per_user=per_user)}
    store.attempts.mark_pending([(b, S.QUEUED, as_text("no room"))], 101.0)
    second = {r.task_id: r for r in store.tasks.runnable(101.0, 10, per_user=per_user)}
    assert second[a] is first[a]
    assert second[b] is not first[b]
    assert (second[b].state, second[b].pending_reason) == (S.PENDING_RESOURCES, "no room")
    assert (first[b].state, first[b].pending_reason) == (S.QUEUED, None)
    store.tasks.cancel(a, 102.0)
    assert [r.task_id for r in store.tasks.runnable(102.0, 10, per_user=per_user)] == [b]


def _plan(store: Store, sql: str, params: dict[str, object]) -> str:
    return " ".join(r["detail"] for r in store.core._conn.execute("EXPLAIN QUERY PLAN " + sql,
                                                                  params))


# The named queries over runnable / active rows, and the partial index each must scan.
# A task read counts the runnable rows ahead of a runnable task (its queue position); a
# list page's positions are read for the whole page at once (queue_positions: its own
# test below).
HOT_QUERIES = {
    "runnable": ("tasks_runnable", {"now": 1.0, "limit": 5}),
    "queue_pending": ("tasks_runnable", {"limit": 10, "offset": 20}),
    "queue_pending_of_user": ("tasks_user_runnable", {"user": "u", "limit": 10, "offset": 0}),
    "get_task": ("tasks_runnable", {"task_id": "x"}),
    "active": ("tasks_active", {}),
    "queue_running": ("tasks_active", {}),
    "blocked_page": ("tasks_blocked", {"limit": 10, "user": None}),
    "running_pipeline_stages": ("pipelines_running", {}),
}


def test_a_list_page_ranks_the_queue_once_not_per_row(store: Store) -> None:
    """Positions of a page's runnable rows: right, and read once for the page (the list
    queries themselves count nothing)."""
    ids = [f"t-{i}" for i in range(6)]
    for i, task_id in enumerate(ids):
        store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                        n_gpus_per_node=1, user="u", created_at=100.0 + i,
                                        priority=5 if i == 4 else 0), task_id=task_id)
    store.tasks.cancel("t-1", 200.0)
    for name in ("list_tasks", "list_tasks_in_state", "list_tasks_of_user",
                 "list_tasks_of_user_in_state"):
        assert "count(" not in QUERIES[name]
    page, _ = store.tasks.list_tasks(limit=10)
    assert {t.task_id: t.queue_position for t in page} == {
        "t-5": 5, "t-4": 1, "t-3": 4, "t-2": 3, "t-1": None, "t-0": 2}
    assert {t.task_id: t.queue_position for t in page} == {
        t: store.tasks.get_task(t).queue_position for t in ids}  # the single read agrees


@pytest.mark.sqlite_only("SQLite's query plans (EXPLAIN QUERY PLAN)")
def test_a_pages_positions_read_ranges_of_the_queue_not_all_of_it(store: Store) -> None:
    """queue_positions counts the rows between the page's waiting rows, ranges of
    tasks_runnable walked up to the page's last row at most; ranking every waiting row
    (a window over the whole index) cost about a microsecond a waiting row a page."""
    plan = _plan(store, QUERIES["queue_positions"], {"seqs": "[1, 2]"})
    assert "SEARCH r USING COVERING INDEX tasks_runnable (priority=? AND seq>? AND seq<?)" \
        in plan, plan
    scans = re.findall(r"SCAN (\S+)", plan)
    assert scans and not {"t", "r", "tasks"} & set(scans), plan  # the page, never the queue


def test_a_pages_positions_are_the_rankings_of_the_queue(store: Store) -> None:
    """The positions of any page's rows (a window of the newest-first list, one user's
    tasks, one user's part of the queue), whatever their priorities and states, are their
    ranks in the queue (priority first, then FIFO); rows not waiting have none."""
    rng = random.Random(7)
    for i in range(60):
        store.tasks.create_task(NewTask(
            id_prefix="", workload="ppo", text="x", spec={}, nnodes=1, n_gpus_per_node=1,
            user=f"u{i % 3}", created_at=100.0 + i, priority=rng.choice([-5, 0, 0, 3, 10])),
            task_id=tid(i))
    for i in rng.sample(range(60), 15):
        store.tasks.cancel(tid(i), 200.0)
    everyone, _ = store.tasks.list_tasks(limit=100)
    waiting = sorted((t for t in everyone if t.state in RUNNABLE),
                     key=lambda t: (-t.priority, t.seq))
    rank = {t.task_id: k for k, t in enumerate(waiting, start=1)}
    assert len(rank) == 45 and len({t.priority for t in waiting}) > 2
    pages = [store.tasks.list_tasks(limit=rng.randint(1, 20),
                                     before_seq=rng.randint(2, everyone[0].seq + 1))[0]
             for _ in range(12)]
    pages += [store.tasks.list_tasks(user=f"u{k}", limit=30)[0] for k in range(3)]
    pages += [store.tasks.queue(f"u{k}")[0] for k in range(3)]
    for page in pages:
        assert page and {t.task_id: t.queue_position for t in page} == {
            t.task_id: rank.get(t.task_id) for t in page}


@pytest.mark.sqlite_only("SQLite's query plans (EXPLAIN QUERY PLAN)")
@pytest.mark.parametrize("name", sorted(HOT_QUERIES))
def test_queries_use_the_partial_indexes(store: Store, name: str) -> None:
    """Cost must not grow with finished tasks: the hot queries scan runnable/active rows."""
    index, params = HOT_QUERIES[name]
    plan = _plan(store, QUERIES[name], params)
    assert f"USING INDEX {index}" in plan or f"USING COVERING INDEX {index}" in plan, plan
    assert "TEMP B-TREE" not in plan, plan


@pytest.mark.sqlite_only("SQLite's query plans (EXPLAIN QUERY PLAN)")
@pytest.mark.parametrize("name", ["get_task", "task_page"])
def test_a_queue_position_counts_two_ranges_of_the_queue(store: Store, name: str) -> None:
    """A waiting task's read counts the rows of a higher priority, then those of its own
    ahead of it: one count of "priority > p OR (priority = p AND seq < s)" is read as the
    range priority >= p, every waiting row of the task's priority whatever its place."""
    plan = _plan(store, QUERIES[name], {"task_id": "x"})
    assert "tasks_runnable (priority>?)" in plan, plan
    assert "tasks_runnable (priority=? AND seq<?)" in plan, plan


def _index_terms(store: Store) -> dict[str, str]:
    """``{index: its WHERE term}`` of the partial indexes, as SQLite holds them."""
    rows = store.core._conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql LIKE '%WHERE%'"
    )
    return {r["name"]: " ".join(r["sql"].split(" WHERE ", 1)[1].split()) for r in rows}


@pytest.mark.sqlite_only("SQLite's query plans (EXPLAIN QUERY PLAN)")
def test_partial_index_terms_are_repeated_literally_and_mirror_the_states(store) -> None:
    """SQLite uses a partial index only when the query repeats its term: every query that
    names one (INDEXED BY) spells its term out, and the terms list exactly the runnable
    and active states of service/domain/states.py (the webhook outbox's: its own states)."""
    terms = _index_terms(store)
    states = {"tasks_runnable": RUNNABLE, "tasks_user_runnable": RUNNABLE,
              "tasks_active": ACTIVE, "tasks_blocked": {S.BLOCKED},
              "pipelines_running": {PipelineState.RUNNING}}
    assert set(terms) - set(states) == {"webhook_deliveries_due", "webhook_deliveries_ended"}
    for index, term in terms.items():
        if index in states:
            listed = set(re.findall(r"'([A-Z_]+)'", term))
            assert listed == {s.value for s in states[index]}, (index, term)
        users = [n for n, sql in QUERIES.items() if f"INDEXED BY {index}" in sql]
        assert users, index
        for name in users:
            assert term in " ".join(QUERIES[name].split()), (name, term)


@pytest.mark.sqlite_only("SQLite's query plans (EXPLAIN QUERY PLAN)")
def test_mark_pending_finds_rows_by_task_id(store: Store) -> None:
    """The batch update looks each id up (task_id index), never walks the runnable rows."""
    plan = _plan(store, QUERIES["mark_pending"], {
        "from_state": "QUEUED", "to_state": "PENDING_RESOURCES", "now": 1.0,
        "next_run_at": None, "items": "[]"})
    assert "sqlite_autoindex_tasks_1 (task_id=?)" in plan, plan
    assert "tasks_runnable" not in plan and "tasks_state_seq" not in plan, plan


@pytest.mark.sqlite_only("SQLite's query plans (EXPLAIN QUERY PLAN)")
def test_list_queries_walk_an_index_newest_first(store: Store) -> None:
    plan = _plan(store, QUERIES["list_tasks_in_state"],
                 {"state": "QUEUED", "before_seq": MAX_SEQ, "limit": 3})
    assert "tasks_state_seq (state=? AND seq<?)" in plan and "TEMP B-TREE" not in plan, plan
    plan = _plan(store, QUERIES["list_tasks"], {"before_seq": MAX_SEQ, "limit": 3})
    assert "INTEGER PRIMARY KEY (rowid<?)" in plan and "TEMP B-TREE" not in plan, plan


def test_truncate_message_keeps_head_and_tail() -> None:
    assert truncate_message(None) is None
    assert truncate_message("short") == "short"
    text = "H" * 2000 + "M" * 10_000 + "T" * 5000
    out = truncate_message(text)
    assert out.startswith("H" * 1000) and out.endswith("T" * 3000)
    assert "[13000 characters truncated]" in out


def test_bulk_load(store: Store) -> None:
    n = store.tasks.bulk_load(BulkTask(tid(i), "ppo", S.SUCCEEDED if i % 2 else S.QUEUED, float(i))
                              for i in range(1, 11))
    assert n == 10
    assert store.tasks.counts_by_state()["QUEUED"] == 5
    assert store.tasks.get_task(tid(10)).queue_position == 5


class _AnyParams(dict):
    """Binds None to every named parameter (enough to compile a statement)."""

    def __missing__(self, key: str) -> None:
        return None


@pytest.mark.sqlite_only("compiled by SQLite; PostgreSQL's: test_postgres_queries.py")
def test_every_named_query_compiles_against_the_schema(store: Store) -> None:
    assert len(QUERIES) >= 30
    for name, sql in QUERIES.items():
        try:
            store.core._conn.execute("EXPLAIN " + sql, _AnyParams()).fetchall()
        except sqlite3.Error as exc:
            pytest.fail(f"query {name}: {exc}")


@pytest.mark.parametrize("text, message", [
    ("SELECT 1;", "before the first"),
    ("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;", "defined twice"),
    ("-- name: a\n-- only a comment\n", "empty"),
    ("-- name: a\nSELECT 1; SELECT 2;", "more than one statement"),
    ("-- name: Bad-Name\nSELECT 1;", "not an identifier"),
])
def test_queries_file_format_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_queries(text)


def test_queries_file_format() -> None:
    text = ("-- file notes\n\n-- name: one\n-- what it does\nSELECT 1\n  FROM t;\n"
            "-- name: two\nSELECT 2")
    assert parse_queries(text) == {"one": "SELECT 1\n  FROM t", "two": "SELECT 2"}


def test_queries_file_fragments_are_filled_in_and_unknown_ones_refused() -> None:
    text = ("-- fragment: cols\n-- shared\na, b\n-- name: one\nSELECT {cols} FROM t;\n"
            "-- name: two\nSELECT {cols}, c FROM u")
    assert parse_queries(text) == {"one": "SELECT a, b FROM t", "two": "SELECT a, b, c FROM u"}
    with pytest.raises(ValueError, match="names no fragment 'nope'"):
        parse_queries("-- name: one\nSELECT {nope} FROM t")
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- fragment: a\nx\n-- name: a\nSELECT 1")


TASK_READS = ("get_task", "list_tasks", "list_tasks_in_state", "list_tasks_of_user",
              "list_tasks_of_user_in_state", "queue_pending", "queue_pending_of_user",
              "queue_running", "blocked_page", "task_page")


def test_every_task_read_selects_the_one_task_projection() -> None:
    """A task column is named once in queries.sql (the task_columns fragment); every read
    that returns tasks selects exactly it, so the decoder sees the same row everywhere."""
    text = QUERIES_FILE.read_text(encoding="utf-8")
    assert text.count("t.next_run_at, t.error_summary, t.pending_reason") == 1  # fragment
    fragment = QUERIES["get_task"].split("SELECT ", 1)[1].split(", CASE WHEN")[0]
    for name in TASK_READS:
        assert fragment in QUERIES[name], name
        assert "LEFT JOIN attempts a ON a.task_id = t.task_id" in QUERIES[name], name


def test_reads_do_not_wait_for_the_writer(store: Store) -> None:
    """A read on another thread returns the last committed state while a write
    transaction holds the writer's lock (it would block on a shared connection)."""
    t = add(store, 1)
    seen: dict[str, TaskRow | None] = {}
    with store.core.tx() as conn:
        conn.execute("UPDATE tasks SET pending_reason = 'uncommitted' WHERE task_id = ?", (t,))
        reader = threading.Thread(target=lambda: seen.update(row=store.tasks.get_task(t)))
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive(), "the read waited for the writer"
    assert seen["row"].pending_reason is None
    assert store.tasks.get_task(t).pending_reason == "uncommitted"  # committed now


def test_readers_are_per_thread_and_closed_with_the_store(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "db.sqlite3"))
    add(store, 1)
    counts: list[dict[str, int]] = []
    threads = [threading.Thread(target=lambda: counts.append(store.tasks.counts_by_state()))
               for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [c["QUEUED"] for c in counts] == [1, 1, 1]
    assert len(store.reads._readers) == 3  # one connection per reading thread
    assert store.tasks.get_task(tid(1)) is not None
    assert len(store.reads._readers) == 4
    store.close()
    assert store.reads._readers == []
    with pytest.raises(sqlite3.ProgrammingError):
        store.tasks.get_task(tid(1))


def test_an_in_memory_database_is_refused() -> None:
    with pytest.raises(ValueError, match="database file"):
        Store(":memory:")


# -- scheduling policy: priorities and preemption marks ------------------------------------

def test_set_priority_only_while_the_task_waits(store: Store) -> None:
    t = add(store, 1)
    row = store.tasks.set_priority(t, 7, 101.0, by="alice")
    assert (row.priority, row.queue_position) == (7, 1)
    store.tasks.set_priority(t, 7, 102.0, by="alice")  # unchanged: no second event
    events = [e.payload for e in store.tasks.events(t) if e.event_type == "PRIORITY_CHANGED"]
    assert events == [{"from": 0, "to": 7, "by": "alice"}]
    store.attempts.claim_for_submit(t, S.QUEUED, 103.0)
    with pytest.raises(StaleState):
        store.tasks.set_priority(t, 9, 104.0)
    assert store.tasks.get_task(t).priority == 7
    with pytest.raises(TaskNotFound):
        store.tasks.set_priority(tid(99), 1, 105.0)


def test_queue_positions_count_in_priority_then_fifo_order(store: Store) -> None:
    tasks = [add(store, i) for i in range(1, 5)]
    store.tasks.set_priority(tasks[2], 5, 101.0)
    store.tasks.set_priority(tasks[3], -1, 101.0)
    assert [store.tasks.get_task(t).queue_position for t in tasks] == [2, 3, 1, 4]
    assert [t.task_id for t in store.tasks.runnable(200.0, 10)] == [tasks[2], tasks[0], tasks[1],
                                                                    tasks[3]]


def test_runnable_per_user_windows(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(1, 6):
        store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="", spec={}, nnodes=1,
                                        n_gpus_per_node=1, user="alice", created_at=100.0,
                                        priority=0), task_id=tid(i))
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user="bob", created_at=101.0, priority=0),
                            task_id=tid(9))
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user=None, created_at=102.0, priority=0),
                            task_id=tid(10))
    monkeypatch.setattr(store_tasks, "MIN_PER_USER", 2)
    got = [t.task_id for t in store.tasks.runnable(200.0, 3, per_user=True)]
    assert got == [tid(1), tid(2), tid(9), tid(10)]  # 2 of each owner, queue order
    got = [t.task_id for t in store.tasks.runnable(200.0, 9, per_user=True)]
    assert got == [tid(1), tid(2), tid(3), tid(9), tid(10)]  # 9 // 3 owners each
    assert [t.task_id for t in store.tasks.runnable(200.0, 2)] == [tid(1), tid(2)]


def test_request_preemption_marks_each_attempt_once(store: Store) -> None:
    low, high = add(store, 1), add(store, 2)
    store.attempts.claim_for_submit(low, S.QUEUED, 101.0)
    store.attempts.mark_submitted(low, 1, 102.0)
    assert store.attempts.request_preemption([(low, 1)], high, 103.0, {"priority": 9}) == [low]
    assert store.attempts.request_preemption([(low, 1)], high, 104.0) == []  # already marked
    assert store.attempts.get_attempt(low, 1).preempted_for == high
    assert store.tasks.active()[0].preempted_for == high
    kinds = [(e.task_id, e.event_type, e.payload) for t in (low, high)
             for e in store.tasks.events(t) if "PREEMPT" in e.event_type]
    assert kinds == [(low, "PREEMPTION_REQUESTED", {"attempt_no": 1, "for": high,
                                                    "priority": 9}),
                     (high, "PREEMPTING", {"victims": [low], "priority": 9})]


WINDOW = {"from": 100.0, "to": 200.0, "now": 200.0}


@pytest.mark.parametrize(("name", "index", "params", "sorted_"), [
    ("usage_whole_of_user", "COVERING INDEX task_usage_user", {"user": None}, False),
    ("usage_edges_of_user", "COVERING INDEX task_usage_user",
     {"user": "u", "longest": 9.0}, False),
    # the walk's at most :probe rows are sorted
    ("usage_top_whole_first", "COVERING INDEX task_usage_all_top",
     {"limit": 5, "probe": 320}, True),
    ("usage_top_whole_first_of_user", "COVERING INDEX task_usage_top",
     {"user": "u", "limit": 5, "probe": 320}, True),
    ("usage_top_whole_range", "COVERING INDEX task_usage_span", {"limit": 5}, True),
    ("usage_top_whole_range_of_user", "COVERING INDEX task_usage_user",
     {"user": "u", "limit": 5}, True),
])
@pytest.mark.sqlite_only("SQLite's query plans (EXPLAIN QUERY PLAN)")
def test_windowed_usage_reads_the_running_totals_by_index(
        store: Store, name: str, index: str, params: dict[str, object], sorted_: bool
        ) -> None:
    """Usage over a window costs one index entry per task that ended in it (the sums, the
    top tasks of a part of history), per task that ended within the longest span after an
    edge (the edges) or :probe entries (the top tasks over most of history): no attempt
    read, and no sort but of the range or the probe."""""
    plan = _plan(store, QUERIES[name], {**WINDOW, **params})
    assert f"USING {index}" in plan and "attempts" not in plan, plan
    assert ("TEMP B-TREE" in plan) == sorted_, plan


@pytest.mark.parametrize(("name", "index"), [("usage_owners", "COVERING INDEX task_usage_user"),
                                             ("usage_longest_span", "INDEX task_usage_length")])
@pytest.mark.sqlite_only("SQLite's query plans (EXPLAIN QUERY PLAN)")
def test_the_usage_owners_and_longest_span_are_index_seeks(store: Store, name: str,
                                                           index: str) -> None:
    plan = _plan(store, QUERIES[name], {})
    assert f"USING {index}" in plan and "SCAN task_usage" not in plan, plan



def test_a_label_asked_with_two_values_lists_nothing(store: Store) -> None:
    """The API asks for NUL when one key is asked twice (no task has both): no stored
    label holds one (a JobSpec's strings are printable), and the store answers without a
    query (PostgreSQL's jsonb could not read it)."""
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="raw\n",
                                    spec={"labels": {"team": "nlp"}}, nnodes=1,
                                    n_gpus_per_node=1, user="alice", created_at=100.0,
                                    priority=0), task_id=tid(1))
    assert [r.task_id for r in store.tasks.list_tasks(labels={"team": "nlp"})[0]] == [tid(1)]
    assert store.tasks.list_tasks(labels={"team": "\x00"}) == ([], None)
    assert store.tasks.list_tasks(labels={"team": "nlp", "run": "\x00"}) == ([], None)


def test_an_id_holding_nul_is_no_task(store: Store) -> None:
    """What a hostile URL asks for (``/ui/tasks/a%00b``): not found, on either engine."""
    add(store, 1)
    assert store.tasks.get_task(tid(1) + "\x00") is None
    assert not store.tasks.task_exists("a\x00b")


def test_a_minted_task_id_that_clashes_is_minted_again_and_nothing_of_the_clash_is_kept(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A submit's id is minted without a read for a free one: the insert finds a clash
    (on PostgreSQL at the COMMIT), the transaction rolls back whole and another id is
    tried; the store keeps writing."""
    taken = add(store, 1)
    suffixes = iter(["0001", "0001", "00aa"])
    monkeypatch.setattr(store_tasks, "new_task_id",
                        partial(new_task_id, suffix=lambda: next(suffixes)))
    new = NewTask(id_prefix="mvp2", workload="ppo", text="raw: 2\n", spec={"i": 2}, nnodes=1,
                  n_gpus_per_node=1, user=None, created_at=1766500321.0, priority=0)
    assert taken == "mvp2-ppo-20251223-143201-0001"
    got = store.tasks.create_task(new)
    assert got == "mvp2-ppo-20251223-143201-00aa"
    assert store.tasks.get_task(taken).user == "alice"  # the first is untouched
    assert store.tasks.get_task(got).user is None
    assert [e.event_type for e in store.tasks.events(got)] == ["CREATED"]
    assert [e.event_type for e in store.tasks.events(taken)] == ["CREATED"]
    add(store, 3)  # the writing connection is usable after the rolled-back clash
    assert store.tasks.task_exists(tid(3))


def test_a_minted_task_id_gives_up_after_max_tries_of_clashes(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.domain.ids import TaskIdExhausted

    add(store, 1)
    monkeypatch.setattr(store_tasks, "new_task_id", partial(new_task_id, suffix=lambda: "0001"))
    new = NewTask(id_prefix="mvp2", workload="ppo", text="", spec={}, nnodes=1,
                  n_gpus_per_node=1, user=None, created_at=1766500321.0, priority=0)
    with pytest.raises(TaskIdExhausted, match="after 64 tries"):
        store.tasks.create_task(new)
    add(store, 2)
    assert store.tasks.task_exists(tid(2))


def test_a_thousand_submits_whose_minted_ids_mostly_clash_all_land(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six suffixes a second for five submits a second: most first tries clash, at any
    point of a write (on PostgreSQL a clash may come back while later statements are
    still being sent, leaving the pipeline aborted with the server's status not yet
    told): each clash is rolled back whole and the next write works."""
    rng = random.Random(5)
    monkeypatch.setattr(store_tasks, "new_task_id",
                        partial(new_task_id, suffix=lambda: f"{rng.randrange(6):04x}"))
    made = set()
    for i in range(1000):
        made.add(store.tasks.create_task(NewTask(
            id_prefix="mvp2", workload="ppo", text="", spec={}, nnodes=1, n_gpus_per_node=1,
            user="alice", created_at=1766500321.0 + i // 5, priority=0)))
    assert len(made) == 1000 and all(store.tasks.task_exists(t) for t in made)
    assert sum(len(store.tasks.events(t)) for t in made) == 1000
