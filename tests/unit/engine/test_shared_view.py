"""The leader's view shared with the standbys (service/engine/shared_view.py): what is
written reads back the same, the leader publishes at most every second and only what
changed (or every 5 s), a standby adopts only a newer view and ignores one it cannot
read; on both engines the rows go through the store."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from service.cluster.boundary import ClusterSnapshot, NodeResources
from service.domain.lease import LEADER, Instance, LeaseRow, PublishedView
from service.domain.reasons import Planned
from service.engine.observed import Observed, Seen
from service.engine.shared_view import (
    PUBLISH_EVERY_S,
    REFRESH_S,
    ViewFollower,
    ViewPublisher,
    view_json,
    view_of,
)
from service.policy.nodehealth import HealthReport
from service.scheduling.fairshare import Share
from service.store.core import Deposed
from service.store.writer import Store

LEASE = LeaseRow(LEADER, Instance("h1:7:abc", "h1", 7, "h1:8080"), 3, 0.0, 0.0, 10.0)
SNAP = ClusterSnapshot(
    nodes=(NodeResources("n1" * 14, "10.0.0.1", {"GPU": 2.0, "CPU": 8.0},
                         {"GPU": 4.0, "CPU": 16.0}, "w1"),
           NodeResources("n2" * 14, "10.0.0.2", {}, None, "")),
    held_gpus={"sub-1": 2.0}, pending_pg_since={"sub-2": 99.5},
    held_on={"sub-1": {"n1" * 14: 2.0}})
HEALTH = {"w1": HealthReport("w1", False, "gpu 2: xid 79", 98.0, 30.0)}


def seen(at: float = 100.0, free: float = 2.0) -> Seen:
    nodes = (NodeResources("n1" * 14, "10.0.0.1", {"GPU": free}, {"GPU": 4.0}, "w1"),)
    return Seen(at, ClusterSnapshot(nodes=nodes), None,
                {"alice": Share(2.0, 0.5, 1.0), None: Share(0.0, 0.0, 1.0)},
                {"t-1": Planned(160.0, 130.0), "t-2": Planned(220.0)})


def test_a_view_reads_back_as_it_was_written() -> None:
    full = Seen(100.0, SNAP, None, {"alice": Share(2.0, 0.5, 2.0), None: Share(1.0, 0.25, 1.0)},
                {"t-1": Planned(160.0, 130.0), "t-2": Planned(220.0)})
    back, health = view_of(view_json(full, HEALTH), 100.0)
    assert back == full and health == HEALTH
    down = Seen(50.0, None, "ray: connection refused")
    assert view_of(view_json(down, {}), 50.0) == (down, {})


@pytest.mark.parametrize("text", ["not json", '{"version": 2}', '{"version": 1}',
                                  '{"version": 1, "snapshot": null, "unreachable": null, '
                                  '"shares": [["a", 1]], "estimates": {}, "health": []}'])
def test_a_view_of_another_shape_is_refused(text: str) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        view_of(text, 1.0)


class Views:
    """The lease store's view rows, in memory."""

    def __init__(self) -> None:
        self.row: PublishedView | None = None
        self.writes = 0
        self.fail: Exception | None = None

    def publish_view(self, name: str, view: PublishedView) -> None:
        if self.fail is not None:
            raise self.fail
        self.row, self.writes = view, self.writes + 1

    def view_since(self, name: str, at: float) -> PublishedView | None:
        return self.row if self.row is not None and self.row.at > at else None


def test_the_leader_publishes_at_most_every_second_and_what_changed() -> None:
    views, observed = Views(), Observed()
    publisher = ViewPublisher(views, observed, lambda: LEASE)
    publisher.after_tick(100.0)  # nothing seen yet
    assert views.writes == 0
    observed.record(100.0, seen().snapshot, seen().shares, seen().estimates)
    publisher.after_tick(100.0)
    assert views.writes == 1 and views.row is not None
    assert (views.row.holder, views.row.epoch, views.row.at) == ("h1:7:abc", 3, 100.0)
    observed.record(100.5, seen(free=1.0).snapshot, seen().shares, seen().estimates)
    publisher.after_tick(100.5)  # changed, but within the second
    assert views.writes == 1
    publisher.after_tick(100.0 + PUBLISH_EVERY_S)
    assert views.writes == 2 and views.row.at == 100.5
    observed.record(102.0, seen(free=1.0).snapshot, seen().shares, seen().estimates)
    publisher.after_tick(102.0)  # the same view but for its time: kept until REFRESH_S
    assert views.writes == 2
    observed.record(101.0 + REFRESH_S, seen(free=1.0).snapshot, seen().shares,
                    seen().estimates)
    publisher.after_tick(101.0 + REFRESH_S)
    assert views.writes == 3 and views.row.at == 101.0 + REFRESH_S


def test_no_lease_publishes_nothing_and_a_failed_publish_is_tried_again(
        caplog: pytest.LogCaptureFixture) -> None:
    views, observed = Views(), Observed()
    lease: list[LeaseRow | None] = [None]
    publisher = ViewPublisher(views, observed, lambda: lease[0])
    observed.record(100.0, seen().snapshot)
    publisher.after_tick(100.0)
    assert views.writes == 0
    lease[0] = LEASE
    views.fail = OSError("disk I/O error")
    with caplog.at_level(logging.ERROR):
        publisher.after_tick(100.0)  # never raises into the tick
    assert views.writes == 0 and "publishing the leader's view failed" in caplog.text
    views.fail = None
    publisher.after_tick(100.1)  # not held back by the failed one
    assert views.writes == 1


def test_a_deposed_leaders_publish_ends_its_loop_like_any_of_its_writes() -> None:
    views, observed = Views(), Observed()
    observed.record(100.0, seen().snapshot)
    views.fail = Deposed("the leader's lease moved on")
    with pytest.raises(Deposed):
        ViewPublisher(views, observed, lambda: LEASE).after_tick(100.0)


def test_a_standby_adopts_a_newer_view_only() -> None:
    views, leader, standby = Views(), Observed(), Observed()
    publisher = ViewPublisher(views, leader, lambda: LEASE)
    follower = ViewFollower(views, standby)
    assert not follower.follow() and standby.last is None
    leader.record(100.0, seen().snapshot, seen().shares, seen().estimates)
    leader.record_health(HEALTH)
    publisher.after_tick(100.0)
    assert follower.follow()
    assert standby.last == leader.last and standby.health == HEALTH
    assert standby.estimate("t-1") == Planned(160.0, 130.0)
    assert not follower.follow()  # nothing newer


def test_a_view_this_code_cannot_read_is_ignored_and_told_once(
        caplog: pytest.LogCaptureFixture) -> None:
    views, standby = Views(), Observed()
    follower = ViewFollower(views, standby)
    views.row = PublishedView("h9:1:new", 4, 50.0, '{"version": 9}')
    with caplog.at_level(logging.WARNING):
        assert not follower.follow()
        views.row = PublishedView("h9:1:new", 4, 51.0, '{"version": 9}')
        assert not follower.follow()
    assert standby.last is None
    assert caplog.text.count("is not one this code reads") == 1


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store(store_url)
    yield s
    s.close()


def test_the_view_row_is_replaced_and_read_when_newer(store: Store) -> None:
    assert store.lease.view_since(LEADER, float("-inf")) is None
    first = PublishedView("h1:7:abc", 3, 100.0, view_json(seen(), HEALTH))
    store.lease.publish_view(LEADER, first)
    assert store.lease.view_since(LEADER, float("-inf")) == first
    assert store.lease.view_since(LEADER, 100.0) is None
    second = PublishedView("h2:8:def", 4, 101.5, view_json(seen(101.5, 0.0), {}))
    store.lease.publish_view(LEADER, second)
    assert store.lease.view_since(LEADER, 100.0) == second
    standby = Observed()
    assert ViewFollower(store.lease, standby).follow()
    assert standby.last == seen(101.5, 0.0)
