"""A driver that outlives its job supervisor, on real Ray.

Seen on compose after a head fault: Ray failed a job because it lost the job's supervisor
while the driver ran on, orphaned, and Argus started attempt 2 beside it. Here the
supervisor actor is killed (``ray.kill``) under a running attempt: Ray says the job
FAILED, the exit of the supervisor's worker takes its direct children (the entrypoint's
shell), and the driver runs on. Argus must follow that driver to its own end, start no
second attempt meanwhile, and reach it when asked to stop it.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from service.domain.states import RayStatus
from service.policy.failures import supervisor_lost

from .conftest import ArgusService, free_gpus, ray_job
from .localray import LocalRayCluster, wait_until

pytestmark = pytest.mark.timeout(300)

KILL_SUPERVISOR = """
import sys, ray
from ray.dashboard.modules.job.common import JOB_ACTOR_NAME_TEMPLATE, SUPERVISOR_ACTOR_RAY_NAMESPACE
ray.init(address=sys.argv[1], logging_level="ERROR")
job_id = sys.argv[2]
actor = ray.get_actor(JOB_ACTOR_NAME_TEMPLATE.format(job_id=job_id),
                      namespace=SUPERVISOR_ACTOR_RAY_NAMESPACE)
ray.kill(actor, no_restart=True)
"""


def _kill_supervisor(cluster: LocalRayCluster, submission_id: str) -> None:
    subprocess.run([sys.executable, "-c", KILL_SUPERVISOR, cluster.gcs_address, submission_id],
                   env=dict(cluster.env()), check=True, timeout=60, capture_output=True)


def _orphaned(argus: ArgusService, cluster: LocalRayCluster, duration_s: float
              ) -> tuple[str, dict[str, Any]]:
    """A task whose attempt 1's supervisor was killed while its driver holds its GPUs."""
    tid = argus.submit(nnodes=1, gpus=4, duration_s=duration_s)
    task = argus.wait_for(tid, lambda t: t["state"] == "RUNNING", 60, "to run")
    sid = task["latest_attempt"]["ray_submission_id"]
    wait_until(lambda: min(free_gpus(cluster).values()) == 0, 60, "the driver to take GPUs")
    _kill_supervisor(cluster, sid)
    wait_until(lambda: ray_job(cluster, sid).status == "FAILED", 60,
               "Ray to fail the job for its lost supervisor")
    wait_until(lambda: "its driver still runs" in (argus.attempts(tid)[0]["message"] or ""),
               30, "Argus to follow the orphaned driver")
    return tid, argus.task(tid)


def test_an_orphaned_driver_is_followed_to_its_end_on_its_first_attempt(ray_cluster, argus):
    tid, task = _orphaned(argus, ray_cluster, duration_s=25)
    assert task["state"] == "RUNNING", task
    assert supervisor_lost(RayStatus.FAILED, ray_job(
        ray_cluster, task["latest_attempt"]["ray_submission_id"]).message)
    task = argus.wait_state(tid, "SUCCEEDED", timeout=120)
    attempts = argus.attempts(tid)
    assert [a["attempt_no"] for a in attempts] == [1], attempts
    assert attempts[0]["exit_code"] == 0, attempts
    assert "exited 0" in (task["error_summary"] or ""), task


def test_a_cancel_reaches_an_orphaned_driver(ray_cluster, argus):
    before = sum(free_gpus(ray_cluster).values())
    tid, _ = _orphaned(argus, ray_cluster, duration_s=600)
    assert argus.cancel(tid).status_code == 202  # stopping: it is on the cluster
    argus.wait_state(tid, "CANCELED", timeout=90)
    assert len(argus.attempts(tid)) == 1
    wait_until(lambda: sum(free_gpus(ray_cluster).values()) == before, 60,
               "the stopped driver's GPUs to come back")
