"""The nodes' stored states: guarded cordon, drain, resume, each with its node event."""

from __future__ import annotations

import pytest

from service.domain.nodes import NodeSource, NodeStateKind
from service.policy.quarantine import Evidence
from service.store.nodes import NodeStateConflict
from service.store.writer import Store

OP = NodeSource.OPERATOR


@pytest.fixture
def store(store_url: str) -> Store:
    s = Store(store_url)
    yield s
    s.close()


def test_cordon_drain_resume_and_their_events(store: Store) -> None:
    store.nodes.cordon("w1", OP, "root", 10.0, "bad fan")
    store.nodes.drain("w1", "root", 11.0, "replace it")
    row = store.nodes.state("w1")
    assert row is not None and (row.state, row.by, row.at, row.reason) == (
        NodeStateKind.DRAINED, "root", 11.0, "replace it")
    lifted = store.nodes.resume("w1", None, "ops", 12.0, "done")
    assert lifted.state is NodeStateKind.DRAINED
    assert store.nodes.state("w1") is None and store.nodes.states() == []
    assert [(e.kind.value, e.by, e.reason) for e in store.nodes.events("w1")] == [
        ("NODE_CORDONED", "root", "bad fan"), ("NODE_DRAINED", "root", "replace it"),
        ("NODE_RESUMED", "ops", "done")]


def test_a_drain_of_a_node_not_cordoned_cordons_it(store: Store) -> None:
    store.nodes.drain("w2", "root", 1.0, "move racks")
    assert store.nodes.state("w2").state is NodeStateKind.DRAINED


def test_refusals_write_nothing(store: Store) -> None:
    store.nodes.cordon("w1", OP, "root", 1.0, "first")
    with pytest.raises(NodeStateConflict, match=r"already cordoned \(by root: first\)"):
        store.nodes.cordon("w1", OP, "bob", 2.0, "second")
    store.nodes.drain("w1", "root", 3.0, "d")
    with pytest.raises(NodeStateConflict, match="already drained"):
        store.nodes.drain("w1", "root", 4.0, "again")
    with pytest.raises(NodeStateConflict, match="w9 is not cordoned"):
        store.nodes.resume("w9", None, "root", 5.0, "")
    with pytest.raises(NodeStateConflict, match="by operator"):
        store.nodes.resume("w1", NodeSource.HEALTH, None, 6.0, "healthy")
    assert store.nodes.state("w1").reason == "d"
    assert len(store.nodes.events("w1")) == 2 and store.nodes.events("w9") == []


def test_a_drain_with_requeue_is_stored_and_a_drain_without_it_upgraded(store: Store) -> None:
    store.nodes.drain("w1", "root", 1.0, "swap")
    assert store.nodes.state("w1").requeue is False
    row = store.nodes.drain("w1", "ops", 2.0, "replacing GPU 3", requeue=True)
    assert store.nodes.state("w1") == row and (row.requeue, row.by) == (True, "ops")
    for requeue in (True, False):  # drained with requeue already: nothing to upgrade
        with pytest.raises(NodeStateConflict, match="already drained with requeue"):
            store.nodes.drain("w1", "x", 3.0, "again", requeue=requeue)
    assert store.nodes.states() == [row]
    store.nodes.resume("w1", None, "ops", 4.0, "done")
    store.nodes.cordon("w1", OP, "root", 5.0, "look")
    assert store.nodes.drain("w1", "root", 6.0, "bad", requeue=True).requeue is True
    assert [e.kind.value for e in store.nodes.events("w1")] == [
        "NODE_DRAINED", "NODE_DRAINED", "NODE_RESUMED", "NODE_CORDONED", "NODE_DRAINED"]


def test_the_quarantines_evidence_is_kept_per_node_and_dropped_out_of_the_window(
        store: Store) -> None:
    first = Evidence("t-1", 1, 100.0, "Xid 79: GPU has fallen off the bus")
    store.nodes.add_evidence(["w1", "w2"], first, since=0.0)
    store.nodes.add_evidence(["w1"], first, since=0.0)  # once per attempt and node
    assert store.nodes.evidence_since(0.0) == [("w1", first), ("w2", first)]
    later = Evidence("t-2", 3, 250.0, "CUDA error: uncorrectable ECC error")
    store.nodes.add_evidence(["w1"], later, since=150.0)  # the window: from 150 on
    assert store.nodes.evidence_since(0.0) == [("w1", later)]
    assert store.nodes.evidence_since(251.0) == []
