"""nvidia-smi -q and kernel-log XID parsing, on fixtures in the documented formats
(tests/unit/data/nvidia_smi/README.md: synthesized, not captured from a GPU)."""

from __future__ import annotations

import os

import pytest

from raypool.gpuparse import parse_kernel_xids, parse_smi_query

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "nvidia_smi")


def fixture(name: str) -> str:
    with open(os.path.join(DATA, name)) as f:
        return f.read()


def test_healthy_h100s():
    report = parse_smi_query(fixture("h100x4_healthy.txt"))
    assert report.attached == 4 and report.errors == ()
    assert [g.bus_id for g in report.gpus] == ["00000000:18:00.0", "00000000:2A:00.0",
                                               "00000000:3A:00.0", "00000000:5D:00.0"]
    first = report.gpus[0]
    assert first.name == "NVIDIA H100 80GB HBM3" and first.minor == "0"
    assert first.uuid.startswith("GPU-3f1c0a2e")
    assert first.label == "GPU 0 (00000000:18:00.0)"
    assert all(g.ecc_volatile_uncorrectable == 0 == g.ecc_aggregate_uncorrectable
               and not (g.remap_pending or g.remap_failed or g.retire_pending)
               for g in report.gpus)


@pytest.mark.parametrize("name,index,volatile,aggregate,flags", [
    # Hopper layout: SRAM Uncorrectable Parity/SEC-DED + DRAM Uncorrectable; correctable
    # counts and "Aggregate Uncorrectable SRAM Sources" are not counted
    ("h100x4_ecc_uncorrectable.txt", 2, 2, 3, {"remap_pending"}),
    ("h100x4_aggregate_only.txt", 0, 0, 1, set()),
    # Ampere layout
    ("a100x1_remap_failed.txt", 0, 0, 9, {"remap_failed"}),
    # Volta layout: Double Bit > Total only (not the per-memory lines, not Single Bit)
    ("v100x1_double_bit.txt", 0, 1, 1, {"retire_pending"}),
])
def test_ecc_layouts(name, index, volatile, aggregate, flags):
    gpu = parse_smi_query(fixture(name)).gpus[index]
    assert (gpu.ecc_volatile_uncorrectable, gpu.ecc_aggregate_uncorrectable) == (volatile,
                                                                                  aggregate)
    assert {f for f in ("remap_pending", "remap_failed", "retire_pending")
            if getattr(gpu, f)} == flags


def test_a_lost_gpu():
    report = parse_smi_query(fixture("h100x4_gpu_lost.txt"))
    assert report.attached == 4 and len(report.gpus) == 3
    assert report.errors == ("Unable to determine the device handle for GPU "
                             "00000000:2A:00.0: Unknown Error",)


def test_garbage_and_empty():
    assert parse_smi_query("").gpus == ()
    assert parse_smi_query("No devices were found\n").gpus == ()


def test_kernel_xids_dmesg_and_journal():
    events = parse_kernel_xids(fixture("dmesg_xids.txt"))
    assert [(e.pci, e.code) for e in events] == [
        ("PCI:0000:18:00", 13), ("PCI:0000:18:00", 13), ("PCI:0000:2a:00", 43),
        ("PCI:0000:3a:00", 31), ("PCI:0000:5d:00", 79)]
    assert events[-1].message.endswith("GPU has fallen off the bus.")
    journal = parse_kernel_xids(fixture("journalctl_xid48.txt"))
    assert [e.code for e in journal] == [48, 63]
    assert parse_kernel_xids("[ 1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module") == []
