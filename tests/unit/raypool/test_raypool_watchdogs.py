"""Head publisher, ray start argv, and the tag sweep that finds a node's leftovers."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from raypool import discovery
from raypool.config import load_node_settings
from raypool.head import (
    RAY_ADDRESS_FILE,
    HeadPublisher,
    PublishState,
    clear_bootstrap_record,
    head_argv,
    should_publish,
    write_generation,
)
from raypool.headrecord import HeadRecord
from raypool.health import HealthError
from raypool.procs import RAY_TAG_ENV, kill_tagged, tagged_processes, wait_until
from raypool.worker import worker_argv

LOG = logging.getLogger("test")


def settings(tmp_path, role="head", **extra):
    env = {"ARGUS_ROLE": role, "ARGUS_NODE_IP": "10.0.0.2", "ARGUS_NODE_NAME": "n",
           "ARGUS_SHARED_ROOT": str(tmp_path), "ARGUS_RUN_DIR": str(tmp_path / "run"),
           "ARGUS_REFRESH_S": "10", "ARGUS_TTL_S": "30"}
    env.update(extra)
    return load_node_settings(env)


def test_head_argv(tmp_path):
    argv = head_argv(settings(tmp_path, ARGUS_RAY_EXTRA_ARGS="--object-store-memory=1"))
    assert argv[1:4] == ["start", "--head", "--num-cpus=0"]
    for flag in ("--num-gpus=0", "--port=6379", "--dashboard-host=0.0.0.0",
                 "--dashboard-port=8265", "--node-ip-address=10.0.0.2", "--block",
                 "--node-name=n", "--labels=argus.node=n"):
        assert flag in argv
    assert argv[-1] == "--object-store-memory=1"


def test_worker_argv_passes_resources_json_as_one_argument(tmp_path):
    s = settings(tmp_path, role="worker", ARGUS_WORKER_RESOURCES_KV="worker_node=100,ssd=2",
                 ARGUS_WORKER_NUM_GPUS="4", ARGUS_WORKER_NUM_CPUS="16")
    head = HeadRecord("argus-ray", "10.0.0.9", 6380, 8265, "http://x", "g", 1, 0.0,
                                60.0, "h", 1)
    argv = worker_argv(s, head)
    assert "--address=10.0.0.9:6380" in argv
    assert "--node-name=n" in argv and "--labels=argus.node=n" in argv
    resources = [a for a in argv if a.startswith("--resources=")]
    assert json.loads(resources[0].split("=", 1)[1]) == {"worker_node": 100, "ssd": 2}
    assert "--num-gpus=4" in argv and "--num-cpus=16" in argv and "--block" in argv


def test_head_start_removes_only_a_bootstrap_record_naming_its_own_address(tmp_path):
    temp = tmp_path / "ray"
    temp.mkdir()
    s = settings(tmp_path, ARGUS_RAY_TEMP_DIR=str(temp), ARGUS_RAY_PORT="6390")
    record = temp / RAY_ADDRESS_FILE
    assert not clear_bootstrap_record(s, LOG)            # no file: nothing to do
    record.write_text("10.0.0.2:6379")                   # another cluster's port: kept
    assert not clear_bootstrap_record(s, LOG) and record.read_text() == "10.0.0.2:6379"
    record.write_text("10.0.0.2:6390")                   # this head's: removed
    assert clear_bootstrap_record(s, LOG) and not record.exists()


def test_should_publish():
    st = PublishState("g1", 4, written_mono=100.0)
    assert not should_publish(False, "g1", st, 200.0, 10)   # unhealthy: never
    assert not should_publish(True, None, st, 200.0, 10)    # no generation yet
    assert should_publish(True, "g2", st, 101.0, 10)        # new generation: at once
    assert not should_publish(True, "g1", st, 105.0, 10)    # same gen, within refresh
    assert should_publish(True, "g1", st, 110.0, 10)        # refresh due


def test_publisher_writes_only_while_healthy_and_bumps_generation(tmp_path):
    s = settings(tmp_path)
    os.makedirs(s.run_dir)
    healthy = [True]
    cluster = ["c1"]
    pub = HeadPublisher(s, LOG, healthy=lambda: healthy[0], read_cluster_id=lambda: cluster[0])
    pub.tick(now=1000.0, mono=0.0)
    assert not os.path.exists(s.head_ip_file)  # no generation file yet
    write_generation(s.generation_file, "gen-a", 1000.0)
    pub.tick(now=1001.0, mono=1.0)
    rec = discovery.read_record(s.head_ip_file, s.cluster_name).record
    assert rec is not None and (rec.generation, rec.seq, rec.written_at) == ("gen-a", 1, 1001.0)
    assert rec.cluster_id == "c1"
    assert rec.job_server_url == "http://10.0.0.2:8265" and rec.ttl_s == 30
    pub.tick(now=1005.0, mono=5.0)          # within refresh: unchanged
    assert discovery.read_record(s.head_ip_file, s.cluster_name).record.seq == 1
    pub.tick(now=1011.0, mono=11.0)         # refresh
    assert discovery.read_record(s.head_ip_file, s.cluster_name).record.seq == 2
    healthy[0] = False
    pub.tick(now=1030.0, mono=30.0)         # unhealthy: record left to go stale
    assert discovery.read_record(s.head_ip_file, s.cluster_name).record.written_at == 1011.0
    healthy[0] = True
    write_generation(s.generation_file, "gen-b", 1031.0)   # a restart on the same store
    pub.tick(now=1032.0, mono=32.0)
    rec = discovery.read_record(s.head_ip_file, s.cluster_name).record
    assert (rec.generation, rec.seq, rec.cluster_id) == ("gen-b", 1, "c1")
    cluster[0] = "c2"                                     # a wiped store: a new cluster
    write_generation(s.generation_file, "gen-c", 1040.0)
    pub.tick(now=1041.0, mono=41.0)
    rec = discovery.read_record(s.head_ip_file, s.cluster_name).record
    assert (rec.generation, rec.cluster_id) == ("gen-c", "c2")


def test_publisher_publishes_nothing_until_the_gcs_tells_the_cluster_id(tmp_path):
    s = settings(tmp_path)
    os.makedirs(s.run_dir)
    write_generation(s.generation_file, "gen-a", 0.0)
    answers: list[str | HealthError] = [HealthError("not yet"), "c1"]

    def read_cluster_id() -> str:
        answer = answers.pop(0)
        if isinstance(answer, HealthError):
            raise answer
        return answer

    pub = HeadPublisher(s, LOG, healthy=lambda: True, read_cluster_id=read_cluster_id)
    pub.tick(1.0, 1.0)
    assert not os.path.exists(s.head_ip_file)
    pub.tick(2.0, 2.0)
    assert discovery.read_record(s.head_ip_file, s.cluster_name).record.cluster_id == "c1"
    pub.tick(20.0, 20.0)  # the same generation: the id is not asked again
    assert discovery.read_record(s.head_ip_file, s.cluster_name).record.seq == 2


def test_restarted_publisher_continues_the_sequence(tmp_path):
    s = settings(tmp_path)
    os.makedirs(s.run_dir)
    write_generation(s.generation_file, "gen-a", 0.0)
    first = HeadPublisher(s, LOG, healthy=lambda: True, read_cluster_id=lambda: "c1")
    first.tick(1.0, 1.0)
    first.tick(20.0, 20.0)
    second = HeadPublisher(s, LOG, healthy=lambda: True, read_cluster_id=lambda: "c1")
    second.tick(40.0, 40.0)
    assert discovery.read_record(s.head_ip_file, s.cluster_name).record.seq == 3


def test_tag_sweep_kills_tagged_tree_only():
    tag = os.urandom(6).hex()
    code = "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c'," \
           "'import time; time.sleep(60)']); time.sleep(60)"
    env = dict(os.environ, **{RAY_TAG_ENV: tag})
    tagged = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # the grandchild appears within moments: poll with a deadline
        assert wait_until(lambda: len(tagged_processes(RAY_TAG_ENV, tag)) == 2, 10.0)
        killed = kill_tagged(RAY_TAG_ENV, tag)
        assert tagged.pid in killed and len(killed) == 2
        assert tagged_processes(RAY_TAG_ENV, tag) == []
        assert other.poll() is None
    finally:
        for proc in (tagged, other):
            proc.kill()
            proc.wait()


def test_registered_counts_only_a_node_started_by_this_ray_start():
    from raypool.health import NodeView, is_registered

    old = NodeView("old", "10.0.0.3", 40000, alive=True, is_head=False, resources={},
                   start_time_s=100.0)  # SIGKILLed, not yet declared dead by the GCS
    assert is_registered([old], "10.0.0.3", None)
    assert not is_registered([old], "10.0.0.3", None, started_after=150.0)
    new = NodeView("new", "10.0.0.3", 40001, alive=True, is_head=False, resources={},
                   start_time_s=151.0)
    assert is_registered([old, new], "10.0.0.3", None, started_after=150.0)
    assert not is_registered([old, new], "10.0.0.3", 40000, started_after=150.0)


def test_a_head_json_that_is_a_link_or_a_fifo_is_not_read(tmp_path):
    """head.json is written by rename, never a link: one planted there is refused, and a
    FIFO answers at once instead of blocking the reader (the service reads it the same
    way: ``service.cluster.address.read_file``)."""
    real = tmp_path / "real.json"
    real.write_text(json.dumps({"cluster_name": "c"}))
    link = tmp_path / "head.json"
    link.symlink_to(real)
    result = discovery.read_record(str(link), "c")
    assert result.record is None and "cannot read head.json" in result.reason
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    result = discovery.read_record(str(fifo), "c")
    assert result.record is None and result.reason == (
        "cannot read head.json: not a regular file")
