"""A Ray head restart under a running task, on a cluster of its own (runs last).

Without GCS fault tolerance the restarted head is a new cluster: the job server has no
record of the running job, and the old worker's raylet never rejoins (a real node's
watchdog restarts Ray on it; here the test starts a fresh worker). The attempt must end
CLUSTER_LOST and the task run again on the new cluster; while the head is down nothing
is decided and new tasks wait with the reason.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from .conftest import ArgusService, free_gpus
from .localray import LocalRayCluster, wait_until

pytestmark = pytest.mark.timeout(400)


def test_head_restart_loses_the_attempt_and_the_task_runs_again():
    cluster = LocalRayCluster()
    argus = None
    try:
        cluster.start_head()
        cluster.add_worker(gpus=4)
        root = Path(tempfile.mkdtemp(prefix="argus-it-", dir=cluster.root))
        argus = ArgusService(cluster, root, ray_address=cluster.dashboard_url,
                             ray_timeout_s=5)
        argus.start()
        tid = argus.submit(nnodes=1, gpus=4, duration_s=20)
        argus.wait_for(tid, lambda t: t["state"] == "RUNNING", 60, "to run")
        wait_until(lambda: sum(free_gpus(cluster).values()) == 0, 60,
                   "the driver to take the GPUs")

        for worker in list(cluster.workers):
            cluster.remove_worker(worker)
        cluster.stop_head()
        assert argus.proc is not None
        cluster.kill_orphans(keep=(argus.proc.pid,))  # the old driver must not rejoin
        waiting = argus.submit(nnodes=1, gpus=4, duration_s=1)
        task = argus.wait_for(waiting, lambda t: "unreachable" in (t["pending_reason"] or ""),
                              60, "to wait because Ray is unreachable")
        assert task["state"] == "PENDING_RESOURCES"
        assert argus.task(tid)["state"] == "RUNNING", "decided while Ray was unreachable"

        cluster.start_head(same_address=True)
        cluster.add_worker(gpus=4)
        argus.wait_state(tid, "SUCCEEDED", timeout=180)
        first, second = argus.attempts(tid)
        assert first["failure_kind"] == "CLUSTER_LOST", first
        assert second["ray_submission_id"].endswith("--a02")
        assert second["ray_status"] == "SUCCEEDED"
        argus.wait_state(waiting, "SUCCEEDED", timeout=120)
        assert len(argus.attempts(waiting)) == 1, argus.attempts(waiting)
    finally:
        if argus is not None:
            argus.stop()
        cluster.stop()
        assert cluster.leftovers() == []
        cluster.cleanup_files()
