"""What the console and ``/metrics`` read (the queue page, pending groups, admissions,
usage in a window) and the queue samples behind the charts (``Store.console``)."""

from __future__ import annotations

import logging

from service.domain.reasons import WaitKind
from service.domain.rows import Admitted, PendingGroup, PendingRow, TaskRow
from service.domain.states import TaskState
from service.domain.writes import Sample
from service.store.core import Part
from service.store.reads import task_row
from service.store.sql import QUERIES as Q

_S = TaskState
log = logging.getLogger(__name__)


class ConsoleReads(Part):
    """The console's and the metrics' reads; the queue samples."""

    def queue_page(self, *, user: str | None, workload: str | None, offset: int,
                   limit: int, reason: WaitKind | None = None
                   ) -> tuple[list[PendingRow], int]:
        """One page of the runnable tasks in queue order (positions counted in the whole
        queue), of ``user`` / ``workload`` / kind of reason only when given; and how many
        match."""
        params = {"user": user, "workload": workload, "offset": offset, "limit": limit,
                  "reason": None if reason is None else WaitKind(reason).value}
        with self._snapshot() as conn:
            rows = conn.execute(Q["queue_pending_page"], params).fetchall()
            total = conn.execute(Q["queue_pending_count"], params).fetchone()["n"]
        return [PendingRow(
            seq=r["seq"], task_id=r["task_id"], state=TaskState(r["state"]),
            workload=r["workload"], user=r["user"], nnodes=r["nnodes"],
            n_gpus_per_node=r["n_gpus_per_node"], created_at=r["created_at"],
            runnable_since=r["runnable_since"], next_run_at=r["next_run_at"],
            pending_reason=r["pending_reason"], cancel_requested_at=r["cancel_requested_at"],
            attempts=r["latest_attempt_no"], queue_position=r["queue_position"],
            priority=r["priority"], reason_kind=r["reason_kind"],
            labels_json=r["labels_json"],
        ) for r in rows], total

    def pending_workloads(self) -> list[str]:
        """The workloads of the runnable tasks (the queue page's filter choices)."""
        return sorted(r["workload"] for r in self._reader().execute(Q["workloads"]))

    def pending_groups(self) -> list[PendingGroup]:
        """The runnable tasks counted by workload, owner and the kind of their reason."""
        return [PendingGroup(r["workload"], r["user"], r["reason_kind"], r["n"], r["since"])
                for r in self._reader().execute(Q["pending_groups"])]

    def admitted_between(self, since: float, until: float) -> list[Admitted]:
        """Attempts claimed in ``(since, until]``, with how long their task waited."""
        rows = self._reader().execute(Q["admitted_since"], {"since": since, "until": until})
        return [Admitted(r["workload"], r["user"], max(0.0, r["waited_s"]), r["created_at"])
                for r in rows]

    def queue_sizes(self) -> tuple[int, int]:
        """(runnable tasks, active tasks): two indexed counts."""
        with self._snapshot() as conn:
            pending = conn.execute(Q["runnable_count"]).fetchone()["n"]
            running = conn.execute(Q["active_count"]).fetchone()["n"]
        return pending, running

    def last_sample_ts(self) -> float | None:
        return self._reader().execute(Q["last_sample_ts"]).fetchone()["ts"]

    def record_sample(self, sample: Sample, keep_s: float) -> None:
        """Add a sample and delete those older than ``keep_s`` before it (bounded table)."""
        with self._tx() as conn:
            conn.execute(Q["insert_sample"], {
                "ts": sample.ts, "pending": sample.pending, "running": sample.running,
                "gpus_used": sample.gpus_used, "gpus_total": sample.gpus_total})
            conn.execute(Q["delete_samples_before"], {"before": sample.ts - keep_s})

    def samples_since(self, since: float) -> list[Sample]:
        rows = self._reader().execute(Q["samples_since"], {"since": since}).fetchall()
        return [Sample(r["ts"], r["pending"], r["running"], r["gpus_used"], r["gpus_total"])
                for r in rows]

    def task_jobspec(self, task_id: str) -> str | None:
        """The JobSpec text of a task, as it was submitted."""
        row = self._reader().execute(Q["task_jobspec"], {"task_id": task_id}).fetchone()
        return None if row is None else row["jobspec_yaml"]

    def active_tasks(self) -> list[TaskRow]:
        """SUBMITTING / SUBMITTED / RUNNING tasks with their latest attempt, in queue order
        (without reading the runnable ones, however many)."""
        return [task_row(r, None) for r in self._reader().execute(Q["queue_running"])]

    def recent_finished(self, limit: int, user: str | None = None) -> list[TaskRow]:
        """The newest ``limit`` finished tasks (``user``'s only when given), newest first."""
        with self._snapshot() as conn:
            ids = [r["task_id"] for r in conn.execute(
                Q["recent_finished"], {"limit": limit, "user": user})]
            rows = [conn.execute(Q["get_task"], {"task_id": i}).fetchone() for i in ids]
        return [task_row(r, None) for r in rows if r is not None]
