"""The Ray adapter's pure parts: error mapping, time units, placement-group summary."""

from __future__ import annotations

import socket
import time
from concurrent.futures import TimeoutError as FutureTimeout
from types import SimpleNamespace

import pytest

from service.admission import Driver, FreePool, Gang, InFlight
from service.cluster import (
    ClusterUnavailable,
    JobAlreadyExists,
    JobNotFound,
    NodeResources,
    SubmitRejected,
)
from service.config import Settings
from service.ray_cluster import (
    RayCluster,
    bound_by_placement,
    classify_error,
    free_resources,
    job_info_from_details,
    ms_to_s,
    pg_reserved_per_node,
    placement_summary,
)
from service.states import RayStatus

DUP = ("Request failed with status code 500: Traceback ...\nValueError: Job with "
       "submission_id t--a01 already exists. Please use a different submission_id.\n.")


@pytest.mark.parametrize(("exc", "op", "expected"), [
    (ConnectionError("Failed to connect to Ray at address: http://x:8265."), "submit",
     ClusterUnavailable),
    (FutureTimeout(), "job_info", ClusterUnavailable),
    (RuntimeError(DUP), "submit", JobAlreadyExists),
    (RuntimeError("Request failed with status code 404: Job t--a01 does not exist."),
     "job_info", JobNotFound),
    (RuntimeError("Request failed with status code 404: Job t--a01 does not exist."),
     "stop", JobNotFound),
    (RuntimeError("Request failed with status code 500: No available agent."), "submit",
     ClusterUnavailable),
    (RuntimeError("Request failed with status code 400: bad runtime_env"), "submit",
     SubmitRejected),
    (ValueError("Invalid type for worker_process_setup_hook"), "submit", SubmitRejected),
    (RuntimeError("Request failed with status code 400: odd"), "logs", ClusterUnavailable),
])
def test_classify_error(exc, op, expected):
    assert type(classify_error(exc, op=op, submission_id="t--a01")) is expected


def test_already_exists_only_means_submitted_on_submit():
    assert type(classify_error(RuntimeError(DUP), op="stop")) is ClusterUnavailable


def test_job_info_converts_ms_to_epoch_seconds():
    details = SimpleNamespace(status=SimpleNamespace(value="FAILED"), message=None,
                              start_time=1_700_000_000_123, end_time=1_700_000_005_500,
                              driver_exit_code=1)
    info = job_info_from_details("t--a01", details)
    assert info.status is RayStatus.FAILED and info.message == ""
    assert info.start_time == pytest.approx(1_700_000_000.123)
    assert info.end_time == pytest.approx(1_700_000_005.5)
    assert info.exit_code == 1
    assert ms_to_s(None) is None


def test_free_resources_drops_zeros_like_verl():
    assert free_resources({"GPU": 0.0, "CPU": 3.0, "worker_node": 99.0}) == {
        "CPU": 3.0, "worker_node": 99.0}


def test_placement_summary_held_and_pending_by_submission():
    bundle = {"unit_resources": {"CPU": 3.0, "GPU": 1.0}}
    pgs = [
        {"creator_job_id": "02000000", "state": "CREATED", "bundles": [bundle] * 4},
        {"creator_job_id": "02000000", "state": "CREATED", "bundles": [bundle] * 2},
        {"creator_job_id": "03000000", "state": "PENDING", "bundles": [bundle],
         "stats": {"creation_request_received_ns": "1700000000500000000"}},
        {"creator_job_id": "03000000", "state": "PENDING", "bundles": [bundle],
         "stats": {"creation_request_received_ns": 1_700_000_000_000_000_000}},
        {"creator_job_id": "ffffffff", "state": "CREATED", "bundles": [bundle]},
    ]
    held, pending = placement_summary(pgs, {"02000000": "a--a01", "03000000": "b--a01"})
    assert held == {"a--a01": 6.0}
    assert pending == {"b--a01": pytest.approx(1_700_000_000.0)}


def test_closed_gcs_port_is_unavailable_at_once():
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cluster = RayCluster(Settings(ray_address=f"http://127.0.0.1:{port}",
                                  gcs_address=f"127.0.0.1:{port}", ray_timeout_s=10))
    started = time.monotonic()
    try:
        with pytest.raises(ClusterUnavailable, match=r"GCS at 127\.0\.0\.1:\d+.*refused"):
            cluster.snapshot()
    finally:
        cluster.close()
    assert time.monotonic() - started < 5, "a refused connect must not wait for the timeout"


class _GangPlacedBetweenReads(RayCluster):
    """A cluster where job a--a01's 1x4 gang gets placed right after the first read of
    the snapshot, whichever read that is."""

    def __init__(self) -> None:
        super().__init__(Settings())
        self._job_ids["a--a01"] = "02000000"
        self.reads: list[str] = []

    def _make_gcs_client(self) -> object:
        return object()  # reads are stubbed below

    def _placement_groups(self) -> list[dict]:
        placed = bool(self.reads)
        self.reads.append("placement groups")
        bundle = {"unit_resources": {"CPU": 3.0, "GPU": 1.0}}
        return [{"creator_job_id": "02000000", "state": "CREATED",
                 "bundles": [bundle] * 4}] if placed else []

    def _gcs_nodes(self) -> tuple[NodeResources, ...]:
        placed = bool(self.reads)
        self.reads.append("nodes")
        free = {"CPU": 4.0, "worker_node": 99.0} if placed else {
            "CPU": 16.0, "GPU": 4.0, "worker_node": 99.0}
        return (NodeResources("n1", "10.0.0.1", free),)


def test_a_gang_placed_mid_snapshot_is_never_counted_free_and_held():
    cluster = _GangPlacedBetweenReads()
    try:
        snapshot = cluster.snapshot()
    finally:
        cluster.close()
    assert cluster.reads == ["placement groups", "nodes"]
    pool = FreePool.from_snapshot(snapshot, [InFlight("a--a01", Gang(1, 4))])
    decision = pool.decide(Gang(1, 4), Driver({"worker_node": 1.0}, 1.0))
    assert not decision.fits, "the in-flight gang's GPUs were handed out twice"


class _FreeViewLags(_GangPlacedBetweenReads):
    """The gang is placed before both reads, but the free view has not caught up yet
    (raylets report resources periodically): GPUs held by a CREATED group still show free."""

    def _placement_groups(self) -> list[dict]:
        self.reads.append("placement groups")
        bundle = {"node_id": "n1", "unit_resources": {"CPU": 3.0, "GPU": 1.0}}
        return [{"creator_job_id": "02000000", "state": "CREATED", "bundles": [bundle] * 4},
                {"creator_job_id": "09000000", "state": "PENDING", "bundles": [bundle]}]

    def _gcs_nodes(self) -> tuple[NodeResources, ...]:
        self.reads.append("nodes")
        total = {"CPU": 16.0, "GPU": 4.0, "worker_node": 100.0}
        return (NodeResources("n1", "10.0.0.1", {"CPU": 15.0, "GPU": 4.0, "worker_node": 99.0},
                              total),
                NodeResources("n2", "10.0.0.2", {"CPU": 16.0, "GPU": 2.0, "worker_node": 100.0},
                              total))


def test_a_lagging_free_view_is_bounded_by_the_placement_group_table():
    cluster = _FreeViewLags()
    try:
        snapshot = cluster.snapshot()
    finally:
        cluster.close()
    n1, n2 = snapshot.nodes
    assert n1.free == {"CPU": 4.0, "worker_node": 99.0}  # 16 - 12 CPUs, 4 - 4 GPUs: none
    assert n2.free == {"CPU": 16.0, "GPU": 2.0, "worker_node": 100.0}  # no group there
    assert snapshot.held_gpus == {"a--a01": 4.0}
    pool = FreePool.from_snapshot(snapshot, [InFlight("a--a01", Gang(1, 4))])
    assert not pool.decide(Gang(1, 4), Driver({"worker_node": 1.0}, 1.0)).fits


def test_pg_reserved_per_node_and_bound():
    bundle = {"unit_resources": {"CPU": 3.0, "GPU": 1.0}}
    pgs = [{"state": "CREATED", "bundles": [{**bundle, "node_id": "n1"}] * 2
            + [{**bundle, "node_id": "n2"}]},
           {"state": "PENDING", "bundles": [{**bundle, "node_id": None}]},
           {"state": "REMOVED", "bundles": [{**bundle, "node_id": "n1"}]}]
    reserved = pg_reserved_per_node(pgs)
    assert reserved == {"n1": {"CPU": 6.0, "GPU": 2.0}, "n2": {"CPU": 3.0, "GPU": 1.0}}
    unknown_total = NodeResources("n1", "10.0.0.1", {"GPU": 4.0})
    assert bound_by_placement([unknown_total], reserved) == (unknown_total,)
    outside = NodeResources("n2", "10.0.0.2", {"GPU": 1.0}, {"GPU": 4.0, "CPU": 8.0})
    # another user's plain actors hold 2 more GPUs: the view is the tighter bound there
    assert bound_by_placement([outside], reserved)[0].free == {"GPU": 1.0}
