"""What a watchdog should do next, given what it observed. Pure functions, no I/O.

The watchdog loops (``head.py``, ``worker.py``) gather an observation, ask these
functions for a :class:`Decision`, and carry it out. Exit codes of ``ray start --block``
are never trusted alone (``ray start --block`` exits 1 on a clean SIGTERM too, and a plain
``ray stop`` leaves it blocking with nothing under it): an exit always means "clean up and
start over", and a child that is still running must also be healthy (head) or registered
(worker).

A worker tells apart a GCS that does not answer (a head restart: wait, the raylet and the
runs on it carry on and resubscribe when the GCS is back, up to ``Limits.gcs_wait_s``) from
a GCS that answers and says this node is dead or unknown (rejoin after the grace). It
rejoins at once only for another cluster (head.json's identity changed: a wiped store, an
in-memory GCS restarted) or, when it joined by IP, a head at another address.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from raypool.headrecord import HeadRecord


class Action(StrEnum):
    START = "start"  # no Ray running: start it (head: with a new generation)
    KEEP = "keep"    # Ray running (or coming up): leave it alone
    STOP = "stop"    # stop Ray, sweep the node's leftovers; the next tick decides again
    WAIT = "wait"    # no Ray running and nothing to join (or no store to open) yet


class GcsView(StrEnum):
    """What the head's GCS says about this worker."""

    REGISTERED = "registered"  # it answers and lists this node alive
    UNKNOWN = "unknown"        # it answers: this node is dead or not listed
    SILENT = "silent"          # it does not answer (down, restarting, unreachable)


@dataclass(frozen=True)
class Joined:
    """What a worker's ``ray start`` was started for."""

    identity: str   # the cluster (head.json's identity)
    address: str    # the GCS address from head.json at the time
    by_name: bool   # ray start was given a stable name: Ray follows a moved head itself


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


@dataclass(frozen=True)
class Limits:
    start_timeout_s: float  # a fresh Ray must be healthy/registered within this
    unhealthy_s: float      # a Ray that was healthy may be unhealthy this long
    gcs_wait_s: float = 0.0  # worker: a GCS may stay silent this long (the reconnect budget)


@dataclass(frozen=True)
class ChildState:
    """The ``ray start --block`` child as the watchdog sees it."""

    running: bool                 # a child exists and has not exited
    exit_code: int | None = None  # set when a child exited since the last tick
    since_start_s: float = 0.0
    ever_ok: bool = False         # has it ever been healthy (head) / registered (worker)
    not_ok_for_s: float = 0.0     # time since last healthy/registered (or since start)
    silent_for_s: float = 0.0     # worker: how long the GCS has not answered, this outage


def _judge_running(child: ChildState, ok: bool, limits: Limits, what: str) -> Decision:
    if ok:
        return Decision(Action.KEEP, what)
    if not child.ever_ok:
        if child.since_start_s > limits.start_timeout_s:
            return Decision(Action.STOP, f"not {what} {child.since_start_s:.0f}s after start "
                                         f"(limit {limits.start_timeout_s:g}s)")
        return Decision(Action.KEEP, f"starting, not {what} yet")
    if child.not_ok_for_s > limits.unhealthy_s:
        return Decision(Action.STOP, f"not {what} for {child.not_ok_for_s:.0f}s "
                                     f"(limit {limits.unhealthy_s:g}s)")
    return Decision(Action.KEEP, f"not {what} for {child.not_ok_for_s:.0f}s, within grace")


def bootstrap_record_blocks_head(recorded: str | None, head_address: str) -> bool:
    """Would Ray's ``ray start --head`` refuse to start at ``head_address`` because of what
    ``<temp dir>/ray_current_cluster`` holds (``recorded``, None when there is no file)?

    Ray 2.60 (``ray/scripts/scripts.py``, ``start``) refuses ("Ray is trying to start at
    X:P, but is already running at X:P") when that file names X:P *and* a process on this
    host whose executable name contains ``raylet`` carries ``--gcs-address=X:P``
    (``services.find_gcs_addresses``): not a GCS, any raylet. The file is the last address
    a ``ray start`` of this temp dir wrote; after a GCS SIGKILL it still names this head,
    and on one host (a lab box, host networking) the workers' raylets, waiting for that GCS,
    match: the head cannot start until they give up. The other half of the check is not
    ours to change, so the head watchdog removes the file when this says it blocks (a
    file naming another address is another cluster's and is left alone)."""
    return recorded is not None and recorded.strip() == head_address


def decide_head(child: ChildState, healthy: bool, limits: Limits,
                store_problem: str | None = None) -> Decision:
    """``store_problem`` says why the GCS store cannot be opened now (another head holds
    it); a running head is judged by its health alone."""
    if child.exit_code is not None:
        return Decision(Action.STOP, f"ray start exited with code {child.exit_code}")
    if not child.running:
        if store_problem is not None:
            return Decision(Action.WAIT, f"not starting: {store_problem}")
        return Decision(Action.START, "no head running")
    return _judge_running(child, healthy, limits, "healthy")


def _judge_joined(child: ChildState, head: HeadRecord | None, joined: Joined | None,
                  view: GcsView, limits: Limits) -> Decision:
    if head is not None and joined is not None:
        if head.identity != joined.identity:
            return Decision(Action.STOP, f"head.json names another cluster "
                                         f"{head.identity[:12]} (generation "
                                         f"{head.generation[:8]}) at {head.gcs_address}")
        if not joined.by_name and head.gcs_address != joined.address:
            return Decision(Action.STOP, f"head.json names a new head {head.gcs_address} "
                                         f"of the same cluster")
    if view is GcsView.REGISTERED:
        return Decision(Action.KEEP, "registered")
    if view is GcsView.SILENT and child.ever_ok:
        if child.silent_for_s > limits.gcs_wait_s:
            return Decision(Action.STOP, f"GCS silent for {child.silent_for_s:.0f}s "
                                         f"(reconnect budget {limits.gcs_wait_s:g}s)")
        return Decision(Action.KEEP, f"GCS silent for {child.silent_for_s:.0f}s: waiting "
                                     f"(reconnect budget {limits.gcs_wait_s:g}s)")
    return _judge_running(child, False, limits, "registered")


def decide_worker(child: ChildState, head: HeadRecord | None, head_reason: str,
                  head_healthy: bool, joined: Joined | None, view: GcsView,
                  limits: Limits) -> Decision:
    """``head`` is a *fresh* record or None; ``joined`` what the child was started for."""
    if child.exit_code is not None:
        return Decision(Action.STOP, f"ray start exited with code {child.exit_code}")
    if child.running:
        return _judge_joined(child, head, joined, view, limits)
    if head is None:
        return Decision(Action.WAIT, f"no fresh head record: {head_reason}")
    if not head_healthy:
        return Decision(Action.WAIT, f"head {head.gcs_address} does not answer")
    return Decision(Action.START, f"joining head {head.gcs_address} "
                                  f"generation {head.generation[:8]}")
