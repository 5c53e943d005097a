"""The transition table: every allowed and every forbidden move, in the table and in SQL."""

from __future__ import annotations

import itertools

import pytest

from service.domain.newtask import NewTask
from service.domain.states import (
    ALLOWED,
    TERMINAL,
    InvalidTransition,
    TaskState,
    can_transition,
    check_transition,
)
from service.store.writer import StaleState, Store

S = TaskState
EXPECTED = {
    (S.BLOCKED, S.QUEUED), (S.BLOCKED, S.CANCELED),
    (S.QUEUED, S.PENDING_RESOURCES), (S.QUEUED, S.SUBMITTING), (S.QUEUED, S.CANCELED),
    (S.PENDING_RESOURCES, S.SUBMITTING), (S.PENDING_RESOURCES, S.CANCELED),
    (S.SUBMITTING, S.SUBMITTED), (S.SUBMITTING, S.PENDING_RESOURCES),
    (S.SUBMITTING, S.FAILED),
    (S.SUBMITTED, S.RUNNING), (S.SUBMITTED, S.SUCCEEDED), (S.SUBMITTED, S.FAILED),
    (S.SUBMITTED, S.PENDING_RESOURCES), (S.SUBMITTED, S.CANCELED),
    (S.RUNNING, S.SUCCEEDED), (S.RUNNING, S.FAILED), (S.RUNNING, S.PENDING_RESOURCES),
    (S.RUNNING, S.CANCELED),
}
PAIRS = list(itertools.product(TaskState, TaskState))
TID = "mvp2-ppo-20251223-143201-7f3a"


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_table(src: TaskState, dst: TaskState) -> None:
    allowed = (src, dst) in EXPECTED
    assert can_transition(src, dst) is allowed
    if allowed:
        check_transition(src, dst)
    else:
        with pytest.raises(InvalidTransition, match=f"{src} -> {dst}"):
            check_transition(src, dst)


def test_terminal_states_have_no_exit() -> None:
    assert {s for s in TaskState if s.is_terminal()} == TERMINAL
    assert all(not ALLOWED[s] for s in TERMINAL)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    s = Store(str(tmp_path_factory.mktemp("states") / "db.sqlite3"))
    yield s
    s.close()


def _put(store: Store, state: TaskState) -> None:
    """Force the row into ``state`` (test set-up only, through the store's connection)."""
    if not store.tasks.task_exists(TID):
        store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="", spec={}, nnodes=1,
                                        n_gpus_per_node=1, user=None, created_at=0.0, priority=0),
                                task_id=TID)
    with store.core.tx() as conn:
        conn.execute("UPDATE tasks SET state = ? WHERE task_id = ?", (state.value, TID))


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_guarded_write(store: Store, src: TaskState, dst: TaskState) -> None:
    """The store's CAS applies allowed moves, refuses forbidden ones, and never moves a
    row that is not in the expected state."""
    _put(store, src)
    if (src, dst) in EXPECTED:
        with store.core.tx() as conn:
            store.core.transition(conn, TID, src, dst, 1.0)
        assert store.tasks.get_task(TID).state is dst
        # Replaying the same move now finds the row elsewhere: StaleState, no overwrite.
        if src != dst:
            with pytest.raises(StaleState), store.core.tx() as conn:
                store.core.transition(conn, TID, src, dst, 2.0)
    else:
        with pytest.raises(InvalidTransition), store.core.tx() as conn:
            store.core.transition(conn, TID, src, dst, 1.0)
        assert store.tasks.get_task(TID).state is src
