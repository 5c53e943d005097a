"""A task about to be stored: ``NewTask``, built by ``new_task`` and nowhere else.

``new_task`` turns a validated JobSpec, the settings, its owner and the time into the task
the store inserts: the configured defaults (priority, run-time limit) are applied here and
only here. The submit use case, pipeline submission and the bulk load all insert a
``NewTask`` through the store's one insert (``service.store.inserts.insert_task``), whose
columns are ``NewTask.row``'s.

What the user submitted and what may change later are kept apart on purpose: the stored
JobSpec JSON (``NewTask.spec_json``) holds the document as submitted without the
``SPEC_COLUMNS``, whose values (defaults applied) are the task's columns (PATCH changes the
priority there). ``stored_spec`` reads a task's JobSpec back from both: the one place that
knows which fields live where, so each is stored once and never disagrees.

A field the scheduler does not act on (``description``) needs no change here: it is a
JobSpec field, stored in the JSON with the rest, and read back by ``stored_spec``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from service.domain.states import TaskState

# JobSpec fields whose value, defaults applied, is a task column (changed there: PATCH
# sets the priority): the stored JSON leaves them out, ``stored_spec`` takes the columns.
SPEC_COLUMNS = ("priority", "max_runtime_s")


class Submitted(Protocol):
    """What ``new_task`` reads of a validated JobSpec (``service.jobspec.model.JobSpec``)."""

    @property
    def workload(self) -> str: ...
    @property
    def nnodes(self) -> int: ...
    @property
    def n_gpus_per_node(self) -> int: ...
    @property
    def priority(self) -> int | None: ...
    @property
    def max_runtime_s(self) -> int | None: ...
    @property
    def after(self) -> tuple[tuple[str, str], ...]: ...
    def to_dict(self) -> dict[str, Any]: ...


class TaskDefaults(Protocol):
    """The scheduler settings ``new_task`` applies (``service.config.SchedulerSettings``)."""

    @property
    def default_priority(self) -> int: ...
    @property
    def default_max_runtime_s(self) -> float | None: ...


class Defaults(Protocol):
    """What ``new_task`` reads of the settings (``service.config.Settings``)."""

    @property
    def task_id_prefix(self) -> str: ...
    @property
    def scheduler(self) -> TaskDefaults: ...


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to insert (its id is minted by the store's ``tasks.create``, or chosen
    beforehand for a pipeline's stages)."""

    id_prefix: str  # the configured task id prefix
    workload: str
    text: str  # the JobSpec as sent (YAML or JSON): the console shows it so
    spec: Mapping[str, Any]  # the validated JobSpec (``JobSpec.to_dict``)
    nnodes: int
    n_gpus_per_node: int
    user: str | None
    created_at: float
    priority: int
    max_runtime_s: float | None = None
    after: tuple[tuple[str, str], ...] = ()  # (condition, parent task id)

    @property
    def state(self) -> TaskState:
        """BLOCKED behind its ``after`` parents, else QUEUED (runnable at once)."""
        return TaskState.BLOCKED if self.after else TaskState.QUEUED

    @property
    def spec_json(self) -> str:
        return spec_json(self.spec)

    def row(self, task_id: str, state: TaskState | None = None) -> dict[str, Any]:
        """The ``insert_task`` query's values (``state``: another than ``self.state``,
        for the bulk load)."""
        return {"task_id": task_id, "workload": self.workload,
                "state": (state or self.state).value, "jobspec_yaml": self.text,
                "spec_json": self.spec_json, "nnodes": self.nnodes,
                "n_gpus_per_node": self.n_gpus_per_node, "user": self.user,
                "now": self.created_at, "priority": self.priority,
                "max_runtime_s": self.max_runtime_s}

    @property
    def stored_bytes(self) -> int:
        """What the task counts against its owner's daily JobSpec bytes."""
        return len(self.text.encode("utf-8")) + len(self.spec_json.encode("utf-8"))


def new_task(spec: Submitted, settings: Defaults, who: str | None, now: float, *,
             text: str) -> NewTask:
    """The task for ``spec`` (validated) submitted by ``who`` at ``now`` as ``text``,
    the configured defaults applied to what it leaves out."""
    sched = settings.scheduler
    return NewTask(
        id_prefix=settings.task_id_prefix, workload=spec.workload, text=text,
        spec=spec.to_dict(), nnodes=spec.nnodes, n_gpus_per_node=spec.n_gpus_per_node,
        user=who, created_at=now,
        priority=sched.default_priority if spec.priority is None else spec.priority,
        max_runtime_s=(sched.default_max_runtime_s if spec.max_runtime_s is None
                       else spec.max_runtime_s),
        after=tuple(spec.after))


def spec_json(spec: Mapping[str, Any]) -> str:
    """A JobSpec as stored: without the fields its task's columns hold."""
    return json.dumps({k: v for k, v in dict(spec).items() if k not in SPEC_COLUMNS},
                      sort_keys=True)


def stored_spec(spec_json: str, columns: Mapping[str, Any]) -> dict[str, Any]:
    """A task's JobSpec read back: the stored JSON with the ``SPEC_COLUMNS`` taken from
    ``columns`` (a row holding them), in place of any the JSON holds (rows stored before
    they were left out)."""
    return {**json.loads(spec_json), **{k: columns[k] for k in SPEC_COLUMNS}}
