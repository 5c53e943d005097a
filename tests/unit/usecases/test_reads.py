"""The read use cases the API and the console share (``usecases.reads``, ``queue``,
``cluster``, ``sessions``): what each returns, and that each is one call on a lane (a
request's number of hand-offs is the handler's to count, and stays what it was)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from service.domain.newtask import NewTask
from service.domain.rows import SessionRow, TaskRow
from service.domain.states import TaskState
from service.domain.users import Role
from service.store.aio import AsyncStore
from service.store.writer import Store
from service.usecases import cluster, queue, reads, sessions

T = TypeVar("T")
T0 = 1_000.0


@dataclass
class Counted:
    """The store's lanes, counting the calls on each."""

    lanes: AsyncStore
    calls: list[str] = field(default_factory=list)

    async def read(self, fn: Callable[[Store], T]) -> T:
        self.calls.append("read")
        return await self.lanes.read(fn)

    async def write(self, fn: Callable[[Store], T], *, grouped: bool = False) -> T:
        self.calls.append("write")
        return await self.lanes.write(fn, grouped=grouped)


@dataclass
class Deps:
    store: Counted
    sync: Store


@pytest.fixture
def deps(store_url: str) -> Iterator[Deps]:
    store = Store(store_url)
    store.users.create_user("alice", Role.USER, T0)
    lanes = AsyncStore(store)
    yield Deps(Counted(lanes), store)
    lanes.close()
    store.close()


def add(store: Store, n: int) -> str:
    return store.tasks.create_task(NewTask(
        id_prefix="", workload="ppo", text=f"raw: {n}\n", spec={"n": n}, nnodes=1,
        n_gpus_per_node=1, user="alice", created_at=T0 + n, priority=0), task_id=f"t{n}")


async def test_a_list_page_is_read_and_rendered_in_one_read(deps: Deps) -> None:
    ids = [add(deps.sync, n) for n in range(3)]

    def render(tasks: list[TaskRow], next_before: int | None, waits: dict[str, str]) -> Any:
        return [t.task_id for t in tasks], next_before is not None, waits

    shown, more, waits = await queue.task_page(deps, render, state=TaskState.QUEUED,
                                               limit=2, user="alice")
    assert shown == ids[::-1][:2] and more and waits == {}
    assert deps.store.calls == ["read"]


async def test_each_read_of_a_task_is_one_read(deps: Deps) -> None:
    task_id = add(deps.sync, 1)
    assert (await reads.task(deps, task_id)).task_id == task_id
    assert await reads.task(deps, "nope") is None
    assert await reads.user_exists(deps, "alice") and not await reads.user_exists(deps, "bob")
    assert await reads.attempts(deps, task_id) == []
    assert await reads.attempt(deps, task_id, None) is None
    assert [e.task_id for e in await reads.events(deps, task_id)] == [task_id]
    assert await reads.jobspec(deps, task_id) == "raw: 1\n"
    assert await reads.task_progress(deps, task_id) is None
    assert await reads.active_progress(deps) == {}
    assert await reads.metric_keys(deps, task_id) == []
    assert await reads.metric_points(deps, task_id, ["loss"]) == []
    assert isinstance(await reads.change_seq(deps), int)
    assert deps.store.calls == ["read"] * 13


async def test_the_queue_and_the_charts_reads(deps: Deps) -> None:
    task_id = add(deps.sync, 1)
    pending, running = await queue.waiting_and_active(deps, None, limit=10, offset=0,
                                                      reason=None)
    assert [t.task_id for t in pending] == [task_id] and running == []
    assert await queue.blocked(deps, 10) == []
    assert (await queue.counts_by_state(deps))["QUEUED"] == 1
    rows, total = await queue.pending_page(deps, user=None, workload=None, offset=0,
                                           limit=10, reason=None)
    assert total == 1 and len(rows) == 1
    assert await queue.active_tasks(deps) == []
    assert await queue.recent_finished(deps, 5, None) == []
    assert await queue.pending_workloads(deps) == ["ppo"]
    assert await cluster.samples_since(deps, 0.0) == []
    assert await cluster.gpu_seconds(deps, 0.0, T0, T0) == {}
    assert deps.store.calls == ["read"] * 9


async def test_a_session_is_created_read_and_ended(deps: Deps) -> None:
    row = SessionRow(user="alice", token_id=None, token_fp="fp", csrf="c", created_at=T0,
                     expires_at=T0 + 60)
    await sessions.create_session(deps, "k" * 64, row, T0, 0)
    assert await sessions.session(deps, "k" * 64) == row
    await sessions.end_session(deps, "k" * 64)
    assert await sessions.session(deps, "k" * 64) is None
    assert await sessions.token_auth(deps, "nope") is None
    assert deps.store.calls == ["write", "read", "write", "read", "read"]
