"""Node health checks, the effect side: run the tools, look at the disks, the raylet and the
GCS, ask :mod:`raypool.healthpolicy` for each check's verdict, and publish the report to
``<head.json's dir>/nodes/<node>.health.json`` (atomically; never through a link).

It runs as its own supervisord program (``argus_node_health``, ``argus-node node-health``),
not inside a watchdog: a check may wait up to ``ARGUS_HEALTH_TIMEOUT_S`` on a hung
``nvidia-smi`` or on the operator's command, and the watchdogs' ticks (1-5 s, which keep
Ray up) must never wait on that; a crash of a check is restarted by supervisord without
touching Ray.

Every tool runs in its own process group with its output in a temp file (not a pipe: a
grandchild that keeps the pipe open cannot make us wait), polled against its deadline and
against the program's stop; past either the whole group is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil

from raypool import discovery
from raypool.atomicfile import write_atomic
from raypool.config import NodeSettings
from raypool.health import HealthError, list_nodes, node_by_name
from raypool.healthpolicy import (
    STARTING_GRACE_S,
    Check,
    CommandOutcome,
    HealthReport,
    RayletSeen,
    check_command,
    check_ecc,
    check_free_space,
    check_gpus,
    check_raylet,
    check_xids,
    make_report,
    raylet_up,
)
from raypool.loop import SignalLoop
from raypool.procs import RAY_TAG_ENV, tagged_processes

STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin", "nvidia-smi")
MAX_OUTPUT_BYTES = 1 << 20
GCS_TIMEOUT_S = 3.0
POLL_S = 0.1


class UnsafePath(OSError):
    """The health file's place holds something other than a regular file (a link)."""


# --- tools -------------------------------------------------------------------------------

def run_command(argv: Sequence[str], timeout_s: float, stop: threading.Event | None = None,
                env: dict[str, str] | None = None,
                clock: Callable[[], float] = time.monotonic) -> CommandOutcome:
    """Run ``argv`` (no shell) in a new session; at ``timeout_s`` (or ``stop``) SIGKILL its
    whole process group. Output: stdout and stderr together, at most 1 MiB."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env=env)
        except FileNotFoundError:
            return CommandOutcome(not_found=True)
        except OSError as exc:
            return CommandOutcome(error=exc.strerror or str(exc))
        deadline = clock() + timeout_s
        code: int | None = None
        while code is None and clock() < deadline and not (stop and stop.is_set()):
            try:
                code = proc.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group: what it left behind, too
        if code is None:
            proc.wait()
        out.seek(0)
        text = out.read(MAX_OUTPUT_BYTES).decode("utf-8", "replace")
    if code is None:
        return CommandOutcome(output=text, timed_out=True)
    return CommandOutcome(exit_code=code, output=text)


def tool_argvs(settings: NodeSettings) -> tuple[list[str], list[str]]:
    """``nvidia-smi -q`` and the kernel-log reader (the stand-in's with
    ``ARGUS_FAKE_GPUS=standin``)."""
    if settings.fake_gpus == "standin":
        return [sys.executable, STANDIN, "-q"], [sys.executable, STANDIN, "--dmesg"]
    return ["nvidia-smi", "-q"], ["dmesg"]


def free_bytes(path: str, timeout_s: float) -> tuple[int | None, str]:
    """Free bytes for an unprivileged user on ``path``'s file system (its nearest existing
    parent); statvfs runs in a daemon thread so a hung NFS mount is reported, not waited on."""
    box: dict[str, object] = {}

    def call() -> None:
        where = path
        while True:
            try:
                st = os.statvfs(where)
            except FileNotFoundError:
                if os.path.dirname(where) == where:
                    box["error"] = "no such directory"
                    return
                where = os.path.dirname(where)  # not made yet (Ray's temp dir): its parent
                continue
            except OSError as exc:
                box["error"] = exc.strerror or str(exc)
                return
            box["free"] = st.f_bavail * st.f_frsize
            return

    thread = threading.Thread(target=call, name="statvfs", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return None, f"statvfs did not return within {timeout_s:g}s"
    if "error" in box:
        return None, str(box["error"])
    return int(box["free"]), ""  # type: ignore[call-overload]


def raylet_pids(settings: NodeSettings) -> list[int]:
    """This node's raylet: a process carrying its Ray tag (as the watchdog's sweep finds
    them), never one of another node on the host."""
    pids = []
    for proc in tagged_processes(RAY_TAG_ENV, settings.node_tag):
        with contextlib.suppress(psutil.Error):
            if "raylet" in proc.name():
                pids.append(proc.pid)
    return sorted(pids)


@dataclass(frozen=True)
class GcsSight:
    seen: str               # a RayletSeen value
    address: str
    node_id: str | None = None
    gpus: int | None = None  # the GPU total Ray lists for the node


def gcs_sight(settings: NodeSettings) -> GcsSight:
    """What the GCS says about this node, found by its name (``argus.node`` label)."""
    if settings.role == "head":
        from raypool.head import local_gcs_address
        address = local_gcs_address(settings)
    else:
        from raypool.worker import join_address
        record = discovery.read_record(settings.head_ip_file, settings.cluster_name).record
        if record is None:
            return GcsSight(RayletSeen.SILENT, "")
        address = join_address(settings, record)
    try:
        nodes = list_nodes(address, timeout_s=GCS_TIMEOUT_S)
    except HealthError:
        return GcsSight(RayletSeen.SILENT, address)
    node = node_by_name(nodes, settings.node_name)
    if node is None:
        return GcsSight(RayletSeen.UNLISTED, address)
    gpus = node.resources.get("GPU")
    return GcsSight(RayletSeen.ALIVE if node.alive else RayletSeen.DEAD, address, node.node_id,
                    int(gpus) if gpus is not None else None)


# --- one round of checks -----------------------------------------------------------------

@dataclass
class Probes:
    """The effects one round uses; tests replace them."""

    run: Callable[[Sequence[str], float], CommandOutcome]
    free: Callable[[str, float], tuple[int | None, str]]
    raylets: Callable[[NodeSettings], list[int]]
    gcs: Callable[[NodeSettings], GcsSight]
    now: Callable[[], float] = time.time


def default_probes(stop: threading.Event | None = None) -> Probes:
    return Probes(run=lambda argv, t: run_command(argv, t, stop), free=free_bytes,
                  raylets=raylet_pids, gcs=gcs_sight)


def collect(settings: NodeSettings, probes: Probes, *, starting: bool = False) -> HealthReport:
    """One round's report (``starting``: see ``healthpolicy.check_raylet``)."""
    s = settings
    sight = probes.gcs(s)
    offered = s.offered_gpus if s.offered_gpus is not None else sight.gpus
    checks: list[Check] = []
    smi_argv, log_argv = tool_argvs(s)
    if offered == 0:
        gpus, report = check_gpus(0, bool(s.fake_gpus), CommandOutcome(), s.health_timeout_s)
        kernel_log = None
    else:
        gpus, report = check_gpus(offered, bool(s.fake_gpus),
                                  probes.run(smi_argv, s.health_timeout_s), s.health_timeout_s)
        kernel_log = probes.run(log_argv, s.health_timeout_s)
    checks.append(gpus)
    checks.append(check_ecc(report, gpus.detail.removeprefix("skipped: ")
                            if gpus.ok else "no nvidia-smi report"))
    checks.append(check_xids(kernel_log, s.health_ignore_xids))
    for label, path in (("shared", s.shared_root), ("ray_temp", s.ray_temp_dir)):
        free, error = probes.free(path, s.health_timeout_s)
        checks.append(check_free_space(label, path, free, error, s.health_min_free_bytes))
    checks.append(check_raylet(probes.raylets(s), sight.seen, sight.address,
                               starting=starting))
    if s.health_cmd:
        checks.append(check_command(probes.run(s.health_cmd, s.health_timeout_s),
                                    s.health_timeout_s))
    identity = {"node": s.node_name, "cluster_name": s.cluster_name, "role": s.role,
                "node_ip": s.node_ip}
    return make_report(identity, sight.node_id, probes.now(), s.health_interval_s, checks)


# --- the file ----------------------------------------------------------------------------

def publish(path: str, text: str) -> None:
    """Write the health file atomically (temp file, fsync, rename). Refused, UnsafePath,
    when its directory is a link or its place holds anything but a regular file: the
    rename would replace a link rather than follow it, but a link there was put by someone
    else and is left for an operator to see."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(directory).st_mode):
        raise UnsafePath(f"{directory} is not a directory (a link?): health not published")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise UnsafePath(f"{path} is {kind}: health not published")
    write_atomic(path, text)


# --- the program -------------------------------------------------------------------------

class HealthProgram:
    def __init__(self, settings: NodeSettings, logger: logging.Logger,
                 probes: Probes | None = None):
        self.settings = settings
        self.log = logger
        self.loop = SignalLoop(settings.health_interval_s or 3600.0, logger)
        self.probes = probes or default_probes(self.loop.stopping)
        self._last: tuple[bool, str] | None = None
        self._started = time.monotonic()
        self._raylet_up = False  # this node's raylet seen alive in the GCS once

    @property
    def starting(self) -> bool:
        """Before this node's raylet was first seen alive, within ``STARTING_GRACE_S``."""
        return not self._raylet_up and time.monotonic() - self._started < STARTING_GRACE_S

    def step(self) -> bool:
        s = self.settings
        started = time.monotonic()
        report = collect(s, self.probes, starting=self.starting)
        self._raylet_up = self._raylet_up or raylet_up(report.checks)
        if self.loop.stopping.is_set():
            return False  # its tools were cut short by the stop, not by their deadline
        try:
            publish(s.health_file, report.to_json())
        except OSError as exc:
            self.log.error("cannot publish %s: %s", s.health_file, exc)
        state = (report.healthy, report.reason)
        if state != self._last:
            log = self.log.info if report.healthy else self.log.warning
            log("node %s: %s", "healthy" if report.healthy else "UNHEALTHY", report.reason)
            self._last = state
        # a fixed rate: the interval counts from the start of this round
        self.loop.interval_s = max(0.5, s.health_interval_s - (time.monotonic() - started))
        return False

    def run(self) -> int:
        if self.settings.health_interval_s <= 0:
            self.log.info("health checks off (ARGUS_HEALTH_INTERVAL_S=0)")
            return 0
        self.log.info("health checks every %gs into %s", self.settings.health_interval_s,
                      self.settings.health_file)
        self.loop.run(self.step)
        return 0


def run_node_health(settings: NodeSettings, logger: logging.Logger) -> int:
    return HealthProgram(settings, logger).run()
