"""The real Ray adapter behind ``service.cluster.boundary.Cluster``.

Jobs (submit / info / list / stop / logs) go through ``ray.job_submission.JobSubmissionClient``
(the progress follower's ``log_since`` through a log-tail stream per job, ``ray_logtail``),
created lazily and re-created after a connection error (its constructor already talks to
the job server). Placement groups come from the state API
(``ray.util.state.list_placement_groups``), over the same dashboard address.

Free resources per node: verl's check reads ``ray._private.state.available_resources_per_node()``,
which needs ``ray.init()`` (the service would become a Ray driver: a registered job, a
core worker, and a process that lives and dies with the cluster) and sits on
``GlobalStateAccessor``, whose GCS client *terminates the process* once the GCS has been
unreachable for 60 s (measured on Ray 2.60: "Failed to connect to GCS within 60 seconds
... The program will terminate"). A head restart must not kill the service, so the
snapshot uses the Python ``ray._raylet.GcsClient`` instead: a plain gRPC client of the
GCS, no driver registered, nothing held, every call with a timeout, and it survives a
dead GCS (it raises ``RpcError``). It reads the same GCS resource view:
``get_all_node_info`` for the alive nodes and their IPs, ``get_all_resource_usage`` for
each node's available resources. As in verl's view a resource at 0 is left out.

Timeouts: the Jobs SDK has no per-call timeout (``requests`` without ``timeout=``), so
every call runs on a small thread pool and the caller waits ``settings.ray_timeout_s`` at
most; a call past that raises ``ClusterUnavailable`` and the client is dropped. Calls still
stuck in the pool count against a small limit, past which new calls fail at once instead
of queueing without bound. Client construction is single-flight: while one connect is
under way (a dead GCS takes ~40 s to give up) other callers do not start another.

Addresses: fixed ones from config, or the head's record (``service.cluster.address``),
asked before every call; a new address or generation drops the cached clients (a
``JobSubmissionClient`` and a ``GcsClient`` are bound to one head) and the learnt driver
job ids, so a moved or restarted head is followed without a service restart.

The pure mapping of what the SDK returns lives in ``service.cluster.mapping``. Only this module
imports ``ray``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from service.cluster.address import RayAddress, address_source
from service.cluster.boundary import (
    ClusterSnapshot,
    ClusterUnavailable,
    FenceJob,
    JobInfo,
    JobNotFound,
    LogChunk,
    NodeResources,
    SubmitRequest,
    chunk_of,
)
from service.cluster.fence import fence_of
from service.cluster.jobreads import JobReadCosts
from service.cluster.logtail import LogTails
from service.cluster.mapping import (
    bound_by_placement,
    classify_error,
    free_resources,
    held_per_node,
    job_info_from_details,
    pg_reserved_per_node,
    placement_summary,
)
from service.config import Settings, thaw
from service.domain.nodes import unique_names
from service.domain.states import RayStatus

T = TypeVar("T")
log = logging.getLogger(__name__)

_MAX_OUTSTANDING = 8  # calls running on the pool at once (stuck ones included)
_NODE_ALIVE = 0  # GcsNodeInfo.GcsNodeState.ALIVE


class RayCluster:
    """``service.cluster.boundary.Cluster`` on a real Ray cluster (thread-safe).

    ``source`` says where Ray is: fixed addresses, or a locator (``HeadLocator``) asked
    before every call. When it names another address or generation, the cached clients
    and the learnt driver job ids are dropped and the next call connects anew.
    """

    def __init__(self, settings: Settings,
                 source: RayAddress | Callable[[], RayAddress] | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        source = address_source(settings) if source is None else source
        self._fixed = source if isinstance(source, RayAddress) else None
        self._locate = None if isinstance(source, RayAddress) else source
        self._timeout = settings.ray_timeout_s
        self._pool = ThreadPoolExecutor(max_workers=_MAX_OUTSTANDING,
                                        thread_name_prefix="ray-call")
        self._slots = threading.BoundedSemaphore(_MAX_OUTSTANDING)
        self._lock = threading.Lock()
        self._target_now: RayAddress | None = None
        # (address it talks to, Future of the client), or None
        self._jobs: tuple[RayAddress, Future] | None = None  # JobSubmissionClient
        self._gcs: tuple[RayAddress, Future] | None = None  # GcsClient
        # Driver job id (hex) of in-flight submissions on _target_now: it maps placement
        # groups (creator_job_id) back to attempts. A job's id never changes; a new head
        # numbers its jobs from the start again, so the map is dropped with the address.
        self._job_ids: dict[str, str] = {}
        self._tails = LogTails(self._timeout)  # driver logs followed (log_since)
        self._clock = clock  # times job reads (``job_infos`` picks the cheaper way)
        self._read_costs = JobReadCosts()  # of _target_now's job server

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._tails.close()

    # -- plumbing ---------------------------------------------------------------------
    def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future:
        if not self._slots.acquire(blocking=False):
            raise ClusterUnavailable(
                f"{_MAX_OUTSTANDING} calls to Ray are still outstanding; Ray is not answering"
            )
        try:
            fut = self._pool.submit(fn, *args, **kwargs)
        except RuntimeError as exc:  # pool shut down
            self._slots.release()
            raise ClusterUnavailable(f"Ray adapter is closed: {exc}") from exc
        fut.add_done_callback(lambda _f: self._slots.release())
        return fut

    def _wait(self, fut: Future, what: str) -> Any:
        try:
            return fut.result(timeout=self._timeout)
        except FutureTimeout:
            raise ClusterUnavailable(
                f"Ray did not answer {what} within {self._timeout:g}s"
            ) from None

    def _target(self) -> RayAddress:
        """Where Ray is now; a change drops what belonged to the previous address."""
        if self._fixed is not None:
            target = self._fixed
        else:
            assert self._locate is not None
            # On the pool, bounded by the timeout: the record may sit on a hung NFS mount.
            target = self._wait(self._run(self._locate), "a read of the head record")
        with self._lock:
            if target != self._target_now:
                if self._target_now is not None:
                    log.info("Ray moved: job server %s, GCS %s, generation %s (was %s, %s, %s)",
                             target.job_server_url, target.gcs_address, target.generation,
                             self._target_now.job_server_url, self._target_now.gcs_address,
                             self._target_now.generation)
                self._target_now = target
                self._jobs = self._gcs = None
                self._job_ids.clear()
                self._read_costs = JobReadCosts()
        return target

    def _client(self, slot: str, target: RayAddress, factory: Callable[[RayAddress], Any],
                what: str) -> Any:
        """The client in ``slot`` for ``target``, connecting once (single-flight) if needed."""
        with self._lock:
            held: tuple[RayAddress, Future] | None = getattr(self, slot)
            if held is None or held[0] != target or (
                    held[1].done() and held[1].exception() is not None):
                held = (target, self._run(factory, target))
                setattr(self, slot, held)
        try:
            return self._wait(held[1], f"a connect to {what}")
        except ClusterUnavailable:
            raise
        except Exception as exc:
            raise ClusterUnavailable(f"cannot connect to {what}: {exc}") from exc

    def _drop(self, slot: str) -> None:
        with self._lock:
            setattr(self, slot, None)

    def _jobs_call(self, target: RayAddress, op: str, method: str, *args: Any,
                   sid: str = "", **kwargs: Any) -> Any:
        client = self._client("_jobs", target, self._make_jobs_client,
                              f"the Ray job server at {target.job_server_url}")
        try:
            return self._wait(self._run(getattr(client, method), *args, **kwargs), op)
        except Exception as exc:
            err = classify_error(exc, op=op, submission_id=sid)
            if isinstance(err, ClusterUnavailable):
                self._drop("_jobs")
            raise err from exc

    def _gcs_client(self, target: RayAddress) -> Any:
        return self._client("_gcs", target, self._make_gcs_client,
                            f"the Ray GCS at {target.gcs_address}")

    def _make_jobs_client(self, target: RayAddress) -> Any:
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(target.job_server_url)

    def _make_gcs_client(self, target: RayAddress) -> Any:
        # A GcsClient towards a closed port retries for the whole timeout and leaves its
        # thread blocked; a plain TCP connect says "refused" at once, so a dead head shows
        # up as a pending_reason within a tick instead of after ray_timeout_s.
        host, _, port = target.gcs_address.rpartition(":")
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)),
                                      timeout=min(2.0, self._timeout)):
            pass
        from ray._raylet import GcsClient

        return GcsClient(address=target.gcs_address)

    # -- Cluster protocol -------------------------------------------------------------
    def submit(self, req: SubmitRequest) -> None:
        self._jobs_call(
            self._target(), "submit", "submit_job", sid=req.submission_id,
            entrypoint=req.entrypoint,
            submission_id=req.submission_id,
            runtime_env=thaw(req.runtime_env),
            entrypoint_num_cpus=req.entrypoint_num_cpus,
            entrypoint_resources=thaw(req.entrypoint_resources),
            metadata=dict(req.metadata),
        )

    def job_info(self, submission_id: str) -> JobInfo:
        return job_info_from_details(submission_id,
                                     self._job_details(self._target(), submission_id))

    def job_infos(self, submission_ids: Collection[str]) -> dict[str, JobInfo]:
        """One ``list_jobs`` or one ``get_job_info`` per id, whichever costs less lately
        (``service.cluster.jobreads``). An id the listing lacks is asked on its own before
        it is called unknown (a job submitted after the listing was cut). The driver job
        ids the replies carry are kept for the snapshot, which then asks for none."""
        wanted = sorted(set(submission_ids))
        if not wanted:
            return {}
        target = self._target()
        with self._lock:
            use_list = self._read_costs.use_list(len(wanted))
        found: dict[str, Any] = {}
        if use_list:
            found = self._listed(target, set(wanted))
        for sid in wanted:
            if sid not in found:
                with contextlib.suppress(JobNotFound):
                    found[sid] = self._job_details(target, sid)
        with self._lock:
            if self._target_now == target:
                self._job_ids.update({sid: str(d.job_id) for sid, d in found.items()
                                      if getattr(d, "job_id", None)})
        return {sid: job_info_from_details(sid, d) for sid, d in found.items()}

    def read_costs(self) -> JobReadCosts:
        """A copy of what job reads cost lately on the current head (for benchmarks)."""
        with self._lock:
            return dataclasses.replace(self._read_costs)

    def _listed(self, target: RayAddress, wanted: set[str]) -> dict[str, Any]:
        """``JobDetails`` of the ``wanted`` jobs among all the head lists, the listing
        timed. A listing that fails counts as too dear (read one by one from then on, the
        listing tried again now and then): a head whose history has grown past the timeout
        must not look unreachable. If Ray is really down, the per-job reads say so."""
        started = self._clock()
        try:
            listed = self._jobs_call(target, "list_jobs", "list_jobs")
        except ClusterUnavailable as exc:
            log.warning("listing Ray's jobs failed (%s); reading them one by one", exc)
            self._note_cost(target, JobReadCosts.note_list, math.inf)
            return {}
        self._note_cost(target, JobReadCosts.note_list, self._clock() - started)
        return {d.submission_id: d for d in listed if d.submission_id in wanted}

    def _job_details(self, target: RayAddress, sid: str) -> Any:
        """The SDK's ``JobDetails`` of one job, its read timed."""
        started = self._clock()
        details = self._jobs_call(target, "job_info", "get_job_info", sid, sid=sid)
        self._note_cost(target, JobReadCosts.note_call, self._clock() - started)
        return details

    def _note_cost(self, target: RayAddress, note: Callable[[JobReadCosts, float], None],
                   seconds: float) -> None:
        with self._lock:
            if self._target_now == target:
                note(self._read_costs, seconds)

    def fences(self) -> list[FenceJob]:
        """The fences among every job the head lists, those not ended."""
        out = []
        for d in self._jobs_call(self._target(), "list_jobs", "list_jobs"):
            status = RayStatus(str(getattr(d.status, "value", d.status)))
            fence = fence_of(d.submission_id or "", getattr(d, "metadata", None), status)
            if fence is not None and not status.is_terminal():
                out.append(fence)
        return out

    def stop(self, submission_id: str) -> None:
        self._jobs_call(self._target(), "stop", "stop_job", submission_id, sid=submission_id)

    def logs(self, submission_id: str) -> str:
        return self._jobs_call(self._target(), "logs", "get_job_logs", submission_id,
                               sid=submission_id)

    def log_since(self, submission_id: str, offset: int, max_chars: int) -> LogChunk:
        """From the job's log-tail stream (``ray_logtail``: each part of the log crosses
        the wire once); the whole log, cut at ``offset``, where no stream can answer."""
        chunk = self._tails.read(self._target().job_server_url, submission_id, offset,
                                 max_chars)
        if chunk is not None:
            return chunk
        return chunk_of(self.logs(submission_id), offset, max_chars)

    def snapshot(self, submission_ids: Collection[str]) -> ClusterSnapshot:
        """Driver job ids first, placement groups second, free resources last.

        The placement-group and free-resource reads are not atomic. A gang placed between
        them shows as not held (its need stays reserved) and its GPUs as taken: counted
        twice, so admission waits a tick. In the other order the same race shows the GPUs
        as held *and* free, and admission would submit another task into them (which
        verl's fail-fast check then kills). The free view itself lags the placement group
        table; ``bound_by_placement`` covers that. The job ids come first: a driver that
        registers after that read is mapped on the next snapshot, and until then its
        groups count as someone else's (taken, never free).
        """
        target = self._target()
        # A dead head is reported as "GCS ... refused" at once (the connect probes the port
        # and is cached once it succeeds), before the state API's longer complaint.
        self._gcs_client(target)
        job_to_sid = self._driver_jobs(target, submission_ids)
        pgs = self._placement_groups(target)
        held, pending = placement_summary(pgs, job_to_sid)
        nodes = bound_by_placement(self._gcs_nodes(target), pg_reserved_per_node(pgs))
        return ClusterSnapshot(nodes=nodes, held_gpus=held, pending_pg_since=pending,
                               held_on=held_per_node(pgs, job_to_sid))

    # -- snapshot parts ---------------------------------------------------------------
    def _driver_jobs(self, target: RayAddress, submission_ids: Collection[str]
                     ) -> dict[str, str]:
        """Driver job id -> submission id for ``submission_ids``.

        An id is learnt once (``get_job_info``) and kept while its submission is asked
        about; a job whose driver has not registered yet has none (and no placement group
        either), nor has a job Ray does not know: both are asked again next time.
        """
        wanted = set(submission_ids)
        with self._lock:
            known = {sid: jid for sid, jid in self._job_ids.items() if sid in wanted}
        for sid in sorted(wanted - known.keys()):
            try:
                details = self._job_details(target, sid)
            except JobNotFound:
                continue
            if details.job_id:
                known[sid] = str(details.job_id)
        with self._lock:
            if self._target_now == target:
                self._job_ids = dict(known)
        return {jid: sid for sid, jid in known.items()}

    def _gcs_nodes(self, target: RayAddress) -> tuple[NodeResources, ...]:
        gcs = self._gcs_client(target)
        timeout = max(1, int(self._timeout))

        def read() -> tuple[NodeResources, ...]:
            infos = gcs.get_all_node_info(timeout=timeout)
            usage = gcs.get_all_resource_usage(timeout=timeout)
            available = {u.node_id: dict(u.resources_available)
                         for u in usage.resource_usage_data.batch}
            alive = [(node_id, info) for node_id, info in infos.items()
                     if info.state == _NODE_ALIVE]
            names = unique_names([(node_id.hex(), dict(info.labels), info.node_name)
                                  for node_id, info in alive])
            out = []
            for (node_id, info), name in zip(alive, names, strict=True):
                raw = node_id.binary()
                out.append(NodeResources(node_id=node_id.hex(),
                                         node_ip=info.node_manager_address,
                                         free=free_resources(available.get(raw, {})),
                                         total=free_resources(dict(info.resources_total)),
                                         name=name))
            return tuple(sorted(out, key=lambda n: (n.node_ip, n.node_id)))

        try:
            return self._wait(self._run(read), "a GCS resource read")
        except Exception as exc:
            self._drop("_gcs")
            if isinstance(exc, ClusterUnavailable):
                raise
            raise ClusterUnavailable(f"Ray GCS at {target.gcs_address}: {exc}") from exc

    def _placement_groups(self, target: RayAddress) -> list[dict[str, Any]]:
        from ray.util.state import list_placement_groups

        timeout = max(1, int(self._timeout))
        try:
            pgs = self._wait(self._run(
                list_placement_groups, address=target.job_server_url,
                filters=[("state", "!=", "REMOVED")], detail=True, timeout=timeout,
                raise_on_missing_output=False,
            ), "a placement group listing")
        except ClusterUnavailable:
            raise
        except Exception as exc:
            first = str(exc).split(". ", 1)[0]  # the SDK appends a page of generic advice
            raise ClusterUnavailable(
                f"Ray state API at {target.job_server_url}: {first}") from exc
        return [pg if isinstance(pg, dict) else pg.__dict__ for pg in pgs]
