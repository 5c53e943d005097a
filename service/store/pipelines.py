"""Dependencies and pipelines in the store (``Store.pipelines``): their writes and reads.

``PipelineStore`` writes through the store's one writing connection and its guarded
transitions (``core.WriteCore``), reads through the per-thread readers.

* ``create_pipeline``: the pipeline row and every stage's task, dependencies and stage
  row in one transaction (all or nothing).
* ``release_blocked`` / ``cancel_blocked``: BLOCKED -> QUEUED (with the stage's resolved
  JobSpec) or -> CANCELED (a dependency that can never hold), each guarded.
* ``end_pipelines``: RUNNING pipelines whose stages all ended get their final state and
  a ``PIPELINE_ENDED`` event (on the pipeline's first stage's task, payload naming the
  pipeline) in the same transaction, for whatever hooks on events.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from service.domain.newtask import NewTask, spec_json
from service.domain.rows import PipelineRow, StageRow, TaskRow
from service.domain.states import PipelineState, TaskState
from service.policy.dependencies import Condition, Dep
from service.policy.idempotency import IdemKey
from service.policy.pipelines import derive_state
from service.policy.quotas import Limits, window_start_hour
from service.store.core import Part
from service.store.idempotency import check_key, record_key
from service.store.inserts import (
    DependencyError as DependencyError,  # raised by create_pipeline: importable here
)
from service.store.inserts import (
    add_spec_bytes,
    check_quota,
    insert_deps,
    insert_task,
)
from service.store.reads import task_row
from service.store.sql import QUERIES as Q

_S = TaskState


class PipelineNotFound(LookupError):
    def __init__(self, pipeline_id: str) -> None:
        super().__init__(f"pipeline {pipeline_id} not found")
        self.pipeline_id = pipeline_id


@dataclass(frozen=True)
class NewStage:
    """One stage to create: its task (``NewTask``, its ``after`` naming its parents'
    ids), the id chosen for it, and its place."""

    stage: str
    task_id: str
    task: NewTask
    template: Mapping[str, Any]  # the JobSpec with its references unresolved


@dataclass(frozen=True)
class BlockedTask:
    """A BLOCKED task as the tick sees it."""

    task_id: str
    user: str | None
    on_unsatisfiable: str
    deps: tuple[Dep, ...]
    pipeline_id: str | None = None
    stage: str | None = None
    template: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Edge:
    parent: str
    child: str
    condition: Condition


@dataclass(frozen=True)
class PipelineView:
    pipeline: PipelineRow
    stages: list[StageRow] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)


def _dep(r: sqlite3.Row) -> Dep:
    return Dep(parent_id=r["parent_id"], condition=Condition(r["condition"]),
               parent_state=TaskState(r["parent_state"]))


def _pipeline(r: sqlite3.Row) -> PipelineRow:
    return PipelineRow(pipeline_id=r["pipeline_id"], name=r["name"], user=r["user"],
                       state=PipelineState(r["state"]), created_at=r["created_at"],
                       updated_at=r["updated_at"], ended_at=r["ended_at"],
                       cancel_requested_at=r["cancel_requested_at"])


class PipelineStore(Part):
    """Dependencies, BLOCKED tasks, pipelines."""

    # -- writes ------------------------------------------------------------------------
    def create_pipeline(self, *, pipeline_id: str, name: str, user: str, document: str,
                        stages: Sequence[NewStage], now: float, admin: bool = False,
                        quota: Limits | None = None, key: IdemKey | None = None) -> None:
        """The pipeline and all its stages' tasks in one transaction (``stages`` parents
        first): any failure writes nothing. With ``quota`` (the owner's limits) the
        pipeline counts as one submission: refused (``QuotaExceeded``) when the owner
        already has ``max_waiting_tasks`` waiting, and the document's bytes count against
        ``max_spec_bytes_per_day``. ``key``: its ``Idempotency-Key``, checked first and
        kept with the pipeline (``TaskStore.create_task`` says how)."""
        size = len(document.encode("utf-8"))
        with self._tx() as conn:
            check_key(conn, key)
            if quota is not None:
                check_quota(conn, user, quota, size, now, window_start_hour(now))
            add_spec_bytes(conn, user, now, size)
            conn.execute(Q["insert_pipeline"], {"pipeline_id": pipeline_id, "name": name,
                                                "user": user, "document": document,
                                                "now": now})
            depths: dict[str, int] = {}
            for position, stage in enumerate(stages):
                task = stage.task
                insert_task(conn, stage.task_id, task)
                insert_deps(conn, stage.task_id, task.after, user, admin, depths)
                depths[stage.task_id] = 1 + max(
                    (depths[p] for _, p in task.after), default=-1)
                conn.execute(Q["insert_stage"], {
                    "pipeline_id": pipeline_id, "stage": stage.stage,
                    "task_id": stage.task_id, "position": position,
                    "template_json": json.dumps(dict(stage.template), sort_keys=True)})
                self._event(conn, stage.task_id, now, "CREATED", {
                    "state": task.state.value, "priority": task.priority, "by": user,
                    "pipeline_id": pipeline_id, "stage": stage.stage})
            record_key(conn, key, {"pipeline_id": pipeline_id,
                                   "stages": {s.stage: s.task_id for s in stages}}, now)

    def release_blocked(self, task_id: str, now: float,
                        spec: Mapping[str, Any] | None = None) -> None:
        """BLOCKED -> QUEUED: its dependencies hold (``spec``: its JobSpec with the output
        references resolved, recorded in the event too). StaleState when it moved."""
        with self._tx() as conn:
            self._transition(
                conn, task_id, _S.BLOCKED, _S.QUEUED, now,
                {"reason": "dependencies met",
                 **({} if spec is None else {"resolved": dict(spec)})},
                query="move_unblocked",
                spec_json=None if spec is None else spec_json(spec))

    def cancel_blocked(self, task_id: str, now: float, reason: str, *,
                       skipped: bool) -> None:
        """BLOCKED -> CANCELED with ``reason`` as its error summary (``skipped``: a
        dependency can never hold; a pipeline does not count the stage against itself)."""
        with self._tx() as conn:
            self._transition(conn, task_id, _S.BLOCKED, _S.CANCELED, now,
                             {"reason": reason}, query="move_ended", error_summary=reason)
            if skipped:
                conn.execute(Q["mark_stage_skipped"], {"task_id": task_id})

    def end_pipelines(self, now: float) -> list[tuple[str, PipelineState]]:
        """Give every RUNNING pipeline whose stages all ended its final state, with its
        PIPELINE_ENDED event; returns those ended."""
        ended: list[tuple[str, PipelineState]] = []
        if not self._final_pipelines(self._reader()):
            return ended  # the common tick: one read, no write transaction
        with self._tx() as conn:
            for pipeline_id, (state, rows) in self._final_pipelines(conn).items():
                cur = conn.execute(Q["end_pipeline"], {"pipeline_id": pipeline_id,
                                                       "state": state.value, "now": now})
                if cur.rowcount != 1:  # pragma: no cover - guarded under the writer lock
                    continue
                self._event(conn, rows[0]["task_id"], now, "PIPELINE_ENDED", {
                    "pipeline_id": pipeline_id, "state": state.value,
                    "stages": {r["task_id"]: r["state"] for r in rows}})
                ended.append((pipeline_id, state))
        return ended

    @staticmethod
    def _final_pipelines(conn: sqlite3.Connection
                         ) -> dict[str, tuple[PipelineState, list[sqlite3.Row]]]:
        """The RUNNING pipelines whose stages all ended, with the state they get."""
        stages: dict[str, list[sqlite3.Row]] = {}
        for r in conn.execute(Q["running_pipeline_stages"]):
            stages.setdefault(r["pipeline_id"], []).append(r)
        for rows in stages.values():
            rows.sort(key=lambda r: r["position"])  # the first stage carries the event
        out = {}
        for pipeline_id, rows in stages.items():
            state = derive_state([(TaskState(r["state"]), bool(r["skipped"])) for r in rows],
                                 rows[0]["cancel_requested_at"] is not None)
            if state is not PipelineState.RUNNING:
                out[pipeline_id] = (state, rows)
        return out

    def flag_pipeline_cancel(self, pipeline_id: str, now: float) -> PipelineRow:
        """Record that a person canceled the pipeline (its stages are canceled one by one
        by the caller, each through ``Store.tasks.cancel``)."""
        with self._tx() as conn:
            row = conn.execute(Q["get_pipeline"], {"pipeline_id": pipeline_id}).fetchone()
            if row is None:
                raise PipelineNotFound(pipeline_id)
            conn.execute(Q["flag_pipeline_cancel"], {"pipeline_id": pipeline_id, "now": now})
            row = conn.execute(Q["get_pipeline"], {"pipeline_id": pipeline_id}).fetchone()
        return _pipeline(row)

    # -- reads -------------------------------------------------------------------------
    def woken(self) -> tuple[int | None, list[BlockedTask]]:
        """The BLOCKED tasks to look at again (``dep_wakeups``: a parent ended, or they are
        new) with their dependencies' parents' states, and the last wakeup read (None:
        none), which ``clear_wakeups`` takes once they are handled."""
        with self._snapshot() as conn:
            upto = conn.execute(Q["last_wakeup"]).fetchone()["upto"]
            if upto is None:
                return None, []
            rows = conn.execute(Q["woken_deps"], {"upto": upto}).fetchall()
        grouped: dict[str, list[sqlite3.Row]] = {}
        for r in rows:
            grouped.setdefault(r["task_id"], []).append(r)
        out = []
        for task_id, group in grouped.items():
            first = group[0]
            template = first["template_json"]
            out.append(BlockedTask(
                task_id=task_id, user=first["user"],
                on_unsatisfiable=first["on_unsatisfiable"],
                deps=tuple(_dep(r) for r in group), pipeline_id=first["pipeline_id"],
                stage=first["stage"],
                template=None if template is None else json.loads(template)))
        return upto, out

    def clear_wakeups(self, upto: int) -> None:
        """Drop the wakeups up to ``upto`` (handled); later ones stay for the next tick."""
        with self._tx() as conn:
            conn.execute(Q["delete_wakeups"], {"upto": upto})

    def blocked_page(self, limit: int, user: str | None = None) -> list[TaskRow]:
        """The oldest ``limit`` BLOCKED tasks (``user``'s only when given; tasks_blocked)."""
        return [task_row(r, None) for r in self._reader().execute(
            Q["blocked_page"], {"limit": limit, "user": user})]

    def blocked_count(self) -> int:
        return int(self._reader().execute(Q["blocked_count"]).fetchone()["n"])

    def deps_of(self, task_id: str) -> list[Dep]:
        return [_dep(r) for r in self._reader().execute(Q["deps_of_task"],
                                                         {"task_id": task_id})]

    def deps_of_tasks(self, task_ids: Sequence[str]) -> dict[str, list[Dep]]:
        out: dict[str, list[Dep]] = {}
        for r in self._reader().execute(Q["deps_of_tasks"], {"ids": json.dumps(list(task_ids))}):
            out.setdefault(r["task_id"], []).append(_dep(r))
        return out

    def on_unsatisfiable_of(self, task_id: str) -> str:
        r = self._reader().execute(Q["task_on_unsatisfiable"], {"task_id": task_id}).fetchone()
        return "cancel" if r is None else r["on_unsatisfiable"]

    def stage_of(self, task_id: str) -> tuple[str, str] | None:
        """``(pipeline_id, stage)`` of a task that is a pipeline's stage."""
        r = self._reader().execute(Q["stage_of_task"], {"task_id": task_id}).fetchone()
        return None if r is None else (r["pipeline_id"], r["stage"])

    def pipeline_exists(self, pipeline_id: str) -> bool:
        return self._reader().execute(Q["pipeline_exists"],
                                      {"pipeline_id": pipeline_id}).fetchone() is not None

    def get_pipeline(self, pipeline_id: str) -> PipelineView | None:
        """A pipeline with its stages and edges, read in one snapshot."""
        snapshot: AbstractContextManager[sqlite3.Connection] = self._snapshot()
        with snapshot as conn:
            row = conn.execute(Q["get_pipeline"], {"pipeline_id": pipeline_id}).fetchone()
            if row is None:
                return None
            stages = [StageRow(stage=r["stage"], task_id=r["task_id"], position=r["position"],
                               skipped=bool(r["skipped"]), state=TaskState(r["state"]),
                               error_summary=r["error_summary"],
                               attempt_no=r["latest_attempt_no"])
                      for r in conn.execute(Q["pipeline_stages"], {"pipeline_id": pipeline_id})]
            edges = [Edge(parent=r["parent"], child=r["child"],
                          condition=Condition(r["condition"]))
                     for r in conn.execute(Q["pipeline_edges"], {"pipeline_id": pipeline_id})]
        return PipelineView(_pipeline(row), stages, edges)

    def list_pipelines(self, user: str | None, limit: int) -> list[PipelineRow]:
        """Newest first; ``user`` None: everyone's."""
        if user is None:
            rows: Iterator[sqlite3.Row] = self._reader().execute(Q["list_pipelines"],
                                                                 {"limit": limit})
        else:
            rows = self._reader().execute(Q["list_pipelines_of_user"],
                                          {"user": user, "limit": limit})
        return [_pipeline(r) for r in rows]
