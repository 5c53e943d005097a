"""Accounting reads (``Store.usage``): GPU time per user and per task over a window,
the running ledger. ``usage_summary`` runs on the async store's heavy lane (its cost grows
with the window)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from service.policy.usage import (
    AttemptSpan,
    Summary,
    TaskPart,
    WholeTotals,
    window_totals,
)
from service.store.core import Part
from service.store.sql import QUERIES as Q

TOP_PROBE = 64  # entries of the ordered index walked per top task wanted, before a sort


def _top_whole(conn: sqlite3.Connection, params: dict[str, Any], limit: int
               ) -> list[tuple[str, float]]:
    """The ``limit`` whole tasks that used the most in the window. Over most of history
    they are among the tasks that used the most of all (a walk of the ordered index, no
    sort); a window that holds fewer is read as a range and sorted."""
    mine = "" if params["user"] is None else "_of_user"
    for kind in ("first", "range"):
        rows = [(r["task_id"], r["gpu_seconds"]) for r in conn.execute(
            Q[f"usage_top_whole_{kind}{mine}"],
            {**params, "limit": limit, "probe": TOP_PROBE * limit})]
        if len(rows) == limit:
            break
    return rows


def _span(r: sqlite3.Row) -> AttemptSpan:
    return AttemptSpan(task_id=r["task_id"], attempt_no=r["attempt_no"], user=r["user"],
                       gpus=r["gpus"], start_time=r["start_time"], end_time=r["end_time"],
                       ray_status=r["ray_status"], failure_kind=r["failure_kind"])


class UsageReads(Part):
    """Usage in a window, and the ledger."""

    def usage_spans(self, window_from: float, window_to: float, user: str | None = None
                    ) -> list[AttemptSpan]:
        """Attempts that held their gang at some time in ``[window_from, window_to)``."""
        rows = self._reader().execute(Q["usage_spans"], {
            "from": window_from, "to": window_to, "user": user}).fetchall()
        return [_span(r) for r in rows]

    def usage_summary(self, window_from: float, window_to: float, now: float,
                      user: str | None, task_limit: int) -> Summary:
        """The usage in ``[window_from, window_to)`` (``user``'s only when given): per-user
        totals, and the attempts of the ``task_limit`` tasks that used the most. A task
        whose ended attempts all lie inside the window is summed from its running totals
        (one index entry); attempts are read only for the tasks that cross an edge of the
        window, those running now and the top tasks."""
        params = {"from": window_from, "to": window_to, "now": now, "user": user}
        with self._snapshot() as conn:  # the same totals and attempts throughout
            owners = [user] if user is not None else [
                r["user"] for r in conn.execute(Q["usage_owners"])]
            # a second's slack over the longest span: no rounding hides an edge task
            longest = conn.execute(Q["usage_longest_span"]).fetchone()["longest"] + 1.0
            whole, edges = [], []
            for owner in owners:
                mine = {**params, "user": owner, "longest": longest}
                row = conn.execute(Q["usage_whole_of_user"], mine).fetchone()
                whole.append(WholeTotals(owner, row["gpu_seconds"], row["failed_gpu_seconds"],
                                         row["tasks"], row["attempts"]))
                edges += [r["task_id"] for r in conn.execute(Q["usage_edges_of_user"], mine)]
            parts = self._usage_parts(conn, params, edges)
            top_whole = _top_whole(conn, params, task_limit + len(parts)) if task_limit else []
            users, top = window_totals(whole, parts, top_whole, task_limit)
            spans = [_span(r) for r in conn.execute(Q["usage_spans_of_tasks"], {
                "from": window_from, "to": window_to, "task_ids": json.dumps(top)})
                     ] if top else []
        return Summary(users, spans, sum(u.tasks for u in users))

    @staticmethod
    def _usage_parts(conn: sqlite3.Connection, params: dict[str, Any], edges: list[str]
                     ) -> list[TaskPart]:
        """The attempts of the ``edges`` tasks and those running now, clipped per task."""
        return [TaskPart(r["task_id"], r["user"], r["gpu_seconds"], r["failed_gpu_seconds"],
                         r["attempts"], r["running_attempts"], r["whole_gpu_seconds"])
                for r in conn.execute(Q["usage_parts"], {**params, "edges": json.dumps(edges)})]

    def gpu_seconds_by_user(self) -> dict[str | None, float]:
        """GPU-seconds of every ended attempt, per owner (the store's running ledger)."""
        rows = self._reader().execute(Q["gpu_seconds_by_user"]).fetchall()
        return {r["user"]: float(r["gpu_seconds"] or 0.0) for r in rows}

    def gpu_seconds_in_window(self, window_from: float, window_to: float, now: float
                              ) -> dict[str | None, float]:
        """``{owner: GPU-seconds}`` inside ``[window_from, window_to)``, as
        ``usage.account`` totals them (running attempts counted up to ``now``)."""
        users = self.usage_summary(window_from, window_to, now, None, 0).users
        return {u.user: u.gpu_seconds for u in users if u.gpu_seconds > 0}
