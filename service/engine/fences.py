"""The fences on Ray's side of a cordon (issue 55): the scheduler's tick keeps one fence
job (``service.cluster.fence``) on each node out of admission, so that Ray places no new
driver or placement group there, and stops it when the node is resumed.

Every ``node_fence_every_s`` (``SchedulerSettings``; 0: off), and at once when the nodes
out of admission change (a resumed node's fence is stopped in the tick that sees the
resume, before admission), after the tick's snapshot and health step: the fences this
service knows are read again (``job_infos``: one per fence, none with no node out and no
fence), ``service.scheduling.fences.plan_fences`` says which to start and stop, and this
step does it. The first run lists Ray's jobs once to find the
fences a previous run of the service left (kept if still wanted, else stopped); a head
restart forgets them, and they are started again. Ray not answering leaves everything as
it is until the next run.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence

from service.cluster.boundary import (
    Cluster,
    ClusterUnavailable,
    FenceJob,
    JobAlreadyExists,
    JobNotFound,
    NodeResources,
    SubmitRejected,
)
from service.cluster.fence import fence_holds, fence_request
from service.config import Settings
from service.engine.ports import SchedulerStore
from service.scheduling.fences import RETRY_S, plan_fences, settling

log = logging.getLogger(__name__)


class FenceKeeper:
    """Starts and stops the fences (see the module docstring)."""

    def __init__(self, store: SchedulerStore, cluster: Cluster, settings: Settings, *,
                 token: Callable[[], str] = lambda: secrets.token_hex(4)) -> None:
        self.store = store
        self.cluster = cluster
        self.every_s = settings.scheduler.node_fence_every_s
        self.holds = fence_holds(settings.entrypoint_resources)
        self.token = token
        self.known: dict[str, FenceJob] = {}  # submission id -> a fence not ended
        self.started: dict[str, float] = {}  # submission id -> when this service saw it start
        self._adopted = False  # Ray's job list read once for a previous run's fences
        self._last_start: dict[tuple[str, str], float] = {}
        self._last_run: float | None = None
        self._last_out: frozenset[str] | None = None  # the nodes out at the last run

    def run(self, now: float, nodes: Sequence[NodeResources]) -> tuple[int, int]:
        """Start and stop fences as the node states want, given the alive ``nodes`` (this
        tick's snapshot): (started, stopped). Every ``every_s``, and at once when the set
        of nodes out of admission changed (a resume frees its node within the tick)."""
        if self.every_s <= 0:
            return 0, 0
        out = frozenset(row.name for row in self.store.nodes.states())
        if (out == self._last_out and self._last_run is not None
                and now - self._last_run < self.every_s):
            return 0, 0
        self._last_run, self._last_out = now, out
        self._last_start = {k: t for k, t in self._last_start.items() if now - t < RETRY_S}
        try:
            if not self._adopted:
                self.known = {f.submission_id: f for f in self.cluster.fences()}
                self.started = {sid: now for sid in self.known}
                self._adopted = True
                if self.known:
                    log.info("fences found on Ray: %s", ", ".join(sorted(self.known)))
            if not out and not self.known:
                return 0, 0
            self._refresh()
            plan = plan_fences(out, nodes, self.known.values(), self._last_start, now,
                               RETRY_S)
            stopped = sum(self._stop(sid) for sid in plan.stop)
            started = sum(self._start(name, node_id, now) for name, node_id in plan.start)
        except ClusterUnavailable as exc:
            self._last_out = None  # tried again next tick
            log.info("fences: Ray did not answer (%s); trying again later", exc)
            return 0, 0
        return started, stopped

    def settling(self, now: float, nodes: Sequence[NodeResources]) -> tuple[str, ...]:
        """The nodes whose fence was just started and does not hold them yet
        (``service.scheduling.fences.settling``): admission waits for them."""
        if not self.started:
            return ()
        started = {(f.node_name, f.node_id): self.started[sid]
                   for sid, f in self.known.items() if sid in self.started}
        return settling(started, nodes, self.holds, now)

    def _refresh(self) -> None:
        """Forget the fences Ray ended or no longer knows (a head restart)."""
        if not self.known:
            return
        infos = self.cluster.job_infos(list(self.known))
        for sid, fence in list(self.known.items()):
            info = infos.get(sid)
            if info is None or info.status.is_terminal():
                del self.known[sid]
                self.started.pop(sid, None)
                why = "unknown to Ray" if info is None else f"{info.status.value} {info.message}"
                log.warning("fence %s of node %s ended: %s", sid, fence.node_name, why.strip())

    def _stop(self, sid: str) -> bool:
        fence = self.known.pop(sid)
        self.started.pop(sid, None)
        try:
            self.cluster.stop(sid)
        except JobNotFound:
            return False
        except ClusterUnavailable:
            self.known[sid] = fence  # stopped again next run
            raise
        log.info("fence %s of node %s stopped", sid, fence.node_name)
        return True

    def _start(self, name: str, node_id: str, now: float) -> bool:
        req = fence_request(name, node_id, self.holds, self.token())
        try:
            self.cluster.submit(req)
        except JobAlreadyExists:
            pass  # a clash of tokens: it is a fence of this node all the same
        except SubmitRejected as exc:
            self._last_start[(name, node_id)] = now
            log.warning("fence for node %s refused by Ray: %s", name, exc)
            return False
        except ClusterUnavailable:
            # it may have reached Ray: known, so the next run asks (absent: started again)
            self.known[req.submission_id] = FenceJob(req.submission_id, name, node_id)
            self.started[req.submission_id] = now
            raise
        self._last_start[(name, node_id)] = now
        self.known[req.submission_id] = FenceJob(req.submission_id, name, node_id)
        self.started[req.submission_id] = now
        log.info("fence %s started on node %s (%s): holds %s", req.submission_id, name,
                 node_id[:12], ", ".join(self.holds))
        return True
