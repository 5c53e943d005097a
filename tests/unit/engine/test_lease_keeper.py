"""The database lease (issue 54): one instance per SQLite database, the leader election on
PostgreSQL. The store's guarded writes, the keeper's take, refusal, wait, renewal, loss
and release, a standby's take-over, and the fence on a deposed leader's writes, on an
injected clock and on both engines."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.domain.lease import LEADER, Instance, LeaseRow, fence_of, free_to_take
from service.domain.users import Role
from service.engine.lease_keeper import LeaseHeld, LeaseKeeper
from service.store.core import Deposed
from service.store.lease import LeaseLost
from service.store.writer import Store

TTL = 15.0
ME = Instance("box:100:aaaaaa", "box", 100, "box:8080")
OTHER = Instance("box:200:bbbbbb", "box", 200, "box:8081")
REMOTE = Instance("far:300:cccccc", "far", 300, "far:8080")


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store(store_url)
    yield s
    s.close()


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def keeper(store: Store, clock: Clock, me: Instance = ME, *, alive: bool = True,
           lost: list[str] | None = None, standby: bool = False) -> LeaseKeeper:
    return LeaseKeeper(store.lease, me, TTL, standby=standby, clock=clock, wait=clock.wait,
                       alive=lambda pid: alive,
                       on_lost=None if lost is None else lost.append)


def test_the_store_guards_every_change_by_holder_and_epoch(store: Store) -> None:
    first = store.lease.take(LEADER, OTHER, None, 10.0, TTL)
    assert (first.epoch, first.holder, first.expires_at) == (1, OTHER, 25.0)
    with pytest.raises(LeaseLost):  # someone inserted first
        store.lease.take(LEADER, ME, None, 11.0, TTL)
    mine = store.lease.take(LEADER, ME, first, 30.0, TTL)
    assert (mine.epoch, mine.holder, mine.acquired_at) == (2, ME, 30.0)
    with pytest.raises(LeaseLost):  # a take from what was read before: the row moved
        store.lease.take(LEADER, OTHER, first, 31.0, TTL)
    with pytest.raises(LeaseLost) as deposed:  # the former holder renews nothing
        store.lease.renew(first, 32.0, TTL)
    assert deposed.value.current is not None and deposed.value.current.holder == ME
    assert store.lease.renew(mine, 33.0, TTL).expires_at == 48.0
    assert store.lease.release(first, 34.0) is False
    assert store.lease.release(mine, 34.0) is True
    assert store.lease.get(LEADER).expires_at == 34.0


def test_free_to_take() -> None:
    assert free_to_take(None, ME, 0.0, None)
    live = LeaseRow(LEADER, OTHER, 3, 0.0, 5.0, 20.0)
    assert not free_to_take(live, ME, 10.0, True)
    assert free_to_take(live, ME, 10.0, False)  # its pid is gone from this host
    assert free_to_take(live, ME, 20.0, True)  # expired
    remote = LeaseRow(LEADER, REMOTE, 3, 0.0, 5.0, 20.0)
    assert not free_to_take(remote, ME, 10.0, None)


def test_a_fresh_database_is_taken_at_once(store: Store) -> None:
    clock = Clock()
    row = keeper(store, clock).acquire()
    assert (row.epoch, row.holder, clock.waits) == (1, ME, [])


def test_a_live_renewed_lease_refuses_with_the_holder_named(store: Store) -> None:
    clock = Clock()
    held = store.lease.take(LEADER, OTHER, None, clock.now, TTL)
    k = keeper(store, clock)

    def renewing_wait(seconds: float) -> None:  # the holder renews while we wait
        clock.wait(seconds)
        store.lease.renew(held, clock.now, TTL)

    k.wait = renewing_wait
    with pytest.raises(LeaseHeld) as refused:
        k.acquire()
    message = str(refused.value)
    assert OTHER.holder in message and "pid 200 on box" in message and "box:8081" in message
    assert clock.waits == [TTL / 3]  # one look at whether it is renewed, no more
    assert store.lease.get(LEADER).holder == OTHER


def test_a_lease_not_renewed_is_waited_for_then_taken(store: Store) -> None:
    clock = Clock()
    store.lease.take(LEADER, REMOTE, None, clock.now - 5.0, TTL)  # 10 s left
    row = keeper(store, clock).acquire()
    assert (row.holder, row.epoch) == (ME, 2)
    assert 10.0 <= sum(clock.waits) <= 10.0 + TTL / 3


def test_a_dead_holder_on_this_host_is_taken_over_at_once(store: Store) -> None:
    clock = Clock()
    store.lease.take(LEADER, OTHER, None, clock.now, TTL)
    row = keeper(store, clock, alive=False).acquire()
    assert (row.holder, row.epoch, clock.waits) == (ME, 2, [])


def test_a_former_start_with_this_very_pid_is_taken_over_at_once(store: Store) -> None:
    """A restarted container: the same host name and pid, another start."""
    clock = Clock()
    before = Instance("box:100:000000", "box", 100, "box:8080")
    store.lease.take(LEADER, before, None, clock.now, TTL)
    row = keeper(store, clock, alive=True).acquire()
    assert (row.holder, row.epoch, clock.waits) == (ME, 2, [])


def test_a_lease_held_for_long_refuses_without_waiting(store: Store) -> None:
    clock = Clock()
    store.lease.take(LEADER, REMOTE, None, clock.now, 3600.0)
    with pytest.raises(LeaseHeld, match="far:8080"):
        keeper(store, clock).acquire()
    assert clock.waits == []


def test_renewal_then_loss_then_release(store: Store) -> None:
    clock = Clock()
    lost: list[str] = []
    k = keeper(store, clock, lost=lost)
    first = k.acquire()
    clock.now += 5
    assert k.renew_once() and k.lease.expires_at == clock.now + TTL
    clock.now += TTL + 1  # missed its renewals: another instance takes it
    store.lease.take(LEADER, OTHER, store.lease.get(LEADER), clock.now, TTL)
    assert k.renew_once() is False
    assert k.lost == f"the database lease was taken over by {OTHER.holder}" and lost == [k.lost]
    k.stop()  # nothing to release: it is not ours
    assert store.lease.get(LEADER).holder == OTHER
    assert first.epoch == 1 and store.lease.get(LEADER).epoch == 2


def test_a_clean_stop_lets_the_next_start_take_it_at_once(store: Store) -> None:
    clock = Clock()
    k = keeper(store, clock)
    k.acquire()
    k.stop()
    nxt = Clock(clock.now + 1)
    row = keeper(store, nxt, OTHER).acquire()
    assert (row.holder, row.epoch, nxt.waits) == (OTHER, 2, [])


def test_a_second_instance_stands_by_then_takes_over_a_lease_left_to_expire(
        store: Store) -> None:
    """PostgreSQL: the second instance serves as a standby (no refusal, no wait) and takes
    the lease once its leader stopped renewing it on another host."""
    clock = Clock()
    leader = keeper(store, clock, REMOTE)
    leader.acquire()
    standby = keeper(store, clock, ME, standby=True)
    assert standby.acquire() is None and clock.waits == []
    assert not standby.leading and standby.seen.holder == REMOTE
    clock.now += TTL / 3
    assert leader.renew_once()
    clock.now += TTL - 0.1  # renewed TTL/3 ago... and now silent: not yet expired
    assert standby.try_take() is False and standby.seen.holder == REMOTE
    clock.now += 0.2
    assert standby.try_take() is True
    assert standby.leading and (standby.lease.holder, standby.lease.epoch) == (ME, 2)
    assert leader.renew_once() is False and not leader.leading  # the old leader stops


def test_a_standby_on_the_leaders_host_takes_over_at_once_when_its_pid_is_gone(
        store: Store) -> None:
    clock = Clock()
    keeper(store, clock, OTHER).acquire()
    standby = keeper(store, clock, ME, standby=True, alive=False)
    assert standby.acquire() is not None and standby.leading and clock.waits == []


def test_a_deposed_leaders_fenced_write_is_refused_and_nothing_of_it_is_applied(
        store: Store, store_url: str) -> None:
    """A singleton's thread is fenced by its leader's term: once another instance took
    the lease (a new epoch), its writes roll back with ``Deposed``, and the keeper is
    told once; the same thread unfenced writes again."""
    clock = Clock()
    lost: list[str] = []
    k = keeper(store, clock, lost=lost)
    row = k.acquire()
    store.core.fence_thread(fence_of(row), k.lose)
    try:
        store.users.create_user("alice", Role.USER, clock.now)  # our term: applied
        clock.now += TTL + 1
        other = Store(store_url)  # the new leader, its own connection
        try:
            other.lease.take(LEADER, REMOTE, other.lease.get(LEADER), clock.now, TTL)
        finally:
            other.close()
        with pytest.raises(Deposed, match="epoch 1 of box:100:aaaaaa is over"):
            store.users.create_user("bob", Role.USER, clock.now)
        with pytest.raises(Deposed):  # every later write too; the keeper was told once
            store.users.create_user("carol", Role.USER, clock.now)
        assert k.lost is not None and "far:300:cccccc holds epoch 2" in k.lost
        assert lost == [k.lost]
        assert [u.name for u in store.users.list_users()] == ["alice"]
    finally:
        store.core.fence_thread(None)
    store.users.create_user("dave", Role.USER, clock.now)  # an API write: never fenced
    assert {u.name for u in store.users.list_users()} == {"alice", "dave"}
