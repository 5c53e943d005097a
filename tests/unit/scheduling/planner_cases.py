"""The harness shared by the tests of this folder (``test_planner.py`` and its siblings):
constants, builders and helpers (the folder needs no fixtures)."""

from __future__ import annotations

from service.cluster.boundary import ClusterSnapshot, NodeResources
from service.config import SchedulerSettings, UserSettings
from service.domain.rows import ActiveRow, RunnableRow
from service.domain.states import TaskState
from service.domain.workloads import driver
from service.scheduling.plan import Plan, PlanInput, Start, Wait
from service.scheduling.planner import Planner

NOW = 1_000_000.0


DRIVER = driver({}, 1.0)


def node(name: str, free_gpus: float, total_gpus: float = 4.0,
         total_cpus: float = 16.0) -> NodeResources:
    free = {"GPU": free_gpus, "CPU": total_cpus - 3 * (total_gpus - free_gpus),
            "worker_node": 100.0}
    return NodeResources(name, f"10.0.0.{name[-1]}", {k: v for k, v in free.items() if v},
                         {"GPU": total_gpus, "CPU": total_cpus, "worker_node": 100.0})


def task(task_id: str, nnodes: int = 1, gpus: int = 4, *, user: str = "alice",
         seq: int | None = None, waited: float = 0.0, priority: int = 0,
         limit: float | None = None, backoff_until: float | None = None) -> RunnableRow:
    return RunnableRow(seq if seq is not None else int(task_id[1:]), task_id,
                       TaskState.PENDING_RESOURCES, user, nnodes, gpus, NOW - waited, None,
                       priority=priority, retry_not_before=backoff_until,
                       attempt_no=1 if backoff_until else 0, max_runtime_s=limit)


def running(task_id: str, nnodes: int = 1, gpus: int = 4, *, user: str = "bob",
            started: float = NOW - 60, limit: float | None = None, priority: int = 0,
            checkpointing: bool = True) -> ActiveRow:
    return ActiveRow(task_id, TaskState.RUNNING, user, nnodes, gpus, 1, f"{task_id}--a01",
                     "RUNNING", None, started, started, False, False, priority=priority,
                     checkpointing=checkpointing, max_runtime_s=limit)


def plan(nodes: list[NodeResources], candidates: list[RunnableRow],
         active: list[ActiveRow] = (), *, held_on: dict[str, dict[str, float]] | None = None,
         users: UserSettings | None = None, charges: dict[str | None, float] | None = None,
         reservation: frozenset[str] = frozenset(), disabled: frozenset[str] = frozenset(),
         reserved: frozenset[str] = frozenset(), **sched: object) -> Plan:
    held_on = held_on or {}
    snapshot = ClusterSnapshot(
        tuple(nodes), {sid: sum(h.values()) for sid, h in held_on.items()}, {}, held_on)
    planner = Planner(SchedulerSettings(**sched), users or UserSettings(), DRIVER)
    return planner.plan(PlanInput(NOW, list(candidates), list(active), snapshot,
                                  charges or {}, disabled, reservation, reserved=reserved))


def started(p: Plan) -> list[str]:
    return [s.cand.task_id for s in p.steps if isinstance(s, Start)]


def starts(p: Plan) -> dict[str, float]:
    """Each start estimate's start (from limits in these cases: no run history)."""
    return {task_id: e.start for task_id, e in p.estimates.items()}


def reasons(p: Plan) -> dict[str, str]:
    return {s.cand.task_id: s.reason for s in p.steps if isinstance(s, Wait)}


CASES = [
    ("a gang that fits starts", [node("w1", 4)], [task("t1")], {}, ["t1"], {}),
    ("room for one of two", [node("w1", 4)], [task("t1"), task("t2")], {}, ["t1"],
     {"t2": "needs 1x4 GPUs"}),
    ("backfill: a later small task passes a big one", [node("w1", 2)],
     [task("t1", gpus=4), task("t2", gpus=2)], {}, ["t2"], {"t1": "needs 1x4 GPUs"}),
    ("backfill off: first come, first served", [node("w1", 2)],
     [task("t1", gpus=4), task("t2", gpus=2)], {"backfill": False}, [],
     {"t1": "needs 1x4 GPUs", "t2": "first come, first served (backfill off)"}),
    ("a gang spread over two nodes", [node("w1", 4), node("w2", 4)], [task("t1", nnodes=2)],
     {}, ["t1"], {}),
    ("fragmented: 2+2 free is no 1x4", [node("w1", 2), node("w2", 2)], [task("t1")], {}, [],
     {"t1": "needs 1x4 GPUs"}),
    ("never fits this cluster", [node("w1", 4)], [task("t1", gpus=8)], {}, [],
     {"t1": "never"}),
    ("max_running_tasks", [node("w1", 4), node("w2", 4)], [task("t1"), task("t2")],
     {"max_running_tasks": 1}, ["t1"], {"t2": "max_running_tasks (1) reached"}),
    # candidates come in the store's index order: priority, then FIFO
    ("priority first", [node("w1", 4)], [task("t2", priority=5), task("t1")], {}, ["t2"],
     {"t1": "after tasks of higher priority"}),
    ("in retry backoff: its room is kept", [node("w1", 4)],
     [task("t1", backoff_until=NOW + 30), task("t2")], {}, [],
     {"t1": "retry backoff", "t2": "needs 1x4 GPUs"}),
]
