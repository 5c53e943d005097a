"""What the Ray SDK returns, mapped to the cluster boundary's types (pure functions).

Error classification, time units, verl's view of free resources, and what placement groups
say: GPUs held and groups waiting per submission, resources reserved per node, and the
bound those reservations put on a node's free view. The adapter (``service.cluster.raycluster``)
does the calls; everything here is tested by table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from service.cluster.boundary import (
    ClusterError,
    ClusterUnavailable,
    JobAlreadyExists,
    JobInfo,
    JobNotFound,
    NodeResources,
    SubmitRejected,
)
from service.domain.states import RayStatus


def _status_code(text: str) -> int | None:
    """The HTTP status in the SDK's ``RuntimeError("Request failed with status code N: ...")``."""
    marker = "status code "
    at = text.find(marker)
    if at < 0:
        return None
    digits = text[at + len(marker):at + len(marker) + 3]
    return int(digits) if digits.isdigit() else None


def classify_error(exc: BaseException, *, op: str, submission_id: str = "") -> ClusterError:
    """Map what the Ray SDK raised to the boundary's errors.

    Connection failures, timeouts and 5xx mean "Ray did not answer" (retry later);
    "does not exist" / 404 means the job is gone; "already exists" on submit means the
    attempt was submitted before; other 4xx on submit, and the SDK's own argument checks
    (``ValueError``/``TypeError`` from runtime_env validation) are a refusal for good.
    """
    if isinstance(exc, ClusterError):
        return exc
    text = str(exc)
    short = text if len(text) <= 500 else text[:500] + "..."
    # TimeoutError is also what concurrent.futures raises (the same class since 3.11);
    # requests' errors are OSErrors too.
    if isinstance(exc, OSError | TimeoutError):
        return ClusterUnavailable(f"Ray job server unreachable during {op}: {short}")
    code = _status_code(text)
    if op == "submit" and "already exists" in text:
        return JobAlreadyExists(f"{submission_id}: {short}")
    if code == 404 or "does not exist" in text:
        return JobNotFound(f"{submission_id}: {short}")
    if code is not None and code >= 500:
        return ClusterUnavailable(f"Ray job server error during {op}: {short}")
    if op == "submit" and (code is not None or isinstance(exc, ValueError | TypeError)):
        return SubmitRejected(short)
    return ClusterUnavailable(f"Ray call {op} failed: {type(exc).__name__}: {short}")


def ms_to_s(value: int | float | None) -> float | None:
    """Ray reports job times in epoch milliseconds; the service uses epoch seconds."""
    return None if value is None else float(value) / 1000.0


def job_info_from_details(submission_id: str, details: Any) -> JobInfo:
    """``JobInfo`` from the SDK's ``JobDetails``."""
    return JobInfo(
        submission_id=submission_id,
        status=RayStatus(str(getattr(details.status, "value", details.status))),
        message=details.message or "",
        start_time=ms_to_s(details.start_time),
        end_time=ms_to_s(details.end_time),
        exit_code=getattr(details, "driver_exit_code", None),
        driver_node_id=getattr(details, "driver_node_id", None) or None,
    )


def free_resources(available: Mapping[str, float]) -> dict[str, float]:
    """verl's view of a node: resources at 0 are absent."""
    return {name: float(v) for name, v in available.items() if v > 0}


def placement_summary(pgs: Iterable[Mapping[str, Any]], job_to_sid: Mapping[str, str]
                      ) -> tuple[dict[str, float], dict[str, float]]:
    """(held GPUs, pending-since epoch s) per submission id from state-API PG records.

    A CREATED group holds the GPUs of its bundles; a PENDING or RESCHEDULING group is
    waiting since its creation request reached the GCS.
    """
    held: dict[str, float] = {}
    pending: dict[str, float] = {}
    for pg in pgs:
        sid = job_to_sid.get(str(pg.get("creator_job_id") or ""))
        if sid is None:
            continue
        state = pg.get("state")
        if state == "CREATED":
            gpus = sum(float((b.get("unit_resources") or {}).get("GPU", 0.0))
                       for b in pg.get("bundles") or ())
            if gpus:
                held[sid] = held.get(sid, 0.0) + gpus
        elif state in ("PENDING", "RESCHEDULING"):
            stats = pg.get("stats") or {}
            since_ns = stats.get("creation_request_received_ns")
            if since_ns:
                since = int(since_ns) / 1e9
                pending[sid] = min(pending.get(sid, since), since)
    return held, pending


def held_per_node(pgs: Iterable[Mapping[str, Any]], job_to_sid: Mapping[str, str]
                  ) -> dict[str, dict[str, float]]:
    """GPUs the CREATED placement groups of each submission hold, per node (hex id)."""
    out: dict[str, dict[str, float]] = {}
    for pg in pgs:
        sid = job_to_sid.get(str(pg.get("creator_job_id") or ""))
        if sid is None or pg.get("state") != "CREATED":
            continue
        for bundle in pg.get("bundles") or ():
            node_id = bundle.get("node_id")
            gpus = float((bundle.get("unit_resources") or {}).get("GPU", 0.0))
            if node_id and gpus:
                per_node = out.setdefault(sid, {})
                per_node[str(node_id)] = per_node.get(str(node_id), 0.0) + gpus
    return out


def pg_reserved_per_node(pgs: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Resources the bundles of CREATED placement groups reserve, per node (hex id)."""
    out: dict[str, dict[str, float]] = {}
    for pg in pgs:
        if pg.get("state") != "CREATED":
            continue
        for bundle in pg.get("bundles") or ():
            node_id = bundle.get("node_id")
            if not node_id:
                continue
            reserved = out.setdefault(str(node_id), {})
            for name, amount in (bundle.get("unit_resources") or {}).items():
                reserved[name] = reserved.get(name, 0.0) + float(amount)
    return out


def bound_by_placement(nodes: Iterable[NodeResources],
                       reserved: Mapping[str, Mapping[str, float]]) -> tuple[NodeResources, ...]:
    """Each node's free resources, at most its total minus what CREATED placement groups
    reserve there.

    The GCS marks a placement group CREATED at once, but the per-node free view comes from
    periodic raylet reports: for a moment a gang just placed shows as held *and* free, and
    admission would hand the same GPUs to the next task (whose driver then fails verl's
    check). The placement group table does not lag, so it bounds the view.
    """
    out = []
    for node in nodes:
        taken = reserved.get(node.node_id)
        if not taken or node.total is None:
            out.append(node)
            continue
        free = dict(node.free)
        for name, amount in taken.items():
            if name in node.total:
                free[name] = min(free.get(name, 0.0), node.total[name] - amount)
        out.append(replace(node, free=free_resources(free)))
    return tuple(out)
