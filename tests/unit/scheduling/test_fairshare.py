"""Fair-share order and decayed usage (pure, by table)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from service.domain.reasons import Ahead, NoRoom, Reason, WaitKind
from service.scheduling.fairshare import FairOrder, Ledger, Span, decayed_usage, steady_charge
from service.scheduling.plan import Seen


@dataclass(frozen=True)
class T:
    seq: int
    user: str | None
    priority: int = 0


def _order(tasks, charges=None, total=8.0, weights=None, enabled=True, admit=()):
    """Task seqs in the order FairOrder yields them; tasks whose seq is in ``admit``
    start (1 GPU each) as they come out."""
    weights = weights or {}
    order = FairOrder(sorted(tasks, key=lambda t: (-t.priority, t.seq)), charges or {},
                      total, lambda u: weights.get(u, 1.0), enabled=enabled)
    out = []
    for task in order:
        out.append(task.seq)
        if task.seq in admit:
            order.admitted(task.user, 1.0)
    return out


A, B, C = "alice", "bob", "carol"


@pytest.mark.parametrize(("tasks", "kw", "expected"), [
    # disabled: priority then FIFO, whatever the charges
    ([T(1, A), T(2, A), T(3, B)], {"enabled": False, "charges": {A: 8}}, [1, 2, 3]),
    # equal charges: the user whose next task came first, then by share as they start
    ([T(1, A), T(2, A), T(3, B), T(4, B)], {"admit": {1, 2, 3, 4}}, [1, 3, 2, 4]),
    # nothing starts: no share changes, so the earliest heads go first
    ([T(1, A), T(2, A), T(3, B), T(4, B)], {}, [1, 2, 3, 4]),
    # alice already holds 4 of 8 GPUs: bob's tasks first
    ([T(1, A), T(2, B), T(3, B)], {"charges": {A: 4.0}}, [2, 3, 1]),
    # bob's weight 4: his share counts a quarter
    ([T(1, A), T(2, B), T(3, B)], {"charges": {A: 1.0, B: 3.0}, "weights": {B: 4.0}},
     [2, 3, 1]),
    # priority before any share
    ([T(1, A, 5), T(2, B, 0)], {"charges": {A: 8.0}}, [1, 2]),
    ([T(1, B, 0), T(2, A, 5), T(3, C, 5)], {"charges": {A: 2.0}}, [3, 2, 1]),
    # three users, one free-rider: carol's head comes when her share is the smallest
    ([T(1, A), T(2, A), T(3, A), T(4, C)], {"admit": {1, 2, 3, 4}}, [1, 4, 2, 3]),
])
def test_fair_order(tasks, kw, expected) -> None:
    assert _order(tasks, **kw) == expected


def test_shares_report_charge_share_and_weight() -> None:
    order = FairOrder([T(1, B)], {A: 2.0}, 8.0, lambda u: 2.0 if u == A else 1.0)
    shares = order.shares()
    assert set(shares) == {A, B}
    assert (shares[A].charge, shares[A].share, shares[A].weighted) == (2.0, 0.25, 0.125)
    assert shares[B].share == 0.0


def test_weighted_is_the_shares_and_follows_admissions() -> None:
    order = FairOrder([T(1, A), T(2, B)], {A: 2.0}, 8.0, lambda u: 2.0 if u == A else 1.0)
    for user in (A, B, C):
        assert order.weighted(user) == order.share(user).weighted
    order.admitted(B, 4.0)
    assert order.weighted(B) == order.share(B).weighted == 0.5


def test_seen_says_who_is_ahead_as_shares_come_up() -> None:
    """What a waiting task is behind changes as users of a smaller share come up, and an
    answer given once is not kept past that (Seen remembers its answers)."""
    seen = Seen(fair=True)
    bob_task, alice_task, carol_task = T(1, B), T(2, A), T(3, C)
    assert seen.ahead_of(bob_task, 0.5) is None
    seen.add(alice_task, 0.25)
    assert seen.ahead_of(bob_task, 0.5) == Ahead(users=(A,))
    seen.add(carol_task, 0.5)  # a tie is not "ahead"
    assert seen.ahead_of(bob_task, 0.5) == Ahead(users=(A,))
    seen.add(T(4, C), 0.125)  # carol's smallest share is now below bob's
    assert seen.ahead_of(bob_task, 0.5) == Ahead(users=(A, C))
    seen.add(T(5, A), 0.75)  # a larger share of alice's changes nothing
    assert seen.ahead_of(bob_task, 0.5) == Ahead(users=(A, C))
    seen.add(T(6, B, priority=1), 0.0)
    assert seen.ahead_of(bob_task, 0.5) == Ahead(higher_priority=True)
    assert Seen(fair=False).ahead_of(bob_task, 0.5) is None


def test_seen_gives_one_reason_value_per_reason_and_answer() -> None:
    """``behind`` hands out the same value for the same reason and answer (the applier
    tells reasons apart by identity first), a new one when the answer changes, and never
    a value made for another reason."""
    seen = Seen(fair=True)
    bob, alice = T(1, B), T(2, A)
    room = Reason(WaitKind.RESOURCES, NoRoom("1x4 GPUs", "w1: 0 GPUs"))
    other = Reason(WaitKind.RESOURCES, NoRoom("1x8 GPUs", "w1: 0 GPUs"))
    first = seen.behind(room, bob, 0.5)
    assert first == room and seen.behind(room, bob, 0.5) is first
    assert seen.behind(other, bob, 0.5) == other
    seen.add(alice, 0.25)
    later = seen.behind(room, bob, 0.5)
    assert later == room.behind(Ahead(users=(A,))) and "after users" in later.text
    assert seen.behind(room, bob, 0.5) is later
    assert first.text not in (later.text, other.text)


H = 100.0


@pytest.mark.parametrize(("spans", "now", "expected"), [
    ([], 0.0, {}),
    # 2 GPUs over one half-life, ending now: 2 * H/ln2 * (1 - 1/2)
    ([Span(A, 2, 0.0, H)], H, {A: 2 * H / math.log(2) * 0.5}),
    # the same span seen one half-life later weighs half
    ([Span(A, 2, 0.0, H)], 2 * H, {A: 2 * H / math.log(2) * 0.25}),
    # a running span (end None) counts up to now; spans after now do not count
    ([Span(B, 1, 0.0, None), Span(B, 1, 5 * H, 6 * H)], H, {B: H / math.log(2) * 0.5}),
])
def test_decayed_usage(spans, now, expected) -> None:
    got = decayed_usage(spans, now, H)
    assert set(got) == set(expected)
    for user, value in expected.items():
        assert got[user] == pytest.approx(value)


def test_ledger_steps_agree_with_the_integral() -> None:
    ledger = Ledger(H, {}, 0.0)
    ledger.advance(0.0, {A: 4})
    for t in range(10, 301, 10):  # holding 4 GPUs for 3 half-lives, in steps
        ledger.advance(float(t), {A: 4})
    exact = decayed_usage([Span(A, 4, 0.0, 300.0)], 300.0, H)[A]
    assert ledger.usage[A] == pytest.approx(exact)
    assert ledger.charges()[A] == pytest.approx(4 * (1 - 2 ** -3))  # GPU units
    assert steady_charge(4, H) == pytest.approx(4 * H / math.log(2))
    ledger.advance(300.0, {})  # from now on nothing is held: only decay
    ledger.advance(400.0, {})
    assert ledger.usage[A] == pytest.approx(exact / 2)


def test_ledger_refuses_a_half_life_of_zero() -> None:
    with pytest.raises(ValueError, match="half_life"):
        Ledger(0.0, {}, 0.0)
