"""The engine's ports: what the scheduler and the log follower call on the store, and
nothing else (``service.store.writer.Store`` provides them all).

Each names, by aggregate, the store calls its component makes: a new call of the engine
is a line here, and a fake store for a test implements these and no more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from service.domain.nodes import NodeSource, NodeStateRow
from service.domain.reasons import Reason
from service.domain.rows import (
    ActiveRow,
    AttemptNode,
    Claim,
    EventRow,
    FollowState,
    RunnableRow,
    TaskRow,
)
from service.domain.states import PipelineState, TaskState
from service.domain.writes import AttemptEnd, ProgressUpdate, RetryPlan
from service.policy.quarantine import Evidence
from service.policy.usage import AttemptSpan
from service.scheduling.runtimes import EndedRun

if TYPE_CHECKING:
    from service.store.pipelines import BlockedTask, PipelineView


class SchedulerTasks(Protocol):
    def cancel_requested(self, task_id: str) -> bool: ...

    def get_task(self, task_id: str) -> TaskRow | None: ...

    def events(self, task_id: str) -> list[EventRow]: ...

    def runnable(self, now: float, limit: int, *, per_user: bool = False
                 ) -> list[RunnableRow]: ...

    def active(self, states: Iterable[TaskState] = ...) -> list[ActiveRow]: ...


class SchedulerAttempts(Protocol):
    def mark_pending(self, items: Iterable[tuple[str, TaskState, Reason]], now: float,
                     next_run_at: float | None = None) -> int: ...

    def claim_for_submit(self, task_id: str, expected: TaskState, now: float) -> Claim: ...

    def mark_submitted(self, task_id: str, attempt_no: int, now: float, *,
                       already_existed: bool = False) -> None: ...

    def release_claim(self, task_id: str, attempt_no: int, reason: Reason, now: float
                      ) -> TaskState: ...

    def fail_submit(self, task_id: str, attempt_no: int, failure_kind: str, message: str,
                    now: float) -> None: ...

    def sync_attempt(self, task_id: str, attempt_no: int, *, ray_status: str,
                     message: str | None, start_time: float | None, now: float,
                     to_running_from: TaskState | None = None) -> None: ...

    def note_cluster(self, task_ids: Sequence[str], now: float, event_type: str,
                     payload: Mapping[str, Any]) -> None: ...

    def mark_stop_requested(self, task_id: str, attempt_no: int, now: float,
                            reason: str | None = None) -> None: ...

    def finish_attempt(self, task_id: str, expected: TaskState, attempt_no: int,
                       end: AttemptEnd, outcome: TaskState, error_summary: str | None,
                       now: float) -> None: ...

    def schedule_retry(self, task_id: str, expected: TaskState, attempt_no: int,
                       end: AttemptEnd, plan: RetryPlan, reason: Reason, now: float) -> None: ...

    def request_preemption(self, victims: Iterable[tuple[str, int]], preemptor: str,
                           now: float, detail: Mapping[str, Any] | None = None) -> list[str]: ...

    def request_drain_requeue(self, victims: Iterable[tuple[str, int]], node: str,
                              reason: str, now: float) -> list[str]: ...

    def recent_runs(self, scan: int) -> list[EndedRun]: ...


class SchedulerPipelines(Protocol):
    def release_blocked(self, task_id: str, now: float,
                        spec: Mapping[str, Any] | None = None) -> None: ...

    def cancel_blocked(self, task_id: str, now: float, reason: str, *,
                       skipped: bool) -> None: ...

    def end_pipelines(self, now: float) -> list[tuple[str, PipelineState]]: ...

    def woken(self) -> tuple[int | None, list[BlockedTask]]: ...

    def clear_wakeups(self, upto: int) -> None: ...

    def get_pipeline(self, pipeline_id: str) -> PipelineView | None: ...


class SchedulerUsers(Protocol):
    def disabled_users(self) -> frozenset[str]: ...


class SchedulerUsage(Protocol):
    def usage_spans(self, window_from: float, window_to: float, user: str | None = None
                    ) -> list[AttemptSpan]: ...


class SchedulerNodes(Protocol):
    def states(self) -> list[NodeStateRow]: ...

    def state(self, name: str) -> NodeStateRow | None: ...

    def cordon(self, name: str, source: NodeSource, by: str | None, now: float,
               reason: str) -> NodeStateRow: ...

    def resume(self, name: str, source: NodeSource | None, by: str | None, now: float,
               reason: str) -> NodeStateRow: ...

    def quarantine(self, name: str, now: float, reason: str) -> NodeStateRow: ...

    def add_evidence(self, nodes: Iterable[str], evidence: Evidence, since: float
                     ) -> None: ...

    def evidence_since(self, since: float) -> list[tuple[str, Evidence]]: ...


class SchedulerPlacement(Protocol):
    def record_many(self, seen: Sequence[tuple[str, int, Sequence[tuple[str, str, float]]]],
                    now: float) -> dict[tuple[str, int], list[AttemptNode]]: ...

    def of_attempt(self, task_id: str, attempt_no: int) -> tuple[AttemptNode, ...]: ...


class SchedulerStore(Protocol):
    """The store as the scheduler (and its parts: applier, reconcile, watch, attempt
    ends, the dependency tick) uses it."""

    @property
    def tasks(self) -> SchedulerTasks: ...

    @property
    def attempts(self) -> SchedulerAttempts: ...

    @property
    def pipelines(self) -> SchedulerPipelines: ...

    @property
    def users(self) -> SchedulerUsers: ...

    @property
    def usage(self) -> SchedulerUsage: ...

    @property
    def nodes(self) -> SchedulerNodes: ...

    @property
    def placement(self) -> SchedulerPlacement: ...

    def tick_scope(self) -> AbstractContextManager[None]: ...


class FollowerTasks(Protocol):
    def active(self, states: Iterable[TaskState] = ...) -> list[ActiveRow]: ...


class FollowerProgress(Protocol):
    def record_progress(self, update: ProgressUpdate, now: float) -> None: ...

    def follow_state(self, task_id: str, attempt_no: int) -> FollowState | None: ...


class FollowerStore(Protocol):
    """The store as the log follower (``progress_follower``) uses it."""

    @property
    def tasks(self) -> FollowerTasks: ...

    @property
    def progress(self) -> FollowerProgress: ...
