"""Follows the driver log of every attempt on the cluster: progress and curves.

Each ``poll(now)`` reads, for each SUBMITTED/RUNNING attempt, only what its driver log
gained since the last read (``Cluster.log_since`` from the stored character offset, at
most ``max_read_chars``), parses the complete lines (``progress.parse_line``), folds them
into the attempt's ``Progress``, keeps the metrics' points at each series' stride
(``curves``), and writes it all with ``Store.progress.record_progress``, guarded by the offset it
read from. A line without its newline yet is read again next time.

An attempt that left the cluster since the last poll gets one last read, from the log the
scheduler archived when it ended. What the follower knows lives in the database (offset,
progress, strides), so a restarted service goes on where it stopped; in memory it keeps the
same per followed attempt, loaded on first sight. ``FollowerLoop`` runs ``poll`` in its own
thread, apart from the scheduler's loop: a slow log costs progress, never scheduling.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from service.cluster.boundary import Cluster, ClusterUnavailable, JobNotFound, chunk_of
from service.domain.progress import Point, Progress
from service.domain.rows import ActiveRow
from service.domain.states import ON_CLUSTER
from service.domain.writes import ProgressUpdate
from service.engine.artifacts import Artifacts
from service.engine.ports import FollowerStore
from service.policy.curves import keeps, thin
from service.policy.progress import (
    StepLine,
    advance,
    parse_line,
    split_complete,
    with_total,
)
from service.store.writer import StaleProgress

log = logging.getLogger(__name__)


@dataclass
class _Followed:
    """One attempt as the follower last wrote it."""

    task_id: str
    attempt_no: int
    user: str | None
    offset: int
    progress: Progress
    series: dict[str, tuple[int, int]]  # key: (stride, points received)
    steps: dict[str, list[int]]  # key: the kept steps, in order


@dataclass
class FollowReport:
    followed: int = 0  # attempts read this poll
    chars: int = 0  # log characters parsed
    lines: int = 0
    unreachable: str | None = None  # Ray did not answer (the rest waits for next poll)


@dataclass
class _Batch:
    """What one read adds to one attempt, before it is written."""

    points: dict[tuple[str, int], Point] = field(default_factory=dict)
    series: dict[str, tuple[int, int]] = field(default_factory=dict)
    dropped: list[tuple[str, int]] = field(default_factory=list)


class LogFollower:
    """Reads the new part of each running attempt's driver log (see the module doc)."""

    def __init__(self, store: FollowerStore, cluster: Cluster, artifacts: Artifacts, *,
                 max_points: int, max_read_chars: int) -> None:
        self.store = store
        self.cluster = cluster
        self.artifacts = artifacts
        self.max_points = max_points
        self.max_read_chars = max_read_chars
        self._followed: dict[str, _Followed] = {}  # by ray submission id

    def poll(self, now: float) -> FollowReport:
        report = FollowReport()
        active = {row.ray_submission_id: row for row in self.store.tasks.active(ON_CLUSTER)}
        for sid in [s for s in self._followed if s not in active]:
            self._last_read(sid, self._followed.pop(sid), now, report)
        for sid, row in active.items():
            followed = self._followed.get(sid) or self._load(sid, row)
            if followed is None:
                continue
            try:
                chunk = self.cluster.log_since(sid, followed.offset, self.max_read_chars)
            except JobNotFound:
                continue  # the scheduler finds that out too (CLUSTER_LOST)
            except ClusterUnavailable as exc:
                report.unreachable = str(exc)
                break
            # a line longer than a whole read is no step line: skip it rather than stall
            stuck = chunk.end < chunk.size and "\n" not in chunk.text
            self._consume(sid, followed, chunk.text, now, report, whole=stuck)
        return report

    def _load(self, sid: str, row: ActiveRow) -> _Followed | None:
        state = self.store.progress.follow_state(row.task_id, row.attempt_no)
        if state is None:
            return None
        followed = _Followed(
            task_id=row.task_id, attempt_no=row.attempt_no, user=row.user,
            offset=state.log_offset,
            progress=with_total(state.progress, state.jobspec_total),
            series=dict(state.series), steps={k: list(v) for k, v in state.steps.items()})
        self._followed[sid] = followed
        return followed

    def _last_read(self, sid: str, followed: _Followed, now: float,
                   report: FollowReport) -> None:
        """The attempt ended: what its archived log has past the offset (best effort)."""
        try:
            text = self.artifacts.read_log(sid, followed.user)
        except OSError as exc:
            log.warning("archived log of %s unreadable: %s", sid, exc)
            return
        if text:
            chunk = chunk_of(text, followed.offset, len(text))
            self._consume(sid, followed, chunk.text + "\n", now, report, ended=True)

    def _consume(self, sid: str, followed: _Followed, text: str, now: float,
                 report: FollowReport, *, whole: bool = False, ended: bool = False) -> None:
        lines, used = split_complete(text)
        if whole:
            lines, used = [], len(text)
        if ended:  # the newline added after the archive's last line is not the log's
            used = max(0, used - 1)
        if used == 0:
            return
        report.followed += 1
        report.chars += used
        report.lines += len(lines)
        events = [e for e in map(parse_line, lines) if e is not None]
        progress = advance(followed.progress, events, now)
        batch = _Batch()
        for event in events:
            if isinstance(event, StepLine):
                self._add(followed, event, batch)
        update = ProgressUpdate(
            task_id=followed.task_id, attempt_no=followed.attempt_no,
            expected_offset=followed.offset, log_offset=followed.offset + used,
            progress=progress, points=tuple(batch.points.values()),
            dropped=tuple(batch.dropped), series=batch.series)
        try:
            self.store.progress.record_progress(update, now)
        except StaleProgress as exc:
            log.warning("progress of %s: %s; reloading it", sid, exc)
            self._followed.pop(sid, None)
            return
        followed.offset = update.log_offset
        followed.progress = progress

    def _add(self, followed: _Followed, line: StepLine, batch: _Batch) -> None:
        """The points of one step line at their series' strides, thinning past the cap.
        (``followed`` is updated as it goes; a failed write drops it and reloads.)"""
        for key, value in line.metrics.items():
            steps = followed.steps.setdefault(key, [])
            stride, seen = followed.series.get(key, (1, 0))
            if steps and steps[-1] == line.step:  # validation repeats a step: replace
                batch.points[(key, line.step)] = Point(followed.attempt_no, key, line.step,
                                                       value)
                batch.series[key] = (stride, seen)
                continue
            if keeps(seen, stride):
                steps.append(line.step)
                batch.points[(key, line.step)] = Point(followed.attempt_no, key, line.step,
                                                       value)
            seen += 1
            if len(steps) > self.max_points:
                stride, drop = thin(steps, stride, self.max_points)
                gone = set(drop)
                followed.steps[key] = [s for s in steps if s not in gone]
                for step in drop:  # deleted after the batch's puts: gone either way
                    batch.points.pop((key, step), None)
                    batch.dropped.append((key, step))
            followed.series[key] = batch.series[key] = (stride, seen)


class FollowerLoop:
    """Runs ``LogFollower.poll`` every ``poll_s`` in a daemon thread; a failing poll is
    logged and counted, and the loop goes on."""

    def __init__(self, follower: LogFollower, poll_s: float,
                 clock: Callable[[], float] = time.time, *,
                 thread_init: Callable[[], None] | None = None) -> None:
        """``thread_init``: called first in the loop's thread (the leader fences it)."""
        if poll_s <= 0:
            raise ValueError(f"poll_s must be > 0, got {poll_s}")
        self.follower = follower
        self.poll_s = poll_s
        self.clock = clock
        self.thread_init = thread_init
        self.polls = 0
        self.errors = 0
        self.last_report: FollowReport | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("follower loop already started")
        self._thread = threading.Thread(target=self._run, name="argus-log-follower",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        if self.thread_init is not None:
            self.thread_init()
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.poll_s)

    def run_once(self) -> None:
        """One poll; failures are recorded, never raised."""
        try:
            self.last_report = self.follower.poll(self.clock())
        except Exception:  # a bug or a DB hiccup must not end following
            self.errors += 1
            log.exception("log follower poll failed")
            return
        self.polls += 1
