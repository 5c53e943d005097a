"""Node events as webhook deliveries: written in the node event's own transaction, to the
hooks of enabled admins that follow the event's type, never to a user's hook."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.domain.nodes import NodeEventKind, NodeSource
from service.store import nodes as node_store
from service.store.nodes import NodeStateConflict
from service.store.writer import Store
from service.webhooks.events import ADMIN_ONLY, EventType, node_event_type

URL = "https://93.184.215.14/hook"
NODE_TYPES = sorted(t.value for t in ADMIN_ONLY)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(str(tmp_path / "db.sqlite3"))
    s.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=1.0)
    s.users.create_user("alice", "user", 1.0)
    s.users.create_user("ops", "admin", 1.0)
    yield s
    s.close()


def hook(store: Store, owner: str, events: list[str]) -> str:
    return store.webhooks.create_webhook(owner=owner, url=URL, events=events, fmt="standard",
                                         now=2.0, max_per_user=10).hook_id


def sent(store: Store) -> dict[str, list[tuple[str, dict]]]:
    """Every pending delivery by hook, oldest first (claimed, so call it once)."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for c in store.webhooks.claim_webhook_deliveries(1e9, 1000, 60.0):
        out.setdefault(c.hook.hook_id, []).append((c.event_type, json.loads(c.data_json)))
    return out


def test_every_node_event_kind_has_an_admin_only_webhook_type() -> None:
    for kind in NodeEventKind:
        assert node_event_type(kind) in ADMIN_ONLY
        assert node_event_type(kind).value == "node." + kind.value[5:].lower()
    assert len(ADMIN_ONLY) == len(NodeEventKind)
    assert not {t for t in EventType if t.value.startswith("task.")} & ADMIN_ONLY


def test_admins_hooks_get_node_events_users_hooks_never(store: Store) -> None:
    admin_all = hook(store, "admin", NODE_TYPES)
    ops_resume = hook(store, "ops", ["node.resumed"])
    alice_all = hook(store, "alice", [t.value for t in EventType])  # the store lets it be
    store.nodes.cordon("gpu-07", NodeSource.OPERATOR, "ops", 10.0, "fan")
    store.nodes.drain("gpu-07", "ops", 11.0, "swap GPU 3")
    store.nodes.resume("gpu-07", None, "admin", 12.0, "fixed")
    store.nodes.cordon("gpu-08", NodeSource.QUARANTINE, None, 13.0, "3 CUDA errors")
    by_hook = sent(store)
    got = by_hook[admin_all]
    assert [t for t, _ in got] == ["node.cordoned", "node.drained", "node.resumed",
                                   "node.cordoned"]
    first = got[0][1]
    assert {k: first[k] for k in ("node", "kind", "source", "by", "reason")} == {
        "node": "gpu-07", "kind": "NODE_CORDONED", "source": "operator", "by": "ops",
        "reason": "fan"}
    assert first["at"].startswith("1970-01-01T00:00:10")
    assert got[3][1]["source"] == "quarantine" and got[3][1]["by"] is None
    assert [t for t, _ in by_hook[ops_resume]] == ["node.resumed"]
    assert alice_all not in by_hook


def test_a_disabled_admins_hooks_get_nothing(store: Store) -> None:
    ops = hook(store, "ops", NODE_TYPES)
    store.users.set_user_enabled("ops", False, 5.0)
    store.nodes.cordon("w1", NodeSource.HEALTH, None, 10.0, "nvidia-smi sees 7 of 8 GPUs")
    assert ops not in sent(store)


def test_a_refused_change_enqueues_nothing(store: Store) -> None:
    admin = hook(store, "admin", NODE_TYPES)
    store.nodes.cordon("w1", NodeSource.OPERATOR, "admin", 10.0, "first")
    with pytest.raises(NodeStateConflict):
        store.nodes.cordon("w1", NodeSource.OPERATOR, "admin", 11.0, "second")
    assert len(sent(store)[admin]) == 1


def test_the_event_and_its_deliveries_commit_together(store: Store,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    hook(store, "admin", NODE_TYPES)

    def broken(*_args: object) -> None:
        raise RuntimeError("outbox down")

    monkeypatch.setattr(node_store, "enqueue_node", broken)
    with pytest.raises(RuntimeError, match="outbox down"):
        store.nodes.cordon("w1", NodeSource.OPERATOR, "admin", 10.0, "fan")
    assert store.nodes.state("w1") is None and store.nodes.events("w1") == []
    assert sent(store) == {}


def test_observed_counts_events_by_kind_and_source(store: Store) -> None:
    store.nodes.cordon("w1", NodeSource.OPERATOR, "admin", 1.0, "a")
    store.nodes.resume("w1", None, "admin", 2.0, "")
    store.nodes.cordon("w1", NodeSource.HEALTH, None, 3.0, "b")
    store.nodes.cordon("w2", NodeSource.HEALTH, None, 4.0, "c")
    states, counts, last = store.nodes.observed()
    assert sorted(s.name for s in states) == ["w1", "w2"]
    assert counts == {("NODE_CORDONED", "operator"): 1, ("NODE_RESUMED", "operator"): 1,
                      ("NODE_CORDONED", "health"): 2}
    assert store.nodes.observed(last)[1:] == ({}, last)  # nothing new since
    store.nodes.resume("w2", None, "admin", 5.0, "")
    assert store.nodes.observed(last)[1:] == ({("NODE_RESUMED", "operator"): 1}, last + 1)


def test_latest_events_newest_first_up_to_the_limit(store: Store) -> None:
    for i in range(3):
        store.nodes.cordon("w1", NodeSource.OPERATOR, "admin", 10.0 + 2 * i, f"c{i}")
        store.nodes.resume("w1", None, "admin", 11.0 + 2 * i, f"r{i}")
    store.nodes.cordon("w2", NodeSource.OPERATOR, "admin", 30.0, "other")
    assert [e.reason for e in store.nodes.latest_events("w1", 3)] == ["r2", "c2", "r1"]
    assert store.nodes.latest_events("nope", 3) == []
