"""What the use cases are given, and the outcomes they refuse with.

``TaskDeps`` is structural: the API's ``AppDeps`` satisfies it, and a unit test hands in a
small object of its own (a real store on a temporary database, a fake cluster). Its store
is ``Lanes[UseCaseStore]``: the async store's lanes (``service.store.aio.AsyncStore``)
over the store calls the use cases make, by aggregate, and no others."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from service.cluster.boundary import Cluster, ClusterUnavailable
from service.config import Settings
from service.domain.newtask import NewTask
from service.domain.rows import TaskRow
from service.domain.writes import CancelOutcome
from service.policy.quotas import Limits, QuotaRefusal
from service.store.aio import AsyncStore
from service.store.offload import Offload

if TYPE_CHECKING:
    from service.domain.rows import PipelineRow
    from service.policy.idempotency import IdemKey
    from service.store.pipelines import NewStage, PipelineView

T = TypeVar("T")
S_co = TypeVar("S_co", covariant=True)


class HoldsKeys(Protocol):
    """``service.usecases.idempotency.KeysInFlight``: the keys of requests in progress."""

    def hold(self, key: IdemKey | None) -> AbstractContextManager[None]: ...


class Wakes(Protocol):
    def wake(self) -> None: ...


class Counts(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class SubmitMetrics(Protocol):
    @property
    def submits(self) -> Counts: ...


class UseCaseTasks(Protocol):
    def new_id(self, prefix: str, workload: str, now: float, user: str | None,
               taken: Iterable[str] = ()) -> str: ...

    def create_task(self, task: NewTask, *, task_id: str | None = None,
                    quota: Limits | None = None, admin: bool = False,
                    key: IdemKey | None = None) -> str: ...

    def set_priority(self, task_id: str, priority: int, now: float, by: str | None = None
                     ) -> TaskRow: ...

    def cancel(self, task_id: str, now: float, by: str | None = None) -> CancelOutcome: ...

    def get_task(self, task_id: str) -> TaskRow | None: ...


class UseCasePipelines(Protocol):
    def create_pipeline(self, *, pipeline_id: str, name: str, user: str, document: str,
                        stages: Sequence[NewStage], now: float, admin: bool = False,
                        quota: Limits | None = None, key: IdemKey | None = None
                        ) -> None: ...

    def flag_pipeline_cancel(self, pipeline_id: str, now: float) -> PipelineRow: ...

    def pipeline_exists(self, pipeline_id: str) -> bool: ...

    def get_pipeline(self, pipeline_id: str) -> PipelineView | None: ...

    def list_pipelines(self, user: str | None, limit: int) -> list[PipelineRow]: ...


class UseCaseStore(Protocol):
    """The store as the use cases use it (``service.store.writer.Store``)."""

    @property
    def tasks(self) -> UseCaseTasks: ...

    @property
    def pipelines(self) -> UseCasePipelines: ...


class Lanes(Protocol[S_co]):
    """The async store's lanes over a store ``S_co`` (``service.store.aio.AsyncStore``):
    ``await lanes.read(lambda s: s.tasks.get_task(task_id))``."""

    async def read(self, fn: Callable[[S_co], T]) -> T: ...

    async def write(self, fn: Callable[[S_co], T], *, grouped: bool = False) -> T: ...


class ServiceDeps(Protocol):
    """What the account, webhook and node use cases are given: the settings, the
    store's lanes and the clock (each adds what else it needs)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> AsyncStore: ...

    @property
    def clock(self) -> Callable[[], float]: ...


class TaskDeps(Protocol):
    """The parts of the service a use case touches."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Lanes[UseCaseStore]: ...

    @property
    def cluster(self) -> Cluster: ...

    @property
    def cluster_pool(self) -> Executor: ...

    @property
    def work(self) -> Offload: ...

    @property
    def waker(self) -> Wakes: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def metrics(self) -> SubmitMetrics: ...

    @property
    def in_flight(self) -> HoldsKeys: ...


async def on_cluster(deps: TaskDeps, fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking cluster call in the cluster pool, bounded by the Ray timeout."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(deps.cluster_pool, fn, *args)
    try:
        return await asyncio.wait_for(future, timeout=deps.settings.ray_timeout_s)
    except TimeoutError as exc:
        raise ClusterUnavailable(
            f"no answer from Ray within {deps.settings.ray_timeout_s:g}s"
        ) from exc


# -- outcomes a use case refuses with ---------------------------------------------------


class UseCaseError(Exception):
    """A request the rules refuse; ``message`` says why in a sentence."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(UseCaseError):
    """No such task, pipeline, user, token or webhook (``what``: which kind); ``message``
    when the sentence says more than "<what> <ident> not found"."""

    def __init__(self, what: str, ident: str, message: str | None = None) -> None:
        super().__init__(message or f"{what} {ident} not found")
        self.what, self.ident = what, ident


class NotOwner(UseCaseError):
    """The caller neither owns the task (or pipeline) nor is an admin."""

    def __init__(self, what: str, ident: str, owner: str | None, action: str,
                 caller: str) -> None:
        super().__init__(f"only its owner ({owner}) or an admin may {action} {what} "
                         f"{ident}; you are {caller}")
        self.what, self.ident, self.owner, self.action = what, ident, owner, action


class Invalid(UseCaseError):
    """A value out of its range (``field`` names it); the task, when there is one."""

    def __init__(self, field: str, message: str, task: TaskRow | None = None) -> None:
        super().__init__(message)
        self.field, self.task = field, task


class NotAllowed(UseCaseError):
    """The caller may not ask for this value (a priority above their allowance)."""

    def __init__(self, field: str, message: str, task: TaskRow | None = None) -> None:
        super().__init__(message)
        self.field, self.task = field, task


class WrongState(UseCaseError):
    """The task is in a state where the request does not apply (``state``: which)."""

    def __init__(self, message: str, state: str | None, task: TaskRow | None = None
                 ) -> None:
        super().__init__(message)
        self.state, self.task = state, task


class OverQuota(UseCaseError):
    """The owner's quota refuses the submission (``refusal``: which limit, until when)."""

    def __init__(self, refusal: QuotaRefusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class BadDependencies(UseCaseError):
    """The ``after`` list names tasks that cannot be parents (``problems``: each)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class KeyReused(UseCaseError):
    """An ``Idempotency-Key`` used before for another request (another body or route)."""

    def __init__(self, key: str, route: str) -> None:
        super().__init__(f"Idempotency-Key {key!r} was used before with a different request; "
                         f"send a new key for a new {route} (a retry must send the same "
                         "body as the first request)")
        self.key = key


class KeyInUse(UseCaseError):
    """The first request with this ``Idempotency-Key`` is still being processed."""

    def __init__(self, key: str) -> None:
        super().__init__(f"a request with Idempotency-Key {key!r} is still being processed; "
                         "retry after it (the retry gets its answer)")
        self.key = key


class Forbidden(UseCaseError):
    """The caller may not do this (manage another user, touch another's webhook)."""


class Conflict(UseCaseError):
    """The request contradicts what is stored (a name taken, a limit reached, the
    bootstrap admin); ``details``: the fields, when one is to blame."""

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.details = details or []


class Rejected(UseCaseError):
    """A request whose values the rules refuse; ``details`` names each field and why."""

    def __init__(self, message: str, details: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.details = details

