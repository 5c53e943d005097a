"""Inside a write transaction: the one insert of a new task, its dependencies, and the
owner's quota check and JobSpec bytes. Shared by ``tasks.TaskStore.create_task`` and
``pipelines.PipelineStore.create_pipeline`` (a pipeline's stages are tasks like any)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence

from service.domain.newtask import NewTask
from service.domain.states import TaskState
from service.policy.dependencies import Condition, depth_problem
from service.policy.quotas import HOUR_S, Limits, submit_refusal
from service.store.core import QuotaExceeded, TaskExists
from service.store.dialect import unique_violation
from service.store.sql import QUERIES as Q


class DependencyError(ValueError):
    """A task's ``after`` names parents it may not (unknown, not visible, too deep)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def insert_task(conn: sqlite3.Connection, task_id: str, task: NewTask,
                state: TaskState | None = None, *, checked: bool = True) -> None:
    """The task's row (``TaskExists`` when the id is taken); no event (the caller's).

    ``checked=False`` (an id just minted at random, whose clash is rare and answered by
    another id): the conflict is not looked for here. On PostgreSQL it then surfaces at
    the COMMIT (``taken_task_id`` tells it), so the insert costs no round trip of its
    own; on SQLite it raises at once, as ever."""
    if not checked:
        conn.execute(Q["insert_task"], task.row(task_id, state))
        return
    try:
        # the count read now: PostgreSQL reads a write's results only when looked at
        # (service.store.pg), and the conflict is this statement's
        _ = conn.execute(Q["insert_task"], task.row(task_id, state)).rowcount
    except Exception as exc:
        if unique_violation(exc):
            raise TaskExists(task_id) from exc
        raise


def taken_task_id(exc: BaseException) -> bool:
    """Whether ``exc`` is a task id's conflict (the ``tasks.task_id`` unique key), on
    either engine: not another table's, nor another key's."""
    if not unique_violation(exc):
        return False
    if isinstance(exc, sqlite3.IntegrityError):
        return "tasks.task_id" in str(exc)
    diag = getattr(exc, "diag", None)
    return getattr(diag, "constraint_name", None) == "tasks_task_id_key"


def check_quota(conn: sqlite3.Connection, user: str, quota: Limits, size: int,
                now: float, first_hour: int) -> None:
    """``QuotaExceeded`` when ``user``'s waiting tasks or JobSpec bytes of the last day
    (with ``size`` more) are over ``quota``."""
    waiting = conn.execute(Q["user_waiting_count"], {"user": user}).fetchone()["n"]
    hourly = [(r["hour"], r["bytes"]) for r in conn.execute(
        Q["user_spec_bytes_since"], {"user": user, "hour": first_hour})]
    refusal = submit_refusal(user, quota, waiting=waiting, hourly_bytes=hourly,
                             new_bytes=size, now=now)
    if refusal is not None:
        raise QuotaExceeded(refusal)


def add_spec_bytes(conn: sqlite3.Connection, user: str, now: float, size: int) -> None:
    """Add ``size`` to ``user``'s hourly bucket of JobSpec bytes."""
    conn.execute(Q["add_user_spec_bytes"],
                 {"user": user, "hour": int(now // HOUR_S), "bytes": size})


def insert_deps(conn: sqlite3.Connection, task_id: str, after: Sequence[tuple[str, str]],
                user: str | None, admin: bool, known: Mapping[str, int] | None = None
                ) -> None:
    """The dependency rows of a new task; DependencyError naming every bad parent.
    ``known``: parents created in this transaction (a pipeline's), with their depth."""
    problems: list[str] = []
    depths: list[int] = []
    ended = False  # a parent ended already: nothing would wake the dependent
    for _, parent in after:
        if known is not None and parent in known:
            depths.append(known[parent])
            continue
        row = conn.execute(Q["dep_parent"], {"task_id": parent}).fetchone()
        if row is None or (not admin and row["user"] != user):
            problems.append(f"task {parent} not found (a parent must exist and be yours)")
            continue
        depths.append(row["depth"])
        ended = ended or TaskState(row["state"]).is_terminal()
    problem = depth_problem(depths)
    if problem is not None:
        problems.append(problem)
    if problems:
        raise DependencyError(problems)
    depth = 1 + max(depths, default=0)
    for condition, parent in after:
        conn.execute(Q["insert_dep"], {"task_id": task_id, "parent_id": parent,
                                       "condition": Condition(condition).value,
                                       "depth": depth})
    if ended:  # the next tick decides it (the trigger wakes it for the others)
        conn.execute(Q["insert_wakeup"], {"task_id": task_id})
