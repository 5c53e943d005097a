"""The health program's effects: a tool's deadline kills its whole group, the publish is
atomic and refuses a link, one round of checks against the stand-in nvidia-smi."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from raypool.config import load_node_settings
from raypool.deadline import Deadline
from raypool.healthpolicy import CommandOutcome, RayletSeen
from raypool.nodehealth import (
    STANDIN,
    GcsSight,
    HealthProgram,
    Probes,
    UnsafePath,
    collect,
    publish,
    run_command,
)

GiB = 2**30


def settings(tmp_path, **env: str):
    base = {"ARGUS_ROLE": "worker", "ARGUS_NODE_IP": "10.0.0.3", "ARGUS_NODE_NAME": "w1",
            "ARGUS_SHARED_ROOT": str(tmp_path / "shared"), "ARGUS_RUN_DIR": str(tmp_path / "run"),
            "ARGUS_WORKER_NUM_GPUS": "4", "ARGUS_FAKE_GPUS": "standin",
            "ARGUS_HEALTH_TIMEOUT_S": "20"}
    base.update(env)
    return load_node_settings(base)


def test_a_command_past_its_deadline_is_killed_with_its_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    script = (f"sleep 300 & echo $! > {pidfile}; echo checking; sleep 300")
    outcome = run_command(["sh", "-c", script], timeout_s=1.0)
    assert outcome.timed_out and outcome.exit_code is None
    assert outcome.output == "checking\n"
    grandchild = int(pidfile.read_text())
    deadline = Deadline.after(5)
    while psutil.pid_exists(grandchild) and not deadline.passed():
        try:
            if psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE:
                break  # killed, waiting for its new parent to reap it
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        assert not psutil.pid_exists(grandchild), "the background sleep outlived the deadline"


def test_a_command_stops_when_the_program_stops():
    stop = threading.Event()
    stop.set()
    assert run_command(["sleep", "300"], timeout_s=300, stop=stop).timed_out


def test_command_exit_and_output():
    outcome = run_command(["sh", "-c", "echo 'IB port down' >&2; echo more; exit 3"], 10)
    assert (outcome.exit_code, outcome.output) == (3, "IB port down\nmore\n")
    assert run_command(["/nonexistent/check"], 10).not_found


def test_publish_writes_atomically_and_replaces(tmp_path):
    path = tmp_path / "nodes" / "w1.health.json"
    publish(str(path), '{"a": 1}\n')
    publish(str(path), '{"a": 2}\n')
    assert json.loads(path.read_text()) == {"a": 2}
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert os.listdir(path.parent) == ["w1.health.json"]  # no temp file left


def test_publish_refuses_a_link_in_place(tmp_path):
    (tmp_path / "nodes").mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    link = tmp_path / "nodes" / "w1.health.json"
    link.symlink_to(target)
    with pytest.raises(UnsafePath, match="symbolic link"):
        publish(str(link), "{}\n")
    assert link.is_symlink() and target.read_text() == "keep"


def test_publish_refuses_a_linked_directory(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "nodes").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafePath, match="not a directory"):
        publish(str(tmp_path / "nodes" / "w1.health.json"), "{}\n")
    assert os.listdir(tmp_path / "real") == []


def probes(run=None, free=100 * GiB, raylets=(311,), seen=RayletSeen.ALIVE):
    calls: list[list[str]] = []

    def real_run(argv, timeout_s):
        calls.append(list(argv))
        return (run or run_command)(argv, timeout_s)

    p = Probes(run=real_run, free=lambda path, t: (free, ""), raylets=lambda s: list(raylets),
               gcs=lambda s: GcsSight(seen, "10.0.0.2:6379", "ab" * 28, 4),
               now=lambda: 1765015267.5)
    return p, calls


def plant(s, fault: dict | None) -> None:
    os.makedirs(s.run_dir, exist_ok=True)
    path = os.path.join(s.run_dir, "standin-gpu-faults.json")
    if fault is None:
        if os.path.exists(path):
            os.unlink(path)
    else:
        with open(path, "w") as f:
            json.dump(fault, f)


@pytest.mark.parametrize("fault,healthy,reason", [
    (None, True, "ok"),
    ({"xid": 79}, False, "xid: XID 79 on PCI:0000:18:00"),
    ({"xid": [13, 43]}, True, "ok"),
    ({"ecc": 2, "gpu": 1}, False, "ecc: GPU 1 (00000000:2A:00.0): 2 uncorrectable ECC"),
    ({"missing": 1}, False, "gpus: nvidia-smi sees 3 GPUs, the node offers 4"),
    ({"fail": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"},
     False, "gpus: nvidia-smi -q failed (exit 9): NVIDIA-SMI has failed"),
])
def test_one_round_against_the_standin(tmp_path, monkeypatch, fault, healthy, reason):
    s = settings(tmp_path)
    monkeypatch.setenv("ARGUS_RUN_DIR", s.run_dir)
    monkeypatch.setenv("ARGUS_WORKER_NUM_GPUS", "4")
    plant(s, fault)
    p, calls = probes()
    report = collect(s, p)
    assert (report.healthy, report.reason.startswith(reason)) == (healthy, True), report.reason
    assert calls == [[sys.executable, STANDIN, "-q"], [sys.executable, STANDIN, "--dmesg"]]
    assert report.ray_node_id == "ab" * 28
    assert [c.name for c in report.checks] == ["gpus", "ecc", "xid", "disk:shared",
                                               "disk:ray_temp", "raylet"]


def test_round_with_the_operators_command_disk_and_raylet(tmp_path):
    s = settings(tmp_path, ARGUS_HEALTH_CMD="/opt/check --all", ARGUS_FAKE_GPUS="1",
                 ARGUS_HEALTH_MIN_FREE_GB="10")

    def run(argv, timeout_s):
        if argv[0] == "/opt/check":
            return CommandOutcome(exit_code=1, output="IB port mlx5_0 down\n")
        return CommandOutcome(not_found=True)

    p, calls = probes(run=run, free=5 * GiB, raylets=())
    report = collect(s, p)
    by_name = {c.name: c for c in report.checks}
    assert calls[0] == ["nvidia-smi", "-q"] and calls[-1] == ["/opt/check", "--all"]
    assert by_name["gpus"].ok and "skipped: fake GPUs" in by_name["gpus"].detail
    assert not by_name["disk:shared"].ok and "below 10 GiB" in by_name["disk:shared"].detail
    assert not by_name["raylet"].ok
    assert by_name["command"].detail == "IB port mlx5_0 down"
    assert report.reason == ("disk:shared: " + by_name["disk:shared"].detail
                             + " (+3 more failing)")


def test_the_head_skips_gpu_tools(tmp_path):
    s = settings(tmp_path, ARGUS_ROLE="head")
    p, calls = probes(run=lambda argv, t: pytest.fail("no tool on the head"))
    report = collect(s, p)
    assert report.healthy and calls == []
    assert report.checks[0].detail == "skipped: the node offers no GPUs"


def test_the_program_publishes_each_round(tmp_path, monkeypatch):
    s = settings(tmp_path, ARGUS_HEALTH_INTERVAL_S="30")
    monkeypatch.setenv("ARGUS_RUN_DIR", s.run_dir)
    monkeypatch.setenv("ARGUS_WORKER_NUM_GPUS", "4")
    import logging

    program = HealthProgram(s, logging.getLogger("test"), probes()[0])
    plant(s, {"xid": 79})
    program.step()
    data = json.loads(Path(s.health_file).read_text())
    assert s.health_file.endswith("/ray/discovery/argus-ray/nodes/w1.health.json")
    assert (data["node"], data["healthy"], data["version"]) == ("w1", False, 1)
    assert data["reason"].startswith("xid: XID 79")
    plant(s, None)
    program.step()
    assert json.loads(Path(s.health_file).read_text())["healthy"] is True
    assert 0.5 <= program.loop.interval_s <= 30


def test_the_node_is_found_by_its_label_the_alive_one_last_started():
    from raypool.health import NodeView, node_by_name

    def view(node_id, alive, start, name="", labels=None):
        return NodeView(node_id, "10.0.0.3", 1, alive, False, {}, start, name, labels or {})

    old = view("old", False, 1.0, "w1", {"argus.node": "w1"})
    new = view("new", True, 2.0, "w1", {"argus.node": "w1"})
    other = view("o", True, 3.0, "w2", {"argus.node": "w2"})
    unlabelled = view("u", True, 4.0, "w3")
    assert node_by_name([old, new, other], "w1").node_id == "new"
    assert node_by_name([old, other], "w1").node_id == "old"
    assert node_by_name([other], "w1") is None
    assert node_by_name([unlabelled], "w3").node_id == "u"  # by Ray's node name alone


def test_free_bytes_of_a_dir_not_made_yet_is_its_parents(tmp_path):
    from raypool.nodehealth import free_bytes

    free, error = free_bytes(str(tmp_path / "ray" / "not-yet"), 10)
    assert error == "" and free is not None and free > 0


def test_a_hung_driver_is_a_timeout_not_a_hung_round(tmp_path, monkeypatch):
    s = settings(tmp_path, ARGUS_HEALTH_TIMEOUT_S="1")
    monkeypatch.setenv("ARGUS_RUN_DIR", s.run_dir)
    plant(s, {"hang": 60})
    started = time.monotonic()
    report = collect(s, probes()[0])
    assert time.monotonic() - started < 20
    assert report.reason.startswith("gpus: nvidia-smi -q timed out after 1s")
    xid = next(c for c in report.checks if c.name == "xid")
    assert xid.ok and xid.detail == "skipped: kernel log not readable (timed out)"


def test_a_round_cut_short_by_the_stop_is_not_published(tmp_path):
    import logging

    s = settings(tmp_path, ARGUS_FAKE_GPUS="1")
    program = HealthProgram(s, logging.getLogger("test"), probes(
        run=lambda argv, t: CommandOutcome(timed_out=True))[0])
    program.loop.stop()
    program.step()
    assert not os.path.exists(s.health_file)


def test_a_new_node_is_healthy_until_its_raylet_is_first_up_then_judged(tmp_path, monkeypatch):
    """The first rounds of a new node come before its watchdog started Ray: not a fault
    (the service would cordon every new node for three rounds); once the raylet was seen
    alive, losing it is one again, and so is a raylet that never came up in the grace."""
    import logging

    from raypool import nodehealth

    s = settings(tmp_path, ARGUS_FAKE_GPUS="1")
    raylets: list[int] = []
    p = probes()[0]
    p.raylets = lambda _s: list(raylets)
    p.gcs = lambda _s: GcsSight(RayletSeen.ALIVE if raylets else RayletSeen.UNLISTED,
                                "10.0.0.2:6379", "ab" * 28, 4)
    clock = [1000.0]
    monkeypatch.setattr(nodehealth.time, "monotonic", lambda: clock[0])
    program = HealthProgram(s, logging.getLogger("test"), p)

    def healthy() -> bool:
        program.step()
        return json.loads(Path(s.health_file).read_text())["healthy"]

    assert healthy() and program.starting
    raylets.append(311)
    assert healthy() and not program.starting
    raylets.clear()
    assert not healthy()  # lost after it was up: a fault at once
    late = HealthProgram(s, logging.getLogger("test"), p)
    clock[0] += nodehealth.STARTING_GRACE_S + 1
    assert not late.starting
    late.step()
    assert json.loads(Path(s.health_file).read_text())["healthy"] is False
