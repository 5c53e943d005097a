"""An in-memory cluster for unit tests and benchmarks (the fake at the Ray boundary).

It keeps per-node capacities and allocations so tests can script exactly the situations
the scheduler must handle: a driver that takes its ``worker_node`` slot on submit, a job
that grabs its gang when it starts running, GPUs taken by someone outside Argus, a head
restart that forgets every job, and an unreachable cluster. A fence job
(``service.cluster.fence``) runs at once and holds its node's free resources of the kinds
it names, taking more as they free (each snapshot, before it is read), as the real
fence's driver does every second.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from service.cluster.boundary import (
    ClusterSnapshot,
    ClusterUnavailable,
    FenceJob,
    JobAlreadyExists,
    JobInfo,
    JobNotFound,
    LogChunk,
    NodeResources,
    SubmitRejected,
    SubmitRequest,
    chunk_of,
)
from service.cluster.fence import META_HOLDS, META_NODE_ID, fence_of
from service.domain.states import RayStatus


@dataclass
class _Node:
    node_id: str
    capacity: dict[str, float]
    used: dict[str, float] = field(default_factory=dict)
    name: str = ""

    def free(self) -> dict[str, float]:
        out = {}
        for name, cap in self.capacity.items():
            left = cap - self.used.get(name, 0.0)
            if left > 0:  # verl's view: a resource at 0 is absent
                out[name] = left
        return out

    def take(self, res: Mapping[str, float]) -> None:
        free = self.free()
        for name, amount in res.items():
            if free.get(name, 0.0) < amount:
                raise RuntimeError(f"node {self.node_id}: not enough {name}")
        for name, amount in res.items():
            self.used[name] = self.used.get(name, 0.0) + amount

    def give(self, res: Mapping[str, float]) -> None:
        for name, amount in res.items():
            self.used[name] = self.used.get(name, 0.0) - amount


@dataclass
class FakeJob:
    req: SubmitRequest
    status: RayStatus = RayStatus.PENDING
    message: str = ""
    log: str = ""
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None
    # node_id -> resources this job holds there (driver slot + gang)
    holds: dict[str, dict[str, float]] = field(default_factory=dict)
    gang_gpus: float = 0.0
    pending_pg_since: float | None = None
    driver_node: str | None = None  # where the driver slot was taken


class FakeCluster:
    """Implements ``service.cluster.boundary.Cluster`` in memory; not thread-safe by design."""

    def __init__(self, *, clock: float = 0.0) -> None:
        self.nodes: dict[str, _Node] = {}
        self.jobs: dict[str, FakeJob] = {}
        self.unreachable = False
        self.reject_next: str | None = None
        self.submit_calls: list[str] = []  # the attempts' submits
        self.fence_calls: list[str] = []  # the fences' (service.cluster.fence)
        self.stop_calls: list[str] = []
        self.log_reads: list[tuple[str, int]] = []  # (submission id, offset) per log_since
        self.clock = clock

    # -- scripting helpers -------------------------------------------------------
    def add_node(
        self, node_id: str, *, gpus: float = 4, cpus: float = 16, worker_slots: float = 100,
        name: str | None = None,
    ) -> None:
        """A node; its name (the ``argus.node`` label on Ray) is ``name``, else its id."""
        cap = {"CPU": float(cpus), "GPU": float(gpus), "worker_node": float(worker_slots)}
        self.nodes[node_id] = _Node(node_id, {k: v for k, v in cap.items() if v > 0},
                                    name=name or node_id)

    def remove_node(self, node_id: str) -> None:
        del self.nodes[node_id]

    def occupy(self, node_id: str, **res: float) -> None:
        """Take resources outside Argus (another user's job)."""
        self.nodes[node_id].take(res)

    def release(self, node_id: str, **res: float) -> None:
        self.nodes[node_id].give(res)

    def start(self, submission_id: str, placement: Mapping[str, float] | None = None,
              *, cpus_per_gpu: float = 3.0) -> None:
        """Driver starts; if ``placement`` (node_id -> GPUs) is given, the gang is taken."""
        job = self.jobs[submission_id]
        job.status = RayStatus.RUNNING
        job.start_time = self.clock
        for node_id, gpus in (placement or {}).items():
            res = {"GPU": float(gpus), "CPU": float(gpus) * cpus_per_gpu}
            self.nodes[node_id].take(res)
            held = job.holds.setdefault(node_id, {})
            for k, v in res.items():
                held[k] = held.get(k, 0.0) + v
            job.gang_gpus += float(gpus)

    def hang(self, submission_id: str, since: float) -> None:
        """Driver runs but its placement groups cannot be placed (verl's forever wait)."""
        job = self.jobs[submission_id]
        job.status = RayStatus.RUNNING
        job.start_time = job.start_time or since
        job.pending_pg_since = since

    def finish(self, submission_id: str, status: RayStatus = RayStatus.SUCCEEDED, *,
               message: str = "", log: str = "", exit_code: int | None = None) -> None:
        job = self.jobs[submission_id]
        job.status = status
        job.message = message
        job.log += log
        job.exit_code = exit_code
        job.end_time = self.clock
        job.start_time = job.start_time or self.clock
        self._release(job)

    def write_log(self, submission_id: str, text: str) -> None:
        self.jobs[submission_id].log += text

    def forget_all_jobs(self) -> None:
        """The head restarted: a new cluster with no job history."""
        for job in self.jobs.values():
            self._release(job)
        self.jobs.clear()

    def _release(self, job: FakeJob) -> None:
        for node_id, res in job.holds.items():
            if node_id in self.nodes:
                self.nodes[node_id].give(res)
        job.holds.clear()
        job.pending_pg_since = None

    def _check(self) -> None:
        if self.unreachable:
            raise ClusterUnavailable("fake cluster is unreachable")

    def _fence_of(self, job: FakeJob) -> FenceJob | None:
        return fence_of(job.req.submission_id, job.req.metadata, job.status)

    def _grow_fences(self) -> None:
        """Each running fence takes what is free of its kinds on its node."""
        for job in self.jobs.values():
            fence = self._fence_of(job)
            if fence is None or job.status is not RayStatus.RUNNING:
                continue
            node = self.nodes.get(fence.node_id)
            if node is None:
                continue
            kinds = job.req.metadata.get(META_HOLDS, "").split(",")
            free = node.free()
            grab = {k: free[k] for k in kinds if free.get(k, 0.0) > 0}
            node.take(grab)
            held = job.holds.setdefault(node.node_id, {})
            for k, v in grab.items():
                held[k] = held.get(k, 0.0) + v

    def fence_holds(self, node_id: str) -> dict[str, float]:
        """What the running fences hold on ``node_id`` (for tests)."""
        out: dict[str, float] = {}
        for job in self.jobs.values():
            if self._fence_of(job) is not None:
                for k, v in job.holds.get(node_id, {}).items():
                    out[k] = out.get(k, 0.0) + v
        return out

    # -- Cluster protocol --------------------------------------------------------
    def fences(self) -> list[FenceJob]:
        self._check()
        found = (self._fence_of(job) for job in self.jobs.values())
        return [f for f in found if f is not None and not f.status.is_terminal()]

    def snapshot(self, submission_ids: Collection[str]) -> ClusterSnapshot:
        self._check()
        self._grow_fences()
        nodes = tuple(
            NodeResources(n.node_id, f"10.0.0.{i + 1}", n.free(), dict(n.capacity), n.name)
            for i, n in enumerate(self.nodes.values())
        )
        asked = [(sid, self.jobs[sid]) for sid in submission_ids if sid in self.jobs]
        held = {sid: j.gang_gpus for sid, j in asked if j.holds and j.gang_gpus}
        pending = {sid: j.pending_pg_since for sid, j in asked if j.pending_pg_since is not None}
        held_on = {sid: {node: res["GPU"] for node, res in j.holds.items() if res.get("GPU")}
                   for sid, j in asked if j.gang_gpus}
        return ClusterSnapshot(nodes=nodes, held_gpus=held, pending_pg_since=pending,
                               held_on=held_on)

    def submit(self, req: SubmitRequest) -> None:
        self._check()
        is_fence = bool(req.metadata.get(META_NODE_ID))
        (self.fence_calls if is_fence else self.submit_calls).append(req.submission_id)
        if req.submission_id in self.jobs:
            raise JobAlreadyExists(f"Job with submission_id {req.submission_id} already exists")
        if self.reject_next is not None:
            msg, self.reject_next = self.reject_next, None
            raise SubmitRejected(msg)
        job = FakeJob(req=req)
        if is_fence and self._fence_of(job) is not None:
            job.status = RayStatus.RUNNING  # on the head: it takes nothing to start
            job.start_time = self.clock
            self.jobs[req.submission_id] = job
            self._grow_fences()
            return
        driver = {"worker_node": 1.0, **dict(req.entrypoint_resources)}
        if req.entrypoint_num_cpus:
            driver["CPU"] = float(req.entrypoint_num_cpus)
        for node in self.nodes.values():
            free = node.free()
            if all(free.get(k, 0.0) >= v for k, v in driver.items()):
                node.take(driver)
                job.holds[node.node_id] = dict(driver)
                job.driver_node = node.node_id
                break
        self.jobs[req.submission_id] = job

    def job_info(self, submission_id: str) -> JobInfo:
        self._check()
        job = self.jobs.get(submission_id)
        if job is None:
            raise JobNotFound(submission_id)
        return JobInfo(
            submission_id=submission_id,
            status=job.status,
            message=job.message,
            start_time=job.start_time,
            end_time=job.end_time,
            exit_code=job.exit_code,
            driver_node_id=job.driver_node if job.status is RayStatus.RUNNING else None,
        )

    def job_infos(self, submission_ids: Collection[str]) -> dict[str, JobInfo]:
        out = {}
        for sid in submission_ids:
            try:
                out[sid] = self.job_info(sid)
            except JobNotFound:
                continue
        return out

    def stop(self, submission_id: str) -> None:
        self._check()
        self.stop_calls.append(submission_id)
        job = self.jobs.get(submission_id)
        if job is None:
            raise JobNotFound(submission_id)
        if not job.status.is_terminal():
            self.finish(submission_id, RayStatus.STOPPED, message="Job was intentionally stopped.")

    def logs(self, submission_id: str) -> str:
        self._check()
        job = self.jobs.get(submission_id)
        if job is None:
            raise JobNotFound(submission_id)
        return job.log

    def log_since(self, submission_id: str, offset: int, max_chars: int) -> LogChunk:
        self.log_reads.append((submission_id, offset))
        return chunk_of(self.logs(submission_id), offset, max_chars)
