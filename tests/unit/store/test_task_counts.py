"""The trigger-kept task counts (migration 0011, ``task_counts``) stay equal to counting
the tasks table, whatever moves a task: creation, a state change, adoption of ownerless
tasks by the default user, deletion."""

from __future__ import annotations

from service.domain.states import TaskState
from service.store.writer import BulkTask, Store

T0 = 1_766_000_000.0


def _counted(store: Store) -> dict[tuple[str | None, str], int]:
    rows = store.core._conn.execute("SELECT user, state, count(*) AS n FROM tasks "
                                    "GROUP BY user, state").fetchall()
    return {(r["user"], r["state"]): r["n"] for r in rows}


def _by_state(store: Store) -> dict[str, int]:
    out = {s.value: 0 for s in TaskState}
    for (_, state), n in _counted(store).items():
        out[state] += n
    return out


def test_counts_follow_every_change_of_the_tasks_table(store_url: str) -> None:
    store = Store(store_url)
    try:
        states = [TaskState.QUEUED, TaskState.SUCCEEDED, TaskState.FAILED, TaskState.RUNNING]
        store.tasks.bulk_load(BulkTask(task_id=f"mvp2-ppo-20251223-000000-{i:04x}", workload="ppo",
                                       state=states[i % 4], created_at=T0 + i,
                                       user=None if i % 3 == 0 else f"u{i % 2}")
                        for i in range(40))
        assert store.tasks.counts_by_user_and_state() == _counted(store)
        assert store.tasks.counts_by_state() == _by_state(store)
        with store.core.tx() as conn:
            conn.execute("UPDATE tasks SET state = 'CANCELED' WHERE state = 'QUEUED'")
            conn.execute("UPDATE tasks SET user = 'u1' WHERE task_id LIKE '%0003'")
            conn.execute("DELETE FROM tasks WHERE task_id LIKE '%0004'")
        assert store.tasks.counts_by_user_and_state() == _counted(store)
        store.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=T0)
        assert (None, "RUNNING") not in store.tasks.counts_by_user_and_state()
        assert store.tasks.counts_by_user_and_state() == _counted(store)
        assert store.tasks.counts_by_state() == _by_state(store)
        assert sum(store.tasks.counts_by_state().values()) == 39
    finally:
        store.close()
