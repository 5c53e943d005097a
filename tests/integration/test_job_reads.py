"""The reconcile's read of many jobs at once (``RayCluster.job_infos``) on real Ray: the
listing gives what one read per job gives."""

from __future__ import annotations

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from service.cluster.address import RayAddress
from service.cluster.raycluster import RayCluster
from service.config import Settings
from service.domain.states import RayStatus

from .localray import wait_until

pytestmark = pytest.mark.timeout(180)


def test_job_infos_by_listing_agrees_with_reads_one_by_one(ray_cluster):
    ray = JobSubmissionClient(ray_cluster.dashboard_url)
    sids = [ray.submit_job(entrypoint="sleep 120", submission_id=f"reads-{i}")
            for i in range(5)]
    adapter = RayCluster(Settings(ray_timeout_s=30),
                         RayAddress(ray_cluster.dashboard_url, ray_cluster.gcs_address))
    try:
        wait_until(lambda: all(ray.get_job_status(s) == JobStatus.RUNNING for s in sids),
                   120, "5 sleeping jobs to run")
        asked = [*sids, "never-submitted"]
        one_by_one = adapter.job_infos(asked)  # the per-job cost is learnt first
        costs = adapter.read_costs()
        assert costs.per_call_s is not None and costs.list_s is None
        listed = adapter.job_infos(asked)  # then the listing is timed
        assert adapter.read_costs().list_s is not None, "the second batch was not listed"
        assert set(one_by_one) == set(listed) == set(sids)
        for sid in sids:
            assert listed[sid] == one_by_one[sid]
            assert listed[sid].status is RayStatus.RUNNING and listed[sid].start_time
            assert listed[sid].driver_node_id
    finally:
        for sid in sids:
            ray.stop_job(sid)
        wait_until(lambda: all(ray.get_job_status(s).is_terminal() for s in sids), 60,
                   "the sleeping jobs to stop")
        adapter.close()
