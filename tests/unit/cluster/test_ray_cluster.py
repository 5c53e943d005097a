"""The Ray adapter: error mapping, time units, placement-group summary, and (on fake
clients) where it finds Ray, how it follows a new head, how a snapshot maps groups to jobs."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from types import SimpleNamespace

import pytest

from service.cluster.address import RayAddress
from service.cluster.boundary import (
    ClusterUnavailable,
    JobAlreadyExists,
    JobNotFound,
    NodeResources,
    SubmitRejected,
)
from service.cluster.mapping import (
    bound_by_placement,
    classify_error,
    free_resources,
    held_per_node,
    job_info_from_details,
    ms_to_s,
    pg_reserved_per_node,
    placement_summary,
)
from service.cluster.raycluster import RayCluster
from service.config import Settings
from service.domain.resources import Driver
from service.domain.states import RayStatus
from service.scheduling.admission import FreePool, Gang, InFlight

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
    assert info.exit_code == 1 and info.driver_node_id is None  # not known yet
    assert ms_to_s(None) is None
    running = job_info_from_details("t--a01", SimpleNamespace(
        status="RUNNING", message="", start_time=1, end_time=None, driver_node_id="ab12"))
    assert running.driver_node_id == "ab12"


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


def test_held_per_node_by_submission():
    def bundle(node: str, gpus: float = 1.0) -> dict:
        return {"node_id": node, "unit_resources": {"CPU": 3.0, "GPU": gpus}}

    pgs = [
        {"creator_job_id": "02000000", "state": "CREATED", "bundles": [bundle("n1")] * 4},
        {"creator_job_id": "02000000", "state": "CREATED", "bundles": [bundle("n2")] * 2},
        {"creator_job_id": "03000000", "state": "PENDING", "bundles": [bundle("n1")]},
        {"creator_job_id": "04000000", "state": "CREATED",
         "bundles": [bundle("n3", 0.0), {"node_id": None, "unit_resources": {"GPU": 1}}]},
        {"creator_job_id": "ffffffff", "state": "CREATED", "bundles": [bundle("n1")]},
    ]
    sids = {"02000000": "a--a01", "03000000": "b--a01", "04000000": "c--a01"}
    assert held_per_node(pgs, sids) == {"a--a01": {"n1": 4.0, "n2": 2.0}}


def test_closed_gcs_port_is_unavailable_at_once():
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cluster = RayCluster(Settings(ray_address=f"http://127.0.0.1:{port}",
                                  gcs_address=f"127.0.0.1:{port}", ray_timeout_s=10))
    started = time.monotonic()
    try:
        with pytest.raises(ClusterUnavailable, match=r"GCS at 127\.0\.0\.1:\d+.*refused"):
            cluster.snapshot([])
    finally:
        cluster.close()
    assert time.monotonic() - started < 5, "a refused connect must not wait for the timeout"


# -- an adapter with fake clients: addresses, re-resolution, driver job ids ---------------

HEAD_1 = RayAddress("http://10.0.0.2:8265", "10.0.0.2:6390", "g1")


class Clock:
    """The adapter's monotonic clock; the fake job server moves it by what a call costs."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# What the fake job server's calls cost (seconds): a read of one job, and a listing of
# ``n`` jobs (the head's whole history).
PER_JOB_S = 0.010


def listing_s(n: int) -> float:
    return 0.005 + 0.0005 * n


class FakeJobsClient:
    """Stands in for JobSubmissionClient: knows each submission's driver job id, and
    ``history`` ended jobs more (listed, never asked about)."""

    def __init__(self, target: RayAddress, job_ids: dict[str, str | None],
                 clock: Clock | None = None, history: int = 0) -> None:
        self.target = target
        self.job_ids = job_ids
        self.clock = clock or Clock()
        self.history = history
        self.asked: list[str] = []
        self.listings = 0
        self.listing_fails = False
        self.unlisted: set[str] = set()  # submitted after a listing was cut

    def _details(self, sid: str | None, job_id: str | None,
                 status: str = "RUNNING") -> SimpleNamespace:
        return SimpleNamespace(submission_id=sid, status=SimpleNamespace(value=status),
                               message="", start_time=None, end_time=None,
                               driver_exit_code=None, job_id=job_id)

    def get_job_info(self, sid: str) -> SimpleNamespace:
        self.asked.append(sid)
        self.clock.now += PER_JOB_S
        if sid not in self.job_ids:
            raise RuntimeError(f"Request failed with status code 404: Job {sid} does not exist.")
        return self._details(sid, self.job_ids[sid])

    def list_jobs(self) -> list[SimpleNamespace]:
        self.listings += 1
        if self.listing_fails:
            raise TimeoutError("read timed out")
        jobs = [self._details(sid, jid) for sid, jid in self.job_ids.items()
                if sid not in self.unlisted]
        jobs += [self._details(None if i % 2 else f"old-{i}", f"{i:08x}", "SUCCEEDED")
                 for i in range(self.history)]  # drivers not submitted as jobs: no sid
        self.clock.now += listing_s(len(jobs))
        return jobs

    def stop_job(self, sid: str) -> bool:
        return True


class FakeRay(RayCluster):
    """The adapter on fake clients: every client made is recorded with its address, and
    each snapshot read with the address it went to."""

    def __init__(self, source, *, job_ids: dict[str, str | None] | None = None,
                 pgs: list[dict] | None = None, nodes: tuple[NodeResources, ...] = (),
                 timeout_s: float = 5, history: int = 0) -> None:
        self.clock = Clock()
        super().__init__(Settings(ray_timeout_s=timeout_s), source, clock=self.clock)
        self.history = history
        self.job_ids = job_ids if job_ids is not None else {}
        self.pgs = pgs or []
        self.nodes = nodes
        self.jobs_clients: list[FakeJobsClient] = []
        self.gcs_clients: list[RayAddress] = []
        self.reads: list[tuple[str, str]] = []

    def _make_jobs_client(self, target: RayAddress) -> FakeJobsClient:
        client = FakeJobsClient(target, self.job_ids, self.clock, self.history)
        self.jobs_clients.append(client)
        return client

    def _make_gcs_client(self, target: RayAddress) -> object:
        self.gcs_clients.append(target)
        return object()

    def _placement_groups(self, target: RayAddress) -> list[dict]:
        self.reads.append(("placement groups", target.job_server_url))
        return self.pgs

    def _gcs_nodes(self, target: RayAddress) -> tuple[NodeResources, ...]:
        self._gcs_client(target)
        self.reads.append(("nodes", target.gcs_address))
        return self.nodes

    def asked(self) -> list[str]:
        return [sid for c in self.jobs_clients for sid in c.asked]

    def listings(self) -> int:
        return sum(c.listings for c in self.jobs_clients)


class Source:
    """A locator the test moves: an address, or the reason there is none."""

    def __init__(self, answer: RayAddress | str) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self) -> RayAddress:
        self.calls += 1
        if isinstance(self.answer, str):
            raise ClusterUnavailable(self.answer)
        return self.answer


@pytest.fixture
def make_ray():
    made: list[FakeRay] = []

    def make(source, **kw) -> FakeRay:
        cluster = FakeRay(source, **kw)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def test_clients_are_reused_while_the_address_holds(make_ray):
    source = Source(HEAD_1)
    ray = make_ray(source, job_ids={"a--a01": "02000000"})
    for _ in range(3):
        assert ray.job_info("a--a01").status is RayStatus.RUNNING
    ray.stop("a--a01")
    assert [c.target for c in ray.jobs_clients] == [HEAD_1]
    assert source.calls == 4, "the head's address is asked before every call"


def test_a_new_generation_drops_the_clients_even_at_the_same_address(make_ray):
    source = Source(HEAD_1)
    ray = make_ray(source, job_ids={"a--a01": "02000000"})
    ray.job_info("a--a01")
    ray.snapshot([])
    restarted = replace(HEAD_1, generation="g2")  # same ports, a new cluster behind them
    source.answer = restarted
    ray.job_info("a--a01")
    ray.snapshot([])
    assert [c.target for c in ray.jobs_clients] == [HEAD_1, restarted]
    assert ray.gcs_clients == [HEAD_1, restarted]


def test_a_moved_head_is_followed_by_every_read(make_ray):
    source = Source(HEAD_1)
    ray = make_ray(source)
    ray.snapshot([])
    moved = RayAddress("http://10.0.0.9:8300", "10.0.0.9:7000", "g2")
    source.answer = moved
    ray.snapshot([])
    assert ray.reads == [("placement groups", HEAD_1.job_server_url),
                         ("nodes", HEAD_1.gcs_address),
                         ("placement groups", moved.job_server_url),
                         ("nodes", moved.gcs_address)]
    assert ray.gcs_clients == [HEAD_1, moved]


def test_no_head_means_unavailable_and_nothing_is_called(make_ray):
    source = Source("Ray head record /s/head.json is stale: written 90s ago (ttl 60s)")
    ray = make_ray(source, job_ids={"a--a01": "02000000"})
    for call in (lambda: ray.job_info("a--a01"), lambda: ray.snapshot(["a--a01"]),
                 lambda: ray.stop("a--a01"), lambda: ray.logs("a--a01")):
        with pytest.raises(ClusterUnavailable, match=r"head\.json is stale"):
            call()
    assert ray.jobs_clients == [] and ray.gcs_clients == [] and ray.reads == []
    source.answer = HEAD_1  # a fresh record appears: the next call goes through
    assert ray.job_info("a--a01").status is RayStatus.RUNNING


def test_a_hung_locator_is_bounded_by_the_timeout(make_ray):
    release = threading.Event()

    def hung() -> RayAddress:
        release.wait(30)
        return HEAD_1

    ray = make_ray(hung, timeout_s=0.2)
    try:
        with pytest.raises(ClusterUnavailable, match=r"a read of the head record within 0\.2s"):
            ray.job_info("a--a01")
    finally:
        release.set()


def test_fixed_addresses_from_config_are_used_as_they_are(make_ray):
    fixed = RayAddress("http://127.0.0.1:8265", "127.0.0.1:6379")
    ray = make_ray(fixed, job_ids={"a--a01": None})
    ray.job_info("a--a01")
    ray.snapshot([])
    assert [c.target for c in ray.jobs_clients] == [fixed] and ray.gcs_clients == [fixed]


def _pg(job_id: str, state: str = "CREATED", gpus: int = 4) -> dict:
    bundle = {"node_id": "n1", "unit_resources": {"CPU": 3.0, "GPU": 1.0}}
    return {"creator_job_id": job_id, "state": state, "bundles": [bundle] * gpus,
            "stats": {"creation_request_received_ns": 1_700_000_000_000_000_000}}


def test_snapshot_maps_placement_groups_with_no_earlier_call(make_ray):
    """No job_info before: the snapshot learns the driver job ids it needs by itself."""
    ray = make_ray(Source(HEAD_1),
                   job_ids={"a--a01": "02000000", "b--a01": "03000000", "c--a01": None},
                   pgs=[_pg("02000000"), _pg("03000000", "PENDING", 1), _pg("09000000")])
    snapshot = ray.snapshot(["a--a01", "b--a01", "c--a01", "gone--a01"])
    assert snapshot.held_gpus == {"a--a01": 4.0}
    assert snapshot.pending_pg_since == {"b--a01": pytest.approx(1_700_000_000.0)}
    assert sorted(ray.asked()) == ["a--a01", "b--a01", "c--a01", "gone--a01"]


def test_driver_job_ids_are_learnt_once_per_head(make_ray):
    source = Source(HEAD_1)
    job_ids: dict[str, str | None] = {"a--a01": "02000000", "c--a01": None}
    ray = make_ray(source, job_ids=job_ids, pgs=[_pg("02000000")])
    ray.snapshot(["a--a01", "c--a01"])
    ray.snapshot(["a--a01", "c--a01"])
    # a known id is kept; a driver that has not registered yet is asked again
    assert ray.asked() == ["a--a01", "c--a01", "c--a01"]
    ray.snapshot(["c--a01"])  # a--a01 ended: forgotten
    assert ray.snapshot(["a--a01"]).held_gpus == {"a--a01": 4.0}
    assert ray.asked()[-1] == "a--a01", "an id no longer asked about was kept"

    # A restarted head numbers its jobs from the start again: 02000000 is now another
    # job's, and an attempt of the old head must not be credited with its GPUs.
    source.answer = replace(HEAD_1, generation="g2")
    del job_ids["a--a01"]
    assert ray.snapshot(["a--a01"]).held_gpus == {}
    assert ray.asked()[-1] == "a--a01"


# -- job_infos: per-job reads or one listing, on measured costs ------------------------

def _running(n: int) -> dict[str, str | None]:
    return {f"t{i:02d}--a01": f"{i + 2:08x}" for i in range(n)}


def test_job_infos_reads_few_jobs_one_by_one(make_ray):
    ray = make_ray(Source(HEAD_1), job_ids=_running(3))
    for _ in range(3):
        infos = ray.job_infos(list(ray.job_ids))
    assert set(infos) == set(ray.job_ids)
    assert ray.listings() == 0 and len(ray.asked()) == 9


def test_job_infos_lists_when_that_costs_less(make_ray):
    """40 attempts, 40 jobs in the history: 400 ms one by one, ~45 ms a listing."""
    ray = make_ray(Source(HEAD_1), job_ids=_running(40), history=40)
    sids = list(ray.job_ids)
    ray.job_infos(sids)  # nothing measured: the per-job cost is learnt first
    assert (ray.listings(), len(ray.asked())) == (0, 40)
    ray.job_infos(sids)  # then the listing's
    assert (ray.listings(), len(ray.asked())) == (1, 40)
    for _ in range(5):
        infos = ray.job_infos(sids)
    assert (ray.listings(), len(ray.asked())) == (6, 40), "the listing is the cheaper read"
    assert set(infos) == set(sids) and infos["t00--a01"].status is RayStatus.RUNNING


def test_job_infos_reads_one_by_one_on_a_head_with_a_long_history(make_ray):
    """5 attempts (50 ms) against 2,000 ended jobs (~1 s a listing): one by one, with the
    listing timed again every 32 batches (the history may have been cleaned up)."""
    from service.cluster.jobreads import PROBE_EVERY

    ray = make_ray(Source(HEAD_1), job_ids=_running(5), history=2000)
    sids = list(ray.job_ids)
    for _ in range(2 + PROBE_EVERY):
        assert set(ray.job_infos(sids)) == set(sids)
    assert ray.listings() == 2, "listed once to measure it, then once more to re-measure"
    # batch 1 one by one, 2 listed, 3..33 one by one, 34 (the 32nd since) listed
    assert len(ray.asked()) == 5 * (1 + PROBE_EVERY - 1)


def test_an_attempt_the_listing_lacks_is_asked_before_it_is_called_unknown(make_ray):
    ray = make_ray(Source(HEAD_1), job_ids=_running(8))
    sids = [*ray.job_ids, "gone--a01"]
    ray.job_infos(sids)
    ray.job_infos(sids)  # listed
    ray.jobs_clients[-1].unlisted.add("t03--a01")
    before = len(ray.asked())
    infos = ray.job_infos(sids)
    assert ray.asked()[before:] == ["gone--a01", "t03--a01"]
    assert "gone--a01" not in infos and infos["t03--a01"].status is RayStatus.RUNNING


def test_a_failed_listing_falls_back_to_reads_one_by_one(make_ray):
    ray = make_ray(Source(HEAD_1), job_ids=_running(8))
    sids = list(ray.job_ids)
    ray.job_infos(sids)
    ray.jobs_clients[-1].listing_fails = True
    assert set(ray.job_infos(sids)) == set(sids), "the batch is read one by one instead"
    assert len(ray.asked()) == 16
    ray.job_infos(sids)
    assert ray.listings() == 1, "a listing that failed is not tried again at once"


def test_a_new_head_measures_its_reads_anew(make_ray):
    source = Source(HEAD_1)
    ray = make_ray(source, job_ids=_running(8))
    sids = list(ray.job_ids)
    for _ in range(3):
        ray.job_infos(sids)
    assert ray.listings() == 2
    source.answer = replace(HEAD_1, generation="g2")  # a restarted head: costs unknown
    ray.job_infos(sids)
    assert ray.listings() == 2 and ray.jobs_clients[-1].asked == sids


def test_job_ids_from_job_infos_spare_the_snapshot_its_reads(make_ray):
    ray = make_ray(Source(HEAD_1), job_ids=_running(8), pgs=[_pg("00000002")])
    sids = list(ray.job_ids)
    ray.job_infos(sids)
    ray.job_infos(sids)  # listed: every driver job id came with it
    asked = len(ray.asked())
    assert ray.snapshot(sids).held_gpus == {"t00--a01": 4.0}
    assert len(ray.asked()) == asked, "the snapshot asked Ray for job ids it had"


class _GangPlacedBetweenReads(FakeRay):
    """A cluster where job a--a01's 1x4 gang gets placed right after the first read of
    the snapshot's resource view, whichever read that is."""

    def __init__(self) -> None:
        super().__init__(HEAD_1, job_ids={"a--a01": "02000000"})

    def _placement_groups(self, target: RayAddress) -> list[dict]:
        placed = bool(self.reads)
        self.reads.append(("placement groups", target.job_server_url))
        bundle = {"unit_resources": {"CPU": 3.0, "GPU": 1.0}}
        return [{"creator_job_id": "02000000", "state": "CREATED",
                 "bundles": [bundle] * 4}] if placed else []

    def _gcs_nodes(self, target: RayAddress) -> tuple[NodeResources, ...]:
        placed = bool(self.reads)
        self.reads.append(("nodes", target.gcs_address))
        free = {"CPU": 4.0, "worker_node": 99.0} if placed else {
            "CPU": 16.0, "GPU": 4.0, "worker_node": 99.0}
        return (NodeResources("n1", "10.0.0.1", free),)


def test_a_gang_placed_mid_snapshot_is_never_counted_free_and_held():
    cluster = _GangPlacedBetweenReads()
    try:
        snapshot = cluster.snapshot(["a--a01"])
    finally:
        cluster.close()
    assert [what for what, _ in cluster.reads] == ["placement groups", "nodes"]
    assert cluster.asked() == ["a--a01"], "the driver job ids are read before both"
    pool = FreePool.from_snapshot(snapshot, [InFlight("a--a01", Gang(1, 4))])
    decision = pool.decide(Gang(1, 4), Driver({"worker_node": 1.0}, 1.0))
    assert not decision.fits, "the in-flight gang's GPUs were handed out twice"


class _FreeViewLags(_GangPlacedBetweenReads):
    """The gang is placed before both reads, but the free view has not caught up yet
    (raylets report resources periodically): GPUs held by a CREATED group still show free."""

    def _placement_groups(self, target: RayAddress) -> list[dict]:
        self.reads.append(("placement groups", target.job_server_url))
        bundle = {"node_id": "n1", "unit_resources": {"CPU": 3.0, "GPU": 1.0}}
        return [{"creator_job_id": "02000000", "state": "CREATED", "bundles": [bundle] * 4},
                {"creator_job_id": "09000000", "state": "PENDING", "bundles": [bundle]}]

    def _gcs_nodes(self, target: RayAddress) -> tuple[NodeResources, ...]:
        self.reads.append(("nodes", target.gcs_address))
        total = {"CPU": 16.0, "GPU": 4.0, "worker_node": 100.0}
        return (NodeResources("n1", "10.0.0.1", {"CPU": 15.0, "GPU": 4.0, "worker_node": 99.0},
                              total),
                NodeResources("n2", "10.0.0.2", {"CPU": 16.0, "GPU": 2.0, "worker_node": 100.0},
                              total))


def test_a_lagging_free_view_is_bounded_by_the_placement_group_table():
    cluster = _FreeViewLags()
    try:
        snapshot = cluster.snapshot(["a--a01"])
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


def test_the_fences_are_the_listed_jobs_of_argus_that_have_not_ended(make_ray):
    from service.cluster.boundary import FenceJob

    def job(sid, status, metadata):
        return SimpleNamespace(submission_id=sid, status=SimpleNamespace(value=status),
                               metadata=metadata)

    fence_meta = {"argus_fence": "w1", "argus_fence_node_id": "ff"}
    jobs = [job("argus-fence-w1-00", "RUNNING", fence_meta),
            job("argus-fence-w1-01", "STOPPED", fence_meta),  # ended: not a fence now
            job("argus-fence-w1-02", "PENDING", {"argus_task_id": "t"}),  # not ours
            job("t--a01", "RUNNING", {"argus_task_id": "t"}),
            job(None, "RUNNING", None)]  # a driver started without the job server
    ray = make_ray(Source(HEAD_1))
    ray._make_jobs_client = lambda _target: SimpleNamespace(list_jobs=lambda: jobs)
    assert ray.fences() == [FenceJob("argus-fence-w1-00", "w1", "ff", RayStatus.RUNNING)]
