"""Submit, cancel and re-prioritize a task: the rules, once, for the API and the console.

Everyone sees every task; a task's owner or an admin cancels it or changes its priority
while it waits (``NotOwner`` for anyone else). A submitted task belongs to the caller. A
priority (at submit or later) above ``max_user_priority`` is an admin's to give
(``service.policy.priorities``): a user asking for more is ``NotAllowed``. Ray being unreachable
never fails a cancel: the request is recorded and the scheduler finishes the stop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from service.cluster.boundary import ClusterError
from service.domain.newtask import new_task
from service.domain.rows import TaskRow
from service.domain.states import TaskState
from service.domain.users import Principal
from service.domain.writes import CancelKind, CancelOutcome
from service.jobspec.model import JobSpec
from service.jobspec.spec import parse_jobspec, parse_jobspec_json
from service.policy.priorities import allowance_problem, range_problem
from service.store.idempotency import KeyReplayed
from service.store.writer import StaleState, TaskNotFound
from service.usecases.idempotency import submit_key, submit_refusals
from service.usecases.ports import (
    Invalid,
    NotAllowed,
    NotFound,
    NotOwner,
    TaskDeps,
    WrongState,
    on_cluster,
)

log = logging.getLogger(__name__)

SUBMIT_ROUTE = "POST /api/v2/tasks"


@dataclass(frozen=True, slots=True)
class Submitted:
    task_id: str
    state: TaskState  # QUEUED, or BLOCKED behind the tasks it names in ``after``
    replayed: bool = False  # the answer to an earlier request with this Idempotency-Key


@dataclass(frozen=True, slots=True)
class Canceled:
    """What a cancel did: ended the task (``stopping`` False) or asked Ray to stop its
    attempt (``stopping`` True: the scheduler ends the task once Ray says it stopped)."""

    task_id: str
    state: TaskState  # the task's state after the request
    stopping: bool


def _allowance(who: Principal, deps: TaskDeps, priority: int, current: int | None = None,
               task: TaskRow | None = None) -> None:
    problem = allowance_problem(
        priority, is_admin=who.is_admin,
        max_user_priority=deps.settings.scheduler.max_user_priority, current=current)
    if problem:
        raise NotAllowed("priority", problem, task)


async def owned_task(deps: TaskDeps, who: Principal, task_id: str, action: str) -> TaskRow:
    """The task, when ``who`` owns it or is an admin (``action``: what they want to do,
    for the refusal's sentence)."""
    task = await deps.store.read(lambda s: s.tasks.get_task(task_id))
    if task is None:
        raise NotFound("task", task_id)
    if not who.may_act_on(task.user):
        raise NotOwner("task", task_id, task.user, action, who.name)
    return task


async def parse(deps: TaskDeps, text: str, who: Principal, *, as_json: bool) -> JobSpec:
    """The JobSpec of a submit, parsed on the work lane (parsing is CPU work); raises
    ``jobspec.JobSpecError`` with every problem."""
    fn = parse_jobspec_json if as_json else parse_jobspec
    return await deps.work.run(fn, text, deps.settings, who.name)


async def submit(deps: TaskDeps, who: Principal, text: str, *, as_json: bool,
                 key: str | None = None) -> Submitted:
    """Store the JobSpec ``text`` (stored as sent, YAML or JSON: the console shows it so)
    as a new task of ``who``: parsed (``JobSpecError``), the configured defaults for what
    it leaves out, the caller's priority allowance, the owner's quota (admins are exempt),
    its dependencies; then wake the scheduler.

    ``key``: the request's ``Idempotency-Key`` (valid: ``policy.idempotency.parse_key``).
    The same key and body as an earlier submit of ``who`` answer that submit's task again
    (``replayed``; nothing new is written); another body is ``KeyReused``; while the first
    is still being processed, ``KeyInUse``."""
    idem = submit_key(who.name, key, SUBMIT_ROUTE, text, as_json=as_json)
    with deps.in_flight.hold(idem):
        spec = await parse(deps, text, who, as_json=as_json)
        task = new_task(spec, deps.settings, who.name, deps.clock(), text=text)
        _allowance(who, deps, task.priority)
        quota = None if who.is_admin else deps.settings.users.limits_for(who.name)
        try:
            with submit_refusals(SUBMIT_ROUTE):
                task_id = await deps.store.write(
                    lambda s: s.tasks.create_task(task, quota=quota, admin=who.is_admin,
                                                  key=idem), grouped=True)
        except KeyReplayed as exc:
            return Submitted(exc.result["task_id"], TaskState(exc.result["state"]),
                             replayed=True)
    deps.metrics.submits.inc()
    deps.waker.wake()
    return Submitted(task_id, task.state)


async def stop_now(deps: TaskDeps, submission_id: str) -> None:
    """Ask Ray to stop an attempt now, best effort: the scheduler sees the request in the
    store and stops it again every tick until Ray says it ended."""
    try:
        await on_cluster(deps, deps.cluster.stop, submission_id)
    except ClusterError as exc:
        log.warning("stop %s: %s (the scheduler will retry)", submission_id, exc)


async def cancel_one(deps: TaskDeps, task_id: str, now: float, by: str) -> CancelOutcome:
    """The store's cancel and, for a task on Ray, the best-effort stop; no wake (a
    pipeline cancels many and wakes once)."""
    outcome = await deps.store.write(lambda s: s.tasks.cancel(task_id, now, by))
    if outcome.kind is CancelKind.STOPPING and outcome.ray_submission_id:
        await stop_now(deps, outcome.ray_submission_id)
    return outcome


async def cancel(deps: TaskDeps, who: Principal, task_id: str) -> Canceled:
    """Cancel a waiting task at once; flag a running one and ask Ray to stop it. Refuses
    with ``NotFound``, ``NotOwner``, or ``WrongState`` for a task that already ended."""
    await owned_task(deps, who, task_id, "cancel")  # owners never change: checked once
    outcome = await cancel_one(deps, task_id, deps.clock(), who.name)
    if outcome.kind is CancelKind.NOT_FOUND or outcome.task is None:
        raise NotFound("task", task_id)
    state = outcome.task.state
    if outcome.kind is CancelKind.TERMINAL:
        raise WrongState(f"task {task_id} is already {state}; nothing to cancel", state,
                         outcome.task)
    deps.waker.wake()
    return Canceled(task_id, state, outcome.kind is CancelKind.STOPPING)


async def set_priority(deps: TaskDeps, who: Principal, task_id: str,
                       priority: int | None) -> TaskRow:
    """A waiting task's new priority; the task after the change. Refuses with
    ``NotFound``, ``NotOwner``, ``Invalid`` (out of range), ``NotAllowed`` (above the
    caller's allowance; lowering one's own is always allowed) or ``WrongState`` (the task
    started or ended: its priority no longer counts). ``priority`` None: what was sent
    is not an integer (``Invalid``)."""
    before = await owned_task(deps, who, task_id, "change the priority of")
    problem = range_problem(priority)
    if problem or priority is None:
        raise Invalid("priority", problem or "", before)
    _allowance(who, deps, priority, before.priority, before)
    now = deps.clock()
    try:
        task = await deps.store.write(
            lambda s: s.tasks.set_priority(task_id, priority, now, who.name))
    except TaskNotFound as exc:  # pragma: no cover - tasks are never deleted
        raise NotFound("task", task_id) from exc
    except StaleState as exc:
        raise WrongState(f"task {task_id} is {exc.actual}: only a waiting (BLOCKED, "
                         "QUEUED or PENDING_RESOURCES) task's priority can change",
                         exc.actual,
                         await deps.store.read(lambda s: s.tasks.get_task(task_id)) or before
                         ) from exc
    if before.priority != priority:
        log.info("priority of %s: %d -> %d by %s", task_id, before.priority, priority,
                 who.name)
    deps.waker.wake()
    return task
