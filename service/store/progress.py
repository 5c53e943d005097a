"""Training progress in the store: what the log follower read of each attempt's driver
log (``record_progress``, guarded by the offset it read from) and its reads: where it left
an attempt, a task's progress, the training curves (``Store.progress``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from service.domain.progress import Point, Progress
from service.domain.rows import FollowState, ProgressRow
from service.domain.states import TaskState
from service.domain.writes import ProgressUpdate
from service.policy.progress import with_total
from service.store.core import Part, StaleProgress
from service.store.sql import QUERIES as Q


def _progress(r: sqlite3.Row | Mapping[str, Any]) -> Progress:
    return Progress(step=r["step"], total=r["total_steps"], resumed_from=r["resumed_from"],
                    first_step=r["first_step"], first_at=r["first_at"], last_at=r["last_at"])


def _jobspec_total(r: sqlite3.Row | Mapping[str, Any]) -> int | None:
    total = r["jobspec_total"]
    ok = isinstance(total, int) and not isinstance(total, bool) and total >= 1
    return total if ok else None


# the progress columns a task's page reads with the prefix p_ (the task_page query)
PROGRESS_COLUMNS = ("attempt_no", "step", "total_steps", "resumed_from", "first_step",
                    "first_at", "last_at", "updated_at")


def progress_of_page(r: sqlite3.Row) -> ProgressRow | None:
    """The progress in a ``task_page`` row (None: never followed)."""
    if r["p_attempt_no"] is None:
        return None
    return _progress_row({"task_id": r["task_id"], "state": r["state"],
                          "jobspec_total": r["jobspec_total"],
                          **{name: r[f"p_{name}"] for name in PROGRESS_COLUMNS}})


def _progress_row(r: sqlite3.Row | Mapping[str, Any]) -> ProgressRow:
    return ProgressRow(task_id=r["task_id"], state=TaskState(r["state"]),
                       attempt_no=r["attempt_no"],
                       progress=with_total(_progress(r), _jobspec_total(r)),
                       updated_at=r["updated_at"])


class ProgressStore(Part):
    """The log follower's write and the progress reads."""

    def record_progress(self, update: ProgressUpdate, now: float) -> None:
        """What one read of an attempt's driver log added (``ProgressUpdate``), in one
        transaction guarded by the offset it read from; ``StaleProgress`` if that moved."""
        key = {"task_id": update.task_id, "attempt_no": update.attempt_no}
        p = update.progress
        with self._tx() as conn:
            conn.execute(Q["insert_progress"], {**key, "now": now})
            moved = conn.execute(Q["update_progress"], {
                **key, "expected_offset": update.expected_offset,
                "log_offset": update.log_offset, "step": p.step, "total_steps": p.total,
                "resumed_from": p.resumed_from, "first_step": p.first_step,
                "first_at": p.first_at, "last_at": p.last_at, "rate": p.rate,
                "eta_at": p.eta_at, "now": now,
            }).rowcount
            if moved != 1:
                raise StaleProgress(update.task_id, update.attempt_no, update.expected_offset)
            ids = {name: conn.execute(Q["upsert_series"], {
                **key, "key": name, "stride": stride, "seen": seen}).fetchone()["series_id"]
                for name, (stride, seen) in update.series.items()}
            conn.executemany(Q["put_point"], [
                {"series_id": ids[pt.key], "step": pt.step, "value": pt.value}
                for pt in update.points])
            conn.executemany(Q["delete_point"], [
                {"series_id": ids[name], "step": step} for name, step in update.dropped])

    def follow_state(self, task_id: str, attempt_no: int) -> FollowState | None:
        """Where the log follower left an attempt (None: no such task)."""
        params = {"task_id": task_id, "attempt_no": attempt_no}
        with self._snapshot() as conn:
            head = conn.execute(Q["follow_state"], params).fetchone()
            points = conn.execute(Q["follow_points"], params).fetchall()
        if head is None:
            return None
        series: dict[str, tuple[int, int]] = {}
        steps: dict[str, list[int]] = {}
        for r in points:
            series[r["key"]] = (r["stride"], r["seen"])
            kept = steps.setdefault(r["key"], [])
            if r["step"] is not None:
                kept.append(r["step"])
        followed = head["log_offset"] is not None
        return FollowState(
            jobspec_total=_jobspec_total(head),
            log_offset=head["log_offset"] if followed else 0,
            progress=_progress(head) if followed else Progress(),
            series=series, steps={k: tuple(v) for k, v in steps.items()})

    def task_progress(self, task_id: str) -> ProgressRow | None:
        """The progress of the task's latest attempt (None: not followed yet)."""
        row = self._reader().execute(Q["task_progress"], {"task_id": task_id}).fetchone()
        return None if row is None else _progress_row(row)

    def active_progress(self) -> dict[str, ProgressRow]:
        """``{task_id: progress}`` of the active tasks' followed attempts."""
        return {r["task_id"]: _progress_row(r)
                for r in self._reader().execute(Q["active_progress"])}

    def metric_keys(self, task_id: str) -> list[str]:
        """The metric names any attempt of the task logged, sorted."""
        return [r["key"] for r in self._reader().execute(Q["metric_keys"],
                                                         {"task_id": task_id})]

    def metric_points(self, task_id: str, keys: Iterable[str]) -> list[Point]:
        """The kept points of ``keys`` over all the task's attempts."""
        rows = self._reader().execute(Q["metric_points"], {
            "task_id": task_id, "keys": json.dumps(list(keys))})
        return [Point(r["attempt_no"], r["key"], r["step"], r["value"]) for r in rows]
