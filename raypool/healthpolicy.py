"""Node health: what each check concludes from what was observed, the node's verdict, and
the health file's format. Pure: :mod:`raypool.nodehealth` runs the tools and publishes.

Every check yields a :class:`Check` (name, ok, one-line detail). The node is healthy when
every check is ok; its reason is the first failing check's ``name: detail`` (``ok`` when
healthy). A check that cannot look (no kernel log to read, no GPUs offered) is ok, and its
detail says what it skipped and why.

XIDs: the driver's error codes in the kernel log. Most say the GPU or its link is broken
(79 fallen off the bus, 48 double-bit ECC, 63/64 row remapping, 74 NVLink, 92/94/95 ECC,
119/120 GSP, ...) and stay until a reset or reboot. Six are caused by the application, not
the GPU, and leave the node healthy (NVIDIA's XID catalogue: "user application" causes):
13 graphics engine exception (an illegal address, an assert in a kernel), 31 GPU memory page
fault (out-of-range access), 43 GPU stopped processing (the application's channel was
killed: a Ctrl-C, an OOM kill), 45 preemptive cleanup (a process ended while using the GPU),
68 video processor exception, 109 context switch timeout (usually a hung kernel). A job
that trips one fails on its own; the node is fine for the next.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from raypool.gpuparse import SmiReport, parse_kernel_xids, parse_smi_query

FORMAT_VERSION = 1
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
MAX_DETAIL = 240


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class CommandOutcome:
    """What running a tool gave: its exit code and output, or why there is none."""

    exit_code: int | None = None
    output: str = ""
    timed_out: bool = False
    not_found: bool = False  # the executable does not exist
    error: str = ""          # it could not be started (permission, ...)


def one_line(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` as one printable line of at most ``limit`` characters."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in part).strip()
                    for part in text.splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return one_line(line)
    return ""


# --- GPUs --------------------------------------------------------------------------------

def _smi_problem(outcome: CommandOutcome, timeout_s: float) -> str | None:
    if outcome.timed_out:
        return f"nvidia-smi -q timed out after {timeout_s:g}s (a hung driver?)"
    if outcome.error:
        return f"nvidia-smi cannot run: {one_line(outcome.error)}"
    if outcome.exit_code not in (0, None) and not parse_smi_query(outcome.output).gpus:
        said = first_line(outcome.output) or "no output"
        return f"nvidia-smi -q failed (exit {outcome.exit_code}): {said}"
    return None


def check_gpus(offered: int | None, fake: bool, smi: CommandOutcome,
               timeout_s: float) -> tuple[Check, SmiReport | None]:
    """The GPUs ``nvidia-smi -q`` sees against those the node offers Ray (``offered``:
    ``ARGUS_WORKER_NUM_GPUS``, else what the GCS lists for the node, else None). Returns the
    check and the parsed report (None when there is none to judge ECC by)."""
    if offered == 0:
        return Check("gpus", True, "skipped: the node offers no GPUs"), None
    if smi.not_found:
        if fake:
            return Check("gpus", True, "skipped: fake GPUs (ARGUS_FAKE_GPUS=1) and no "
                                       "nvidia-smi"), None
        if offered is None:
            return Check("gpus", True, "skipped: no nvidia-smi and no GPUs offered"), None
        return Check("gpus", False, f"nvidia-smi not found; the node offers {offered} "
                                    "GPUs"), None
    problem = _smi_problem(smi, timeout_s)
    if problem:
        return Check("gpus", False, problem), None
    report = parse_smi_query(smi.output)
    seen = len(report.gpus)
    if report.errors:
        return Check("gpus", False, f"{report.errors[0]} ({seen} GPUs answer)"), report
    if report.attached is not None and report.attached > seen:
        return Check("gpus", False, f"{report.attached} GPUs attached, {seen} answer"), report
    if offered is not None and seen < offered:
        return Check("gpus", False, f"nvidia-smi sees {seen} GPUs, the node offers "
                                    f"{offered}"), report
    names = sorted({g.name for g in report.gpus if g.name})
    offer = f" (offered {offered})" if offered is not None else ""
    return Check("gpus", True, one_line(f"{seen} GPUs{offer}: {', '.join(names)}")), report


def check_ecc(report: SmiReport | None, skipped_because: str) -> Check:
    """Uncorrectable ECC errors since the last reset (volatile), rows or pages waiting for a
    reset, a failed row remap: each needs a GPU reset (or the GPU replaced). Aggregate
    (lifetime) counts are only shown: an old error already remapped is not a fault now."""
    if report is None:
        return Check("ecc", True, f"skipped: {skipped_because}")
    problems = []
    lifetime = 0
    for gpu in report.gpus:
        lifetime += gpu.ecc_aggregate_uncorrectable
        if gpu.ecc_volatile_uncorrectable:
            problems.append(f"{gpu.label}: {gpu.ecc_volatile_uncorrectable} uncorrectable ECC "
                            "errors since the last reset")
        if gpu.remap_failed:
            problems.append(f"{gpu.label}: row remapping failed")
        if gpu.remap_pending:
            problems.append(f"{gpu.label}: remapped rows pending a GPU reset")
        if gpu.retire_pending:
            problems.append(f"{gpu.label}: retired pages pending a GPU reset")
    if problems:
        return Check("ecc", False, one_line("; ".join(problems)))
    return Check("ecc", True, f"no uncorrectable ECC errors since reset on {len(report.gpus)} "
                              f"GPUs ({lifetime} in their lifetime)")


def check_xids(kernel_log: CommandOutcome | None, ignore: Iterable[int]) -> Check:
    """XIDs in the kernel log other than ``ignore`` (the application XIDs by default)."""
    if kernel_log is None:
        return Check("xid", True, "skipped: the node offers no GPUs")
    if kernel_log.not_found or kernel_log.error or kernel_log.timed_out \
            or kernel_log.exit_code not in (0, None):
        why = (first_line(kernel_log.output) or kernel_log.error
               or ("timed out" if kernel_log.timed_out else "not found"))
        return Check("xid", True, one_line(f"skipped: kernel log not readable ({why})"))
    ignored = frozenset(ignore)
    events = parse_kernel_xids(kernel_log.output)
    bad = [e for e in events if e.code not in ignored]
    if bad:
        last = bad[-1]
        codes = sorted({e.code for e in bad})
        return Check("xid", False, one_line(
            f"XID {last.code} on {last.pci}: {last.message} ({len(bad)} XID events, codes "
            f"{', '.join(map(str, codes))}, since boot)"))
    if events:
        codes = sorted({e.code for e in events})
        return Check("xid", True, f"{len(events)} application XIDs ignored "
                                  f"({', '.join(map(str, codes))})")
    return Check("xid", True, "no XID in the kernel log")


# --- disk, raylet, the operator's command -----------------------------------------------

def check_free_space(label: str, path: str, free_bytes: int | None, error: str,
                     min_bytes: int) -> Check:
    name = f"disk:{label}"
    if free_bytes is None:
        return Check(name, False, one_line(f"{path}: cannot stat: {error}"))
    gib = free_bytes / 2**30
    if free_bytes < min_bytes:
        return Check(name, False, f"{path}: {gib:.1f} GiB free, below "
                                  f"{min_bytes / 2**30:g} GiB")
    return Check(name, True, f"{path}: {gib:.1f} GiB free")


STARTING_GRACE_S = 180.0  # a node's raylet not yet up this long after its start: a fault
RAYLET_ALIVE = "alive in the GCS"


class RayletSeen:
    """What the GCS says of this node (by its name): a value of :func:`check_raylet`."""

    ALIVE = "alive"
    DEAD = "dead"          # listed, not alive (and none alive under the name)
    UNLISTED = "unlisted"  # the GCS answers and does not know the name
    SILENT = "silent"      # no GCS answers (head restarting), or no head.json


def check_raylet(raylet_pids: Sequence[int], seen: str, gcs_address: str, *,
                 starting: bool = False) -> Check:
    """The node's raylet: a process of this node (found by its tag, as the watchdog sweeps)
    and the GCS's word. A GCS that does not answer is the head's fault, not this node's.
    ``starting``: this node's raylet was never yet seen alive and the node started lately
    (``STARTING_GRACE_S``): no raylet yet, or one not registered yet, is its start, not a
    fault (a first round before Ray is up would cordon every new node for three rounds)."""
    if starting and (not raylet_pids or seen == RayletSeen.UNLISTED):
        return Check("raylet", True, "starting: the node's raylet is not up and registered "
                                     "yet (its watchdog starts Ray)")
    if not raylet_pids:
        return Check("raylet", False, "no raylet process of this node (Ray not running or "
                                      "being restarted by the watchdog)")
    pids = ",".join(map(str, raylet_pids))
    if seen == RayletSeen.DEAD:
        return Check("raylet", False, f"raylet pid {pids} runs but the GCS {gcs_address} "
                                      "lists this node dead")
    if seen == RayletSeen.UNLISTED:
        return Check("raylet", False, f"raylet pid {pids} runs but the GCS {gcs_address} "
                                      "does not list this node (not registered)")
    if seen == RayletSeen.SILENT:
        return Check("raylet", True, f"raylet pid {pids}; the GCS does not answer (head "
                                     "restarting?)")
    return Check("raylet", True, f"raylet pid {pids}, {RAYLET_ALIVE}")


def raylet_up(checks: Sequence[Check]) -> bool:
    """Whether a round's checks saw this node's raylet alive in the GCS."""
    return any(c.name == "raylet" and c.ok and c.detail.endswith(RAYLET_ALIVE) for c in checks)


def check_command(outcome: CommandOutcome, timeout_s: float) -> Check:
    """``ARGUS_HEALTH_CMD`` (Slurm's HealthCheckProgram contract): exit 0 is healthy, any
    other exit unhealthy, the first line of its output is the reason."""
    said = first_line(outcome.output)
    if outcome.timed_out:
        return Check("command", False, f"health command timed out after {timeout_s:g} s")
    if outcome.not_found or outcome.error:
        return Check("command", False, one_line(
            f"health command cannot run: {outcome.error or 'not found'}"))
    if outcome.exit_code == 0:
        return Check("command", True, said or "exit 0")
    return Check("command", False, said or f"health command exited {outcome.exit_code}")


# --- the verdict and the file ------------------------------------------------------------

def verdict(checks: Sequence[Check]) -> tuple[bool, str]:
    """(healthy, reason): the first failing check names the reason, others are counted."""
    failing = [c for c in checks if not c.ok]
    if not failing:
        return True, "ok"
    more = f" (+{len(failing) - 1} more failing)" if len(failing) > 1 else ""
    return False, one_line(f"{failing[0].name}: {failing[0].detail}") + more


@dataclass(frozen=True)
class HealthReport:
    node: str
    cluster_name: str
    role: str
    node_ip: str
    ray_node_id: str | None
    checked_at: float
    interval_s: float
    healthy: bool
    reason: str
    checks: tuple[Check, ...]
    version: int = FORMAT_VERSION

    def to_json(self) -> str:
        data = asdict(self)
        data["checks"] = [asdict(c) for c in self.checks]
        return json.dumps(data, indent=1, sort_keys=True) + "\n"


def make_report(identity: Mapping[str, str], ray_node_id: str | None, checked_at: float,
                interval_s: float, checks: Sequence[Check]) -> HealthReport:
    healthy, reason = verdict(checks)
    return HealthReport(node=identity["node"], cluster_name=identity["cluster_name"],
                        role=identity["role"], node_ip=identity["node_ip"],
                        ray_node_id=ray_node_id, checked_at=checked_at, interval_s=interval_s,
                        healthy=healthy, reason=reason, checks=tuple(checks))
