"""Parse what the GPU tools print: ``nvidia-smi -q`` and kernel-log XID lines. Pure: text in,
values out; :mod:`raypool.nodehealth` runs the tools, :mod:`raypool.healthpolicy` judges.

``nvidia-smi -q`` is an indented tree (4 spaces a level) of ``key : value`` lines and
section headers; one top-level section per GPU, headed by its PCI bus id. NVIDIA says the
text is not a stable interface, so the parser reads by key names and indentation only, and
knows the three ECC layouts drivers have printed:

* Hopper / recent drivers: ``ECC Errors`` > ``Volatile`` > ``SRAM Correctable``,
  ``SRAM Uncorrectable Parity``, ``SRAM Uncorrectable SEC-DED``, ``DRAM Correctable``,
  ``DRAM Uncorrectable``;
* Ampere (R470-R525): ``SRAM Uncorrectable`` and ``DRAM Uncorrectable``;
* Volta and older: ``Single Bit`` / ``Double Bit`` headers, each with per-memory counts and a
  ``Total`` (uncorrectable = ``Double Bit`` > ``Total``).

``N/A`` (ECC off, not supported) counts as nothing. XIDs are not in ``nvidia-smi -q``: the
driver writes them to the kernel log (``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_KEY_VALUE = re.compile(r"^(\s*)(\S.*?)\s+:\s?(.*)$")
_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(\d+)")
# nvidia-smi prints this (and carries on with the other GPUs) when one is lost.
_HANDLE_ERROR = re.compile(r"Unable to determine the device handle for (?:GPU )?(\S+?):? (.*)$")
_XID = re.compile(r"NVRM: Xid \((PCI:[0-9A-Fa-f:.]+)\): (\d+),\s*(.*)$")


@dataclass(frozen=True)
class GpuInfo:
    bus_id: str
    name: str = ""
    uuid: str = ""
    minor: str = ""
    ecc_volatile_uncorrectable: int = 0
    ecc_aggregate_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failed: bool = False
    retire_pending: bool = False

    @property
    def label(self) -> str:
        """``GPU 0 (00000000:18:00.0)``: the minor number when known, and the bus id."""
        return f"GPU {self.minor} ({self.bus_id})" if self.minor else f"GPU {self.bus_id}"


@dataclass(frozen=True)
class SmiReport:
    gpus: tuple[GpuInfo, ...]
    attached: int | None = None  # "Attached GPUs : N"
    errors: tuple[str, ...] = field(default=())  # "Unable to determine the device handle"


def _count(value: str) -> int:
    value = value.strip()
    return int(value) if value.isdigit() else 0


def _yes(value: str) -> bool:
    return value.strip().lower() == "yes"


def _uncorrectable(path: tuple[str, ...], key: str) -> bool:
    """Does this counter (below ``ECC Errors`` > Volatile|Aggregate) count uncorrectable
    errors? ``Double Bit`` > ``Total`` in the old layout, ``*Uncorrectable*`` in the new."""
    if "Double Bit" in path:
        return key == "Total"
    if "Single Bit" in path:
        return False
    return "Uncorrectable" in key


def _parse_gpu(bus_id: str, lines: list[str]) -> GpuInfo:
    info: dict[str, object] = {"bus_id": bus_id}
    volatile = aggregate = 0
    stack: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        level = max(0, indent // 4 - 1)  # the GPU's own keys are indented once
        match = _KEY_VALUE.match(line)
        if match is None:  # a section header
            del stack[level:]
            stack.append(line.strip())
            continue
        key, value = match.group(2).strip(), match.group(3)
        del stack[level:]
        path = tuple(stack)
        if not path:
            if key == "Product Name":
                info["name"] = value.strip()
            elif key == "GPU UUID":
                info["uuid"] = value.strip()
            elif key == "Minor Number":
                info["minor"] = value.strip() if value.strip().isdigit() else ""
        elif path[0] == "ECC Errors" and len(path) >= 2 and _uncorrectable(path, key):
            if path[1] == "Volatile":
                volatile += _count(value)
            elif path[1] == "Aggregate":
                aggregate += _count(value)
        elif path[0] == "Remapped Rows":
            if key == "Pending":
                info["remap_pending"] = _yes(value)
            elif key == "Remapping Failure Occurred":
                info["remap_failed"] = _yes(value)
        elif path[0] == "Retired Pages" and key.startswith("Pending"):
            info["retire_pending"] = _yes(value)
    return GpuInfo(ecc_volatile_uncorrectable=volatile, ecc_aggregate_uncorrectable=aggregate,
                   **info)  # type: ignore[arg-type]


def parse_smi_query(text: str) -> SmiReport:
    """``nvidia-smi -q`` output -> one :class:`GpuInfo` per GPU section, in order."""
    attached: int | None = None
    errors: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        header = _GPU_HEADER.match(line)
        if header:
            sections.append((header.group(1), []))
            continue
        lost = _HANDLE_ERROR.search(line)
        if lost:
            errors.append(line.strip())
            continue
        if not line.startswith(" "):
            match = _ATTACHED.match(line)
            if match:
                attached = int(match.group(1))
            continue
        if sections:
            sections[-1][1].append(line)
    return SmiReport(tuple(_parse_gpu(bus, lines) for bus, lines in sections), attached,
                     tuple(errors))


@dataclass(frozen=True)
class XidEvent:
    pci: str
    code: int
    message: str


def parse_kernel_xids(text: str) -> list[XidEvent]:
    """Every ``NVRM: Xid`` line of a kernel log (``dmesg``, ``journalctl -k``, /dev/kmsg)."""
    events = []
    for line in text.splitlines():
        match = _XID.search(line)
        if match:
            events.append(XidEvent(match.group(1), int(match.group(2)), match.group(3).strip()))
    return events
