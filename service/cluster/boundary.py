"""The boundary between the service and a Ray cluster.

The scheduler and the API only see ``Cluster``. ``service.cluster.raycluster.RayCluster`` is the
real adapter (Ray Jobs SDK + GCS resource view); ``service.cluster.fake.FakeCluster`` is
the in-memory stand-in for unit tests and benchmarks. Every method is synchronous and
bounded by a timeout in the real adapter; callers treat ``ClusterUnavailable`` as
"try again later", never as a task failure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from service.domain.states import RayStatus


class ClusterError(Exception):
    """Base class of every error raised across the cluster boundary."""


class ClusterUnavailable(ClusterError):
    """Ray (GCS or job server) did not answer: nothing is known, retry later."""


class JobNotFound(ClusterError):
    """Ray does not know this submission id (e.g. the head restarted)."""


class JobAlreadyExists(ClusterError):
    """Ray already has a job with this submission id: the attempt *was* submitted."""


class SubmitRejected(ClusterError):
    """Ray refused the submission for good (bad runtime_env, invalid arguments...)."""


@dataclass(frozen=True, slots=True)
class NodeResources:
    """Free resources of one alive node, verl's way: a resource at 0 is simply absent.

    ``total`` is the node's capacity (None when unknown): it tells a gang that waits for
    room from one that can never fit this cluster as it is. ``name`` is the node's name
    (``service.domain.nodes.name_of``: its ``argus.node`` label, else its Ray NodeName,
    else its id's first 12 hex digits); ``display_name`` fills in the last when empty.
    """

    node_id: str
    node_ip: str
    free: Mapping[str, float]
    total: Mapping[str, float] | None = None
    name: str = ""

    @property
    def display_name(self) -> str:
        return self.name or self.node_id[:12]

    def get(self, name: str) -> float:
        return float(self.free.get(name, 0.0))


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What the scheduler needs to admit a gang, read once per tick.

    ``held_gpus`` maps a ray submission id (one of those the snapshot was asked about) to
    the GPUs its placement groups already hold (bundles of CREATED placement groups made by
    that job's driver). An id that is absent holds nothing yet. The scheduler subtracts
    what in-flight attempts still need but do not hold, so two tasks never count on the
    same free GPUs.
    ``pending_pg_since`` maps a submission id to the epoch seconds since which one of its
    placement groups has been waiting unplaced (for the hung-attempt watch).
    ``held_on`` maps a submission id to the GPUs its placed groups hold per node id (what
    stopping that job would give back where: preemption's arithmetic).
    """

    nodes: tuple[NodeResources, ...]
    held_gpus: Mapping[str, float] = field(default_factory=dict)
    pending_pg_since: Mapping[str, float] = field(default_factory=dict)
    held_on: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    submission_id: str
    entrypoint: str
    runtime_env: Mapping[str, Any]
    entrypoint_num_cpus: float
    entrypoint_resources: Mapping[str, float]
    metadata: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class JobInfo:
    submission_id: str
    status: RayStatus
    message: str = ""
    start_time: float | None = None  # epoch seconds
    end_time: float | None = None  # epoch seconds
    exit_code: int | None = None
    driver_node_id: str | None = None  # hex node id the driver runs on, once Ray says


@dataclass(frozen=True, slots=True)
class FenceJob:
    """One of Argus's own Ray jobs that holds an out-of-admission node's free resources
    (``service.cluster.fence``): never a task's attempt. ``status`` is Ray's word on it."""

    submission_id: str
    node_name: str
    node_id: str
    status: RayStatus = RayStatus.PENDING


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Part of a driver log: ``text`` starts at the offset asked for (in characters) and
    ends at ``end``; ``size`` is the whole log's length when read (``end < size``: more
    to read)."""

    text: str
    end: int
    size: int


def chunk_of(log: str, offset: int, max_chars: int) -> LogChunk:
    """At most ``max_chars`` of ``log`` from ``offset`` (nothing when the log is shorter
    than that: it is not the log the offset was counted in)."""
    text = log[offset:offset + max_chars] if offset <= len(log) else ""
    return LogChunk(text=text, end=offset + len(text), size=len(log))


class Cluster(Protocol):
    def snapshot(self, submission_ids: Collection[str]) -> ClusterSnapshot:
        """Free resources per alive node, and what the placement groups of the jobs
        ``submission_ids`` (the attempts in flight) hold or wait for; other jobs' groups
        count only as taken resources. Raises ClusterUnavailable."""
        ...

    def submit(self, req: SubmitRequest) -> None:
        """Submit one attempt. Raises JobAlreadyExists, SubmitRejected, ClusterUnavailable."""
        ...

    def job_info(self, submission_id: str) -> JobInfo:
        """Raises JobNotFound, ClusterUnavailable."""
        ...

    def job_infos(self, submission_ids: Collection[str]) -> dict[str, JobInfo]:
        """``job_info`` of many jobs at once (the reconcile's read of every attempt on the
        cluster); an id Ray does not know is absent. Raises ClusterUnavailable."""
        ...

    def stop(self, submission_id: str) -> None:
        """Ask Ray to stop the job (no-op when already ended). Raises JobNotFound,
        ClusterUnavailable."""
        ...

    def logs(self, submission_id: str) -> str:
        """Driver log text so far. Raises JobNotFound, ClusterUnavailable."""
        ...

    def fences(self) -> list[FenceJob]:
        """The fence jobs Ray has that have not ended (one listing of every job: read when
        the service starts, to keep or stop what a previous run left). Raises
        ClusterUnavailable."""
        ...

    def log_since(self, submission_id: str, offset: int, max_chars: int) -> LogChunk:
        """At most ``max_chars`` of the driver log from character ``offset`` on (the
        progress follower's incremental read). Raises JobNotFound, ClusterUnavailable."""
        ...
