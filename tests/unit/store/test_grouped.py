"""Group commit's policy (service/store/grouped.py) over a fake transaction: the order of
the writes, where a group splits when one fails, each caller's own answer, the turns of
the parties."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from service.store.grouped import GroupSpoiled, WriteGroups, run_grouped


class FakeTx:
    """A transaction log: what ran in which transaction, and which committed."""

    def __init__(self, commit_fails: int = 0) -> None:
        self.log: list[str] = []
        self.committed: list[list[str]] = []
        self._open: list[str] | None = None
        self.commit_fails = commit_fails  # the next this many COMMITs fail

    @contextmanager
    def together(self) -> Iterator[None]:
        self._open = []
        self.log.append("BEGIN")
        try:
            yield
            if self.commit_fails:
                self.commit_fails -= 1
                raise OSError("commit failed")
            self.log.append("COMMIT")
            self.committed.append(self._open)
        except BaseException:
            self.log.append("ROLLBACK")
            raise
        finally:
            self._open = None

    def write(self, name: str, fails: bool = False) -> Callable[[], str]:
        def call() -> str:
            if self._open is None:  # alone: a transaction of its own
                if fails:
                    raise ValueError(f"{name} refused")
                self.committed.append([name])
                return name
            if fails:
                raise GroupSpoiled(f"{name} refused") from ValueError(f"{name} refused")
            self._open.append(name)
            return name
        return call


def test_writes_that_succeed_commit_in_one_transaction_in_their_order() -> None:
    tx = FakeTx()
    out = run_grouped([tx.write(n) for n in "abcd"], tx.together)
    assert [o.get() for o in out] == list("abcd")
    assert tx.committed == [list("abcd")] and tx.log == ["BEGIN", "COMMIT"]


def test_a_failed_write_splits_the_group_before_it_alone_and_after_it() -> None:
    tx = FakeTx()
    out = run_grouped([tx.write("a"), tx.write("b"), tx.write("c", fails=True),
                       tx.write("d"), tx.write("e")], tx.together)
    assert [o.error is None for o in out] == [True, True, False, True, True]
    with pytest.raises(ValueError, match="c refused"):  # its own error, from its own run
        out[2].get()
    # the order of the commits is the order of arrival: nothing after c before c's run
    assert tx.committed == [["a", "b"], ["d", "e"]]
    assert tx.log == ["BEGIN", "ROLLBACK", "BEGIN", "COMMIT", "BEGIN", "COMMIT"]


def test_the_first_or_last_write_failing_leaves_no_empty_group() -> None:
    tx = FakeTx()
    out = run_grouped([tx.write("a", fails=True), tx.write("b"), tx.write("c"),
                       tx.write("d", fails=True)], tx.together)
    assert [o.error is None for o in out] == [False, True, True, False]
    assert tx.committed == [["b", "c"]]


def test_a_failed_commit_runs_every_write_alone() -> None:
    tx = FakeTx(commit_fails=1)
    out = run_grouped([tx.write(n) for n in "abc"], tx.together)
    assert [o.get() for o in out] == list("abc")
    assert tx.committed == [["a"], ["b"], ["c"]]


def test_one_write_runs_alone_without_a_group() -> None:
    tx = FakeTx()
    assert run_grouped([tx.write("a")], tx.together)[0].get() == "a"
    assert tx.log == [] and tx.committed == [["a"]]


def _groups(tx: FakeTx, group_max: int = 64) -> tuple[WriteGroups, list[list[str]]]:
    ran: list[list[str]] = []

    @contextmanager
    def together() -> Iterator[None]:
        with tx.together():
            yield
        ran.append(tx.committed[-1])

    return WriteGroups(together, group_max=group_max), ran


def test_a_flush_runs_what_queued_up_taking_the_parties_in_turn() -> None:
    tx = FakeTx()
    groups, ran = _groups(tx, group_max=4)
    entries = [groups.add(tx.write(f"x{i}"), "x") for i in range(5)]
    entries.append(groups.add(tx.write("y0"), "y"))
    groups.flush(entries[-1])  # y's own flush: the first group already holds y0
    assert ran == [["x0", "y0", "x1", "x2"]]
    assert [e.outcome is not None for e in entries] == [True, True, True, False, False, True]
    groups.flush(entries[3])
    assert ran[1:] == [["x3", "x4"]]
    groups.flush(entries[4])  # run already by an earlier flush: nothing more
    assert len(ran) == 2 and entries[4].outcome is not None
    assert entries[4].outcome.get() == "x4"


def test_a_flush_runs_groups_until_its_own_write_ran() -> None:
    tx = FakeTx()
    groups, ran = _groups(tx, group_max=2)
    entries = [groups.add(tx.write(f"x{i}"), "x") for i in range(5)]
    groups.flush(entries[4])
    assert ran == [["x0", "x1"], ["x2", "x3"]] and tx.committed[-1] == ["x4"]
    assert all(e.outcome is not None for e in entries)


def test_a_discarded_write_never_runs() -> None:
    tx = FakeTx()
    groups, _ = _groups(tx)
    gone = groups.add(tx.write("gone"), "x")
    kept = groups.add(tx.write("kept"), "y")
    groups.discard(gone)
    groups.flush(kept)
    assert tx.committed == [["kept"]] and gone.outcome is None
    groups.flush(gone)  # a flush whose write is gone finds nothing to run: returns
    assert tx.committed == [["kept"]] and gone.outcome is None


def test_an_outcome_raises_the_writes_own_error() -> None:
    tx = FakeTx()
    out: list[Any] = run_grouped([tx.write("a", fails=True)], tx.together)
    with pytest.raises(ValueError, match="a refused"):
        out[0].get()
