"""The health checks' verdicts by table: GPUs, ECC, XIDs, disk, raylet, the operator's
command, and the node's verdict and file format."""

from __future__ import annotations

import json
import os

import pytest

from raypool.healthpolicy import (
    APPLICATION_XIDS,
    Check,
    CommandOutcome,
    RayletSeen,
    check_command,
    check_ecc,
    check_free_space,
    check_gpus,
    check_raylet,
    check_xids,
    make_report,
    one_line,
    verdict,
)

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "nvidia_smi")


def smi(name: str, exit_code: int = 0) -> CommandOutcome:
    with open(os.path.join(DATA, name)) as f:
        return CommandOutcome(exit_code=exit_code, output=f.read())


HEALTHY = smi("h100x4_healthy.txt")
NOT_FOUND = CommandOutcome(not_found=True)
GiB = 2**30


@pytest.mark.parametrize("offered,fake,outcome,ok,words", [
    (4, False, HEALTHY, True, "4 GPUs (offered 4): NVIDIA H100 80GB HBM3"),
    (None, False, HEALTHY, True, "4 GPUs: NVIDIA H100"),
    (2, False, HEALTHY, True, "4 GPUs (offered 2)"),        # offering fewer is a choice
    (8, False, HEALTHY, False, "nvidia-smi sees 4 GPUs, the node offers 8"),
    (4, False, smi("h100x4_gpu_lost.txt", 15), False, "Unable to determine the device handle"),
    (0, False, NOT_FOUND, True, "skipped: the node offers no GPUs"),
    (0, False, HEALTHY, True, "skipped: the node offers no GPUs"),
    (4, True, NOT_FOUND, True, "skipped: fake GPUs"),
    (4, False, NOT_FOUND, False, "nvidia-smi not found; the node offers 4 GPUs"),
    (None, False, NOT_FOUND, True, "skipped: no nvidia-smi and no GPUs offered"),
    (4, False, CommandOutcome(timed_out=True), False, "timed out after 20s"),
    (4, False, CommandOutcome(exit_code=9, output="NVIDIA-SMI has failed because it couldn't "
                              "communicate with the NVIDIA driver.\n"), False,
     "failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate"),
    (4, False, CommandOutcome(exit_code=6, output="No devices were found\n"), False,
     "No devices were found"),
    (4, False, CommandOutcome(error="Permission denied"), False, "cannot run: Permission"),
])
def test_gpus(offered, fake, outcome, ok, words):
    check, _ = check_gpus(offered, fake, outcome, 20)
    assert check.name == "gpus" and check.ok is ok
    assert words in check.detail


@pytest.mark.parametrize("name,ok,words", [
    ("h100x4_healthy.txt", True, "no uncorrectable ECC errors since reset on 4 GPUs "
                                 "(0 in their lifetime)"),
    ("h100x4_aggregate_only.txt", True, "(1 in their lifetime)"),
    ("h100x4_ecc_uncorrectable.txt", False, "GPU 2 (00000000:3A:00.0): 2 uncorrectable ECC "
                                            "errors since the last reset; GPU 2 "
                                            "(00000000:3A:00.0): remapped rows pending"),
    ("a100x1_remap_failed.txt", False, "GPU 3 (00000000:07:00.0): row remapping failed"),
    ("v100x1_double_bit.txt", False, "1 uncorrectable ECC errors since the last reset; "
                                     "GPU 0 (00000000:00:1E.0): retired pages pending"),
])
def test_ecc(name, ok, words):
    _, report = check_gpus(None, False, smi(name), 20)
    check = check_ecc(report, "")
    assert check.ok is ok and words in check.detail


def test_ecc_skipped_without_a_report():
    assert check_ecc(None, "fake GPUs") == Check("ecc", True, "skipped: fake GPUs")


def log(name: str) -> CommandOutcome:
    return smi(name)


@pytest.mark.parametrize("outcome,ignore,ok,words", [
    (log("dmesg_xids.txt"), APPLICATION_XIDS, False,
     "XID 79 on PCI:0000:5d:00: pid='<unknown>', name=<unknown>, GPU has fallen off the bus. "
     "(1 XID events, codes 79, since boot)"),
    (log("dmesg_application_xids_only.txt"), APPLICATION_XIDS, True,
     "5 application XIDs ignored (13, 43, 45, 68, 109)"),
    (log("journalctl_xid48.txt"), APPLICATION_XIDS, False, "codes 48, 63"),
    (log("journalctl_xid48.txt"), APPLICATION_XIDS | {48, 63}, True, "ignored (48, 63)"),
    (log("dmesg_application_xids_only.txt"), frozenset(), False, "codes 13, 43, 45, 68, 109"),
    (CommandOutcome(exit_code=0, output="[ 1.0] eth0: link up\n"), APPLICATION_XIDS, True,
     "no XID in the kernel log"),
    (CommandOutcome(exit_code=1, output="dmesg: read kernel buffer failed: Operation not "
                    "permitted\n"), APPLICATION_XIDS, True,
     "skipped: kernel log not readable (dmesg: read kernel buffer failed: Operation not "
     "permitted)"),
    (CommandOutcome(not_found=True), APPLICATION_XIDS, True, "skipped: kernel log not readable"),
    (None, APPLICATION_XIDS, True, "skipped: the node offers no GPUs"),
])
def test_xids(outcome, ignore, ok, words):
    check = check_xids(outcome, ignore)
    assert check.name == "xid" and check.ok is ok
    assert words in check.detail


def test_application_xids_are_the_documented_six():
    assert {13, 31, 43, 45, 68, 109} == APPLICATION_XIDS


@pytest.mark.parametrize("free,min_bytes,error,ok,words", [
    (50 * GiB, 1 * GiB, "", True, "/private: 50.0 GiB free"),
    (int(0.5 * GiB), 1 * GiB, "", False, "/private: 0.5 GiB free, below 1 GiB"),
    (1 * GiB, 1 * GiB, "", True, "1.0 GiB free"),
    (0, 0, "", True, "0.0 GiB free"),                # threshold 0: never unhealthy by space
    (None, 1 * GiB, "did not answer within 10s", False, "cannot stat: did not answer"),
])
def test_free_space(free, min_bytes, error, ok, words):
    check = check_free_space("shared", "/private", free, error, min_bytes)
    assert check.name == "disk:shared" and check.ok is ok and words in check.detail


@pytest.mark.parametrize("pids,seen,ok,words", [
    ([311], RayletSeen.ALIVE, True, "raylet pid 311, alive"),
    ([311], RayletSeen.SILENT, True, "the GCS does not answer"),
    ([311], RayletSeen.DEAD, False, "lists this node dead"),
    ([311], RayletSeen.UNLISTED, False, "does not list this node"),
    ([], RayletSeen.ALIVE, False, "no raylet process of this node"),
    ([], RayletSeen.SILENT, False, "no raylet process"),
])
def test_raylet(pids, seen, ok, words):
    check = check_raylet(pids, seen, "10.0.0.2:6379")
    assert check.ok is ok and words in check.detail


@pytest.mark.parametrize("pids,seen,ok,words", [
    ([], RayletSeen.SILENT, True, "starting"),  # Ray not started yet
    ([311], RayletSeen.UNLISTED, True, "starting"),  # up, not registered yet
    ([311], RayletSeen.ALIVE, True, "alive in the GCS"),
    ([311], RayletSeen.DEAD, False, "lists this node dead"),  # a fault even at start
])
def test_a_starting_node_without_its_raylet_yet_is_not_a_fault(pids, seen, ok, words):
    check = check_raylet(pids, seen, "10.0.0.2:6379", starting=True)
    assert check.ok is ok and words in check.detail


@pytest.mark.parametrize("outcome,ok,detail", [
    (CommandOutcome(exit_code=0, output=""), True, "exit 0"),
    (CommandOutcome(exit_code=0, output="all good\nmore\n"), True, "all good"),
    (CommandOutcome(exit_code=1, output="\n  IB port mlx5_0 down  \nsecond line\n"), False,
     "IB port mlx5_0 down"),
    (CommandOutcome(exit_code=3, output=""), False, "health command exited 3"),
    (CommandOutcome(exit_code=-9, output="started\n"), False, "started"),
    (CommandOutcome(timed_out=True, output="checking...\n"), False,
     "health command timed out after 5 s"),
    (CommandOutcome(not_found=True), False, "health command cannot run: not found"),
    (CommandOutcome(error="Permission denied"), False,
     "health command cannot run: Permission denied"),
])
def test_command(outcome, ok, detail):
    check = check_command(outcome, 5)
    assert check == Check("command", ok, detail)


def test_one_line_flattens_and_caps():
    assert one_line("a\n\x1b[31mb\tc\n") == "a [31mb c"
    assert len(one_line("x" * 1000)) == 240


@pytest.mark.parametrize("checks,healthy,reason", [
    ([Check("gpus", True, "4 GPUs"), Check("raylet", True, "pid 1")], True, "ok"),
    ([Check("gpus", True, "4"), Check("xid", False, "XID 79 on PCI:0000:5d:00: off the bus")],
     False, "xid: XID 79 on PCI:0000:5d:00: off the bus"),
    ([Check("ecc", False, "GPU 2: 2 uncorrectable"), Check("disk:shared", False, "full"),
      Check("command", False, "x")], False, "ecc: GPU 2: 2 uncorrectable (+2 more failing)"),
    ([], True, "ok"),
])
def test_verdict(checks, healthy, reason):
    assert verdict(checks) == (healthy, reason)


def test_report_format():
    report = make_report({"node": "w1", "cluster_name": "argus-ray", "role": "worker",
                          "node_ip": "10.0.0.3"}, "ab" * 28, 1765015267.5, 30,
                         [Check("gpus", True, "4 GPUs"), Check("xid", False, "XID 79")])
    data = json.loads(report.to_json())
    assert data == {
        "version": 1, "node": "w1", "cluster_name": "argus-ray", "role": "worker",
        "node_ip": "10.0.0.3", "ray_node_id": "ab" * 28, "checked_at": 1765015267.5,
        "interval_s": 30, "healthy": False, "reason": "xid: XID 79",
        "checks": [{"name": "gpus", "ok": True, "detail": "4 GPUs"},
                   {"name": "xid", "ok": False, "detail": "XID 79"}]}
