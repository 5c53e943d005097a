"""The store for coroutines: every call runs on the store's own threads, never on the loop.

A SQLite call blocks: a write waits for the one writer lock (a scheduler tick may hold
it) and then for the commit, and every query costs CPU time. An aiohttp handler awaits
these methods instead, and the event loop serves other requests meanwhile.

* Reads run on ``READ_THREADS`` threads, each with a reading connection of its own
  (``service.store.reads``): a read never waits for a write. One party (a user) uses at
  most all of them but one at a time (``offload``'s fair share), so a user's slow reads
  leave a thread to everyone else.
* Reads whose cost grows with a time window (usage over all history) run on a lane of
  their own (``HEAVY_THREADS``, one call per party at a time): they never hold the
  ordinary read threads, and one user's burst of them runs one at a time.
* Writes run on one thread: they take the store's writer lock in turn anyway, one thread
  keeps a burst of submissions from piling threads up on that lock, and a task id found
  free (``create_task``) is still free when it is inserted.

Both are ``offload.Offload`` lanes (a cheaper hand-off than ``run_in_executor``).

Each method looks the store's method up when it is called, so a test can replace one on
the ``Store`` it handed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from service.domain.ids import new_task_id
from service.domain.progress import Point
from service.domain.reasons import WaitKind
from service.domain.rows import (
    AttemptRow,
    CreatedToken,
    DeliveryRow,
    EventRow,
    PendingRow,
    ProgressRow,
    SessionRow,
    TaskRow,
    TokenAuth,
    TokenRow,
    UserRow,
    UserStatusChange,
    WebhookRow,
)
from service.domain.users import Role
from service.domain.writes import CancelOutcome, Sample
from service.policy.quotas import Limits
from service.policy.usage import Summary
from service.store.offload import Offload, TimeShare
from service.store.writer import Store

T = TypeVar("T")

READ_THREADS = 3
HEAVY_THREADS = 2


class AsyncStore:
    """Awaitable access to a ``Store`` (see the module docstring)."""

    def __init__(self, store: Store, *, read_threads: int = READ_THREADS,
                 share: TimeShare | None = None) -> None:
        self._store = store
        self._reads = Offload("argus-store-read", read_threads, per_party=1, share=share)
        self._heavy = Offload("argus-store-heavy", HEAVY_THREADS, per_party=1, share=share)
        self._writes = Offload("argus-store-write", 1)

    def close(self) -> None:
        """Refuse new calls and let the queued ones finish (the ``Store`` stays open)."""
        self._reads.close()
        self._heavy.close()
        self._writes.close()

    async def read(self, fn: Callable[[Store], T]) -> T:
        """``fn(store)`` on the read lane (for modules that add their own reads, e.g.
        ``service.web.api.pipelines``)."""
        return await self._reads.run(fn, self._store)

    async def write(self, fn: Callable[[Store], T]) -> T:
        """``fn(store)`` on the write lane."""
        return await self._writes.run(fn, self._store)

    # -- reads ---------------------------------------------------------------------------
    async def get_task(self, task_id: str) -> TaskRow | None:
        return await self._reads.run(self._store.get_task, task_id)

    async def list_attempts(self, task_id: str) -> list[AttemptRow]:
        return await self._reads.run(self._store.list_attempts, task_id)

    async def get_attempt(self, task_id: str, attempt_no: int | None) -> AttemptRow | None:
        return await self._reads.run(self._store.get_attempt, task_id, attempt_no)

    async def events(self, task_id: str) -> list[EventRow]:
        return await self._reads.run(self._store.events, task_id)

    async def queue(self, user: str | None = None, *, limit: int, offset: int = 0,
                    reason: WaitKind | None = None) -> tuple[list[TaskRow], list[TaskRow]]:
        return await self._reads.run(lambda: self._store.queue(user, limit=limit,
                                                               offset=offset, reason=reason))

    async def counts_by_state(self) -> dict[str, int]:
        return await self._reads.run(self._store.counts_by_state)

    async def get_user(self, name: str) -> UserRow | None:
        return await self._reads.run(self._store.get_user, name)

    async def list_users(self) -> list[UserRow]:
        return await self._reads.run(self._store.list_users)

    async def token_auth(self, token_id: str) -> TokenAuth | None:
        return await self._reads.run(self._store.token_auth, token_id)

    async def get_token(self, token_id: str) -> TokenRow | None:
        return await self._reads.run(self._store.get_token, token_id)

    async def list_tokens(self, user: str) -> list[TokenRow]:
        return await self._reads.run(self._store.list_tokens, user)

    async def usage_summary(self, window_from: float, window_to: float, now: float,
                            user: str | None, task_limit: int) -> Summary:
        return await self._heavy.run(self._store.usage_summary, window_from, window_to, now,
                                     user, task_limit)

    # -- the web console's reads ------------------------------------------------------------
    async def get_session(self, id_sha256: str) -> SessionRow | None:
        return await self._reads.run(self._store.get_session, id_sha256)

    async def queue_page(self, *, user: str | None, workload: str | None, offset: int,
                         limit: int, reason: WaitKind | None = None
                         ) -> tuple[list[PendingRow], int]:
        return await self._reads.run(lambda: self._store.queue_page(
            user=user, workload=workload, offset=offset, limit=limit, reason=reason))

    async def pending_workloads(self) -> list[str]:
        return await self._reads.run(self._store.pending_workloads)

    async def task_jobspec(self, task_id: str) -> str | None:
        return await self._reads.run(self._store.task_jobspec, task_id)

    async def samples_since(self, since: float) -> list[Sample]:
        return await self._reads.run(self._store.samples_since, since)

    async def active_tasks(self) -> list[TaskRow]:
        return await self._reads.run(self._store.active_tasks)

    async def gpu_seconds_in_window(self, window_from: float, window_to: float, now: float
                                    ) -> dict[str | None, float]:
        return await self._reads.run(self._store.gpu_seconds_in_window, window_from,
                                     window_to, now)

    async def recent_finished(self, limit: int, user: str | None) -> list[TaskRow]:
        return await self._reads.run(self._store.recent_finished, limit, user)

    async def task_progress(self, task_id: str) -> ProgressRow | None:
        return await self._reads.run(self._store.task_progress, task_id)

    async def active_progress(self) -> dict[str, ProgressRow]:
        return await self._reads.run(self._store.active_progress)

    async def metric_keys(self, task_id: str) -> list[str]:
        return await self._reads.run(self._store.metric_keys, task_id)

    async def metric_points(self, task_id: str, keys: list[str]) -> list[Point]:
        return await self._reads.run(self._store.metric_points, task_id, keys)
    async def change_seq(self) -> int:
        return await self._reads.run(self._store.change_seq)

    # -- writes --------------------------------------------------------------------------
    async def create_session(self, id_sha256: str, session: SessionRow, now: float,
                             max_per_user: int = 0) -> None:
        await self._writes.run(self._store.create_session, id_sha256, session, now,
                               max_per_user)

    async def delete_session(self, id_sha256: str) -> None:
        await self._writes.run(self._store.delete_session, id_sha256)

    async def create_task(self, *, id_prefix: str, workload: str, jobspec_yaml: str,
                          spec: Mapping[str, Any], nnodes: int, n_gpus_per_node: int,
                          user: str | None, now: float, priority: int = 0,
                          max_runtime_s: float | None = None,
                          quota: Limits | None = None,
                          after: Sequence[tuple[str, str]] = (), admin: bool = False) -> str:
        """Insert a QUEUED (BLOCKED with ``after``) task under a fresh id
        (``ids.new_task_id``); returns the id."""

        def create() -> str:
            task_id = new_task_id(id_prefix, workload, now, self._store.task_exists,
                                  user=user)
            self._store.create_task(task_id=task_id, workload=workload,
                                    jobspec_yaml=jobspec_yaml, spec=spec, nnodes=nnodes,
                                    n_gpus_per_node=n_gpus_per_node, user=user, now=now,
                                    priority=priority, max_runtime_s=max_runtime_s,
                                    quota=quota, after=after, admin=admin)
            return task_id

        return await self._writes.run(create)

    async def set_priority(self, task_id: str, priority: int, now: float,
                           by: str | None = None) -> TaskRow:
        return await self._writes.run(self._store.set_priority, task_id, priority, now, by)

    async def cancel(self, task_id: str, now: float, by: str | None = None) -> CancelOutcome:
        return await self._writes.run(self._store.cancel, task_id, now, by)

    async def create_user(self, name: str, role: Role, now: float) -> UserRow:
        return await self._writes.run(self._store.create_user, name, role, now)

    async def set_user_enabled(self, name: str, enabled: bool, now: float
                               ) -> UserStatusChange:
        return await self._writes.run(self._store.set_user_enabled, name, enabled, now)

    async def create_token(self, user: str, label: str, expires_at: float | None,
                           now: float, *, max_live: int) -> CreatedToken:
        return await self._writes.run(
            lambda: self._store.create_token(user, label, expires_at, now, max_live=max_live))

    async def revoke_token(self, user: str, token_id: str, now: float
                           ) -> tuple[TokenRow, bool]:
        return await self._writes.run(self._store.revoke_token, user, token_id, now)

    async def touch_token(self, token_id: str, now: float) -> None:
        await self._writes.run(self._store.touch_token, token_id, now)

    # -- webhooks ------------------------------------------------------------------------
    async def create_webhook(self, *, owner: str, url: str, events: Sequence[str], fmt: str,
                             now: float, max_per_user: int) -> WebhookRow:
        return await self._writes.run(lambda: self._store.create_webhook(
            owner=owner, url=url, events=events, fmt=fmt, now=now,
            max_per_user=max_per_user))

    async def delete_webhook(self, hook_id: str) -> bool:
        return await self._writes.run(self._store.delete_webhook, hook_id)

    async def get_webhook(self, hook_id: str) -> WebhookRow | None:
        return await self._reads.run(self._store.get_webhook, hook_id)

    async def list_webhooks(self, owner: str | None) -> list[WebhookRow]:
        return await self._reads.run(self._store.list_webhooks, owner)

    async def webhook_deliveries(self, hook_id: str, limit: int) -> list[DeliveryRow]:
        return await self._reads.run(self._store.webhook_deliveries, hook_id, limit)
