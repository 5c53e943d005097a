"""The webhook outbox: deliveries written in the transaction of the event that causes
them, to the subscribed hooks of the event's owner only, and the worker's claims."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from service.domain.newtask import NewTask
from service.domain.reasons import as_text
from service.domain.states import FailureKind, RayStatus, TaskState
from service.domain.writes import AttemptEnd, RetryPlan
from service.store.sql import QUERIES
from service.store.webhooks import TooManyWebhooks, WebhookOwnerUnknown
from service.store.writer import Store
from service.webhooks.events import EventType
from service.webhooks.policy import Decision

ALL = [t.value for t in EventType]
URL = "https://93.184.215.14/hook"
TID = "mvp2-ppo-20251223-143201-7f3a"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store(store_url)
    s.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=1.0)
    for name in ("alice", "bob"):
        s.users.create_user(name, "user", 1.0)  # type: ignore[arg-type]
    yield s
    s.close()


def hook(store: Store, owner: str = "alice", events: list[str] | None = None) -> str:
    return store.webhooks.create_webhook(owner=owner, url=URL, events=events or ALL, fmt="standard",
                                         now=2.0, max_per_user=10).hook_id


def on_cluster(store: Store, task_id: str, user: str = "alice") -> None:
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user=user, created_at=10.0, priority=0),
                            task_id=task_id)
    store.attempts.claim_for_submit(task_id, TaskState.QUEUED, 11.0)
    store.attempts.mark_submitted(task_id, 1, 12.0)


def types(store: Store, hook_id: str) -> list[str]:
    return [d.event_type for d in reversed(store.webhooks.webhook_deliveries(hook_id, 100))]


END = AttemptEnd(RayStatus.FAILED.value, None, "boom", 12.0, 20.0)


def _finish(kind: FailureKind | None, outcome: TaskState):
    def act(store: Store, task_id: str) -> None:
        end = AttemptEnd(RayStatus.FAILED.value, kind and kind.value, "boom", 12.0, 20.0)
        store.attempts.finish_attempt(task_id, TaskState.SUBMITTED, 1, end, outcome, "why", 20.0)
    return act


def _retry(kind: FailureKind):
    def act(store: Store, task_id: str) -> None:
        end = AttemptEnd(RayStatus.FAILED.value, kind.value, "boom", 12.0, 20.0)
        store.attempts.schedule_retry(task_id, TaskState.SUBMITTED, 1, end,
                                      RetryPlan(next_run_at=80.0, runnable_since=20.0),
                                      as_text("again"), 20.0)
    return act


@pytest.mark.parametrize(("act", "expected"), [
    (_finish(None, TaskState.SUCCEEDED), "task.succeeded"),
    (_finish(FailureKind.RUNTIME_ERROR, TaskState.FAILED), "task.failed"),
    (_finish(FailureKind.TIME_LIMIT, TaskState.FAILED), "task.time_limit"),
    (_finish(None, TaskState.CANCELED), "task.canceled"),
    (_retry(FailureKind.PREEMPTED), "task.preempted"),
    (_retry(FailureKind.CLUSTER_LOST), "task.retried"),
])
def test_each_outcome_is_one_delivery_of_its_type(store: Store, act, expected: str) -> None:
    mine = hook(store)
    on_cluster(store, TID)
    act(store, TID)
    assert types(store, mine) == [expected]  # claim, submit, running: no delivery
    [delivery] = store.webhooks.webhook_deliveries(mine, 10)
    source = "RETRY_SCHEDULED" if expected in ("task.retried", "task.preempted") else (
        "STATE_TRANSITION")
    event = [e for e in store.tasks.events(TID) if e.event_type == source][-1]
    assert delivery.event_id == event.id and delivery.state == "PENDING"


def test_the_data_names_task_state_owner_attempt_and_reason(store: Store) -> None:
    mine = hook(store)
    on_cluster(store, TID)
    _finish(FailureKind.RUNTIME_ERROR, TaskState.FAILED)(store, TID)
    [claim] = store.webhooks.claim_webhook_deliveries(30.0, 10, 60.0)
    assert claim.hook.hook_id == mine
    assert json.loads(claim.data_json) == {
        "event_id": claim.event_id, "task_id": TID, "state": "FAILED", "owner": "alice",
        "workload": "ppo", "attempt": 1, "failure_kind": "RUNTIME_ERROR", "reason": "why"}


def test_only_the_owners_subscribed_hooks_get_it(store: Store) -> None:
    only_success = hook(store, events=["task.succeeded"])
    cancels = hook(store, events=["task.canceled", "task.failed"])
    bobs = hook(store, owner="bob")
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user="alice", created_at=10.0, priority=0),
                            task_id=TID)
    store.tasks.cancel(TID, 11.0, by="alice")
    assert types(store, only_success) == [] and types(store, bobs) == []
    assert types(store, cancels) == ["task.canceled"]


def test_a_rolled_back_state_change_writes_no_delivery(store: Store) -> None:
    mine = hook(store)
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user="alice", created_at=10.0, priority=0),
                            task_id=TID)
    with pytest.raises(RuntimeError, match="after the event"), store.core.tx() as conn:
        store.core.transition(conn, TID, TaskState.QUEUED, TaskState.CANCELED, 11.0,
                          query="move_canceled", error_summary="x")
        inside = conn.execute("SELECT count(*) FROM webhook_deliveries").fetchone()[0]
        assert inside == 1  # written with the event, in its transaction
        raise RuntimeError("after the event")
    assert store.tasks.get_task(TID).state is TaskState.QUEUED
    assert store.webhooks.webhook_deliveries(mine, 10) == []


def test_an_event_that_names_its_owner_needs_no_task(store: Store) -> None:
    """How PIPELINE_ENDED plugs in: one line in events.SOURCES, the owner in the payload."""
    mine = hook(store, events=["pipeline.ended"])
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user="bob", created_at=10.0, priority=0),
                            task_id=TID)
    with store.core.tx() as conn:
        store.core.event(conn, TID, 11.0, "PIPELINE_ENDED",
                     {"owner": "alice", "pipeline_id": "p-1", "state": "succeeded"})
    [claim] = store.webhooks.claim_webhook_deliveries(12.0, 10, 60.0)
    assert claim.hook.hook_id == mine and claim.event_type == "pipeline.ended"
    assert json.loads(claim.data_json)["pipeline_id"] == "p-1"


def test_claims_hold_a_lease_a_restart_voids_it_and_stale_outcomes_change_nothing(
        store: Store) -> None:
    mine = hook(store)
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user="alice", created_at=10.0, priority=0),
                            task_id=TID)
    store.tasks.cancel(TID, 11.0)
    assert store.webhooks.next_webhook_due() == 11.0
    [first] = store.webhooks.claim_webhook_deliveries(12.0, 10, 60.0)
    assert first.attempts == 1
    assert store.webhooks.claim_webhook_deliveries(13.0, 10, 60.0) == []  # held
    assert store.webhooks.release_webhook_leases() == 1  # the process that held it is gone
    [second] = store.webhooks.claim_webhook_deliveries(14.0, 10, 60.0)
    assert second.attempts == 2
    assert not store.webhooks.record_webhook_try(first, Decision("DELIVERED", 15.0, None), 204,
                                    12.0)
    assert store.webhooks.record_webhook_try(second, Decision("PENDING", 99.0, "HTTP 503"), 503,
                                             14.0)
    assert store.webhooks.claim_webhook_deliveries(98.0, 10, 60.0) == []  # not due yet
    [row] = store.webhooks.webhook_deliveries(mine, 10)
    assert (row.state, row.attempts, row.next_at, row.last_status, row.last_error) == (
        "PENDING", 2, 99.0, 503, "HTTP 503")
    [third] = store.webhooks.claim_webhook_deliveries(99.0, 10, 60.0)
    assert store.webhooks.record_webhook_try(third, Decision("DELIVERED", 100.0, None), 200, 99.0)
    assert store.webhooks.next_webhook_due() is None
    [row] = store.webhooks.webhook_deliveries(mine, 10)
    assert [(t.attempt, t.at, t.status, t.error) for t in row.tries] == [
        (2, 14.0, 503, "HTTP 503"), (3, 99.0, 200, None)]  # the stale first try: none
    assert store.webhooks.prune_webhook_deliveries(before=100.5) == 1
    assert store.core._conn.execute("SELECT count(*) FROM webhook_tries").fetchone()[0] == 0


def test_deleting_a_hook_drops_its_deliveries(store: Store) -> None:
    mine = hook(store)
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user="alice", created_at=10.0, priority=0),
                            task_id=TID)
    store.tasks.cancel(TID, 11.0)
    assert store.webhooks.delete_webhook(mine) and not store.webhooks.delete_webhook(mine)
    assert store.webhooks.claim_webhook_deliveries(20.0, 10, 60.0) == []


def test_limits_and_unknown_owners(store: Store) -> None:
    for _ in range(3):
        store.webhooks.create_webhook(owner="bob", url=URL, events=ALL, fmt="slack", now=1.0,
                                      max_per_user=3)
    with pytest.raises(TooManyWebhooks, match="already has 3 webhooks"):
        store.webhooks.create_webhook(owner="bob", url=URL, events=ALL, fmt="slack", now=1.0,
                                      max_per_user=3)
    with pytest.raises(WebhookOwnerUnknown):
        store.webhooks.create_webhook(owner="ghost", url=URL, events=ALL, fmt="slack", now=1.0,
                                      max_per_user=3)
    assert len(store.webhooks.list_webhooks("bob")) == 3
    assert len(store.webhooks.list_webhooks(None)) == 3


def _plan(store: Store, name: str, params: dict) -> str:
    rows = store.core._conn.execute("EXPLAIN QUERY PLAN " + QUERIES[name], params).fetchall()
    return " | ".join(r["detail"] for r in rows)


@pytest.mark.sqlite_only("SQLite's query plans (EXPLAIN QUERY PLAN)")
def test_the_outbox_and_the_worker_read_by_index(store: Store) -> None:
    enqueue = _plan(store, "webhook_enqueue", {"event_id": 1, "event_type": "task.failed",
                                               "now": 1.0, "owner": "a", "data_json": "{}"})
    assert "USING INDEX webhooks_owner (owner=?)" in enqueue, enqueue
    claim = _plan(store, "webhook_claim", {"now": 1.0, "limit": 5, "lease_until": 2.0})
    assert "webhook_deliveries_due" in claim, claim
    assert "webhook_deliveries_due" in _plan(store, "webhook_next_due", {})
