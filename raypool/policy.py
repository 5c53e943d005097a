"""What a watchdog should do next, given what it observed. Pure functions, no I/O.

The watchdog loops (``head.py``, ``worker.py``) gather an observation, ask these
functions for a :class:`Decision`, and carry it out. Exit codes of ``ray start --block``
are never trusted alone (``ray start --block`` exits 1 on a clean SIGTERM too, and a plain
``ray stop`` leaves it blocking with nothing under it): an exit always means "clean up and
start over", and a child that is still running must also be healthy (head) or registered
(worker).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from raypool.headrecord import HeadRecord


class Action(StrEnum):
    START = "start"  # no Ray running: start it (head: with a new generation)
    KEEP = "keep"    # Ray running (or coming up): leave it alone
    STOP = "stop"    # stop Ray, sweep the node's leftovers; the next tick decides again
    WAIT = "wait"    # no Ray running and nothing to join yet


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


@dataclass(frozen=True)
class Limits:
    start_timeout_s: float  # a fresh Ray must be healthy/registered within this
    unhealthy_s: float      # a Ray that was healthy may be unhealthy this long


@dataclass(frozen=True)
class ChildState:
    """The ``ray start --block`` child as the watchdog sees it."""

    running: bool                 # a child exists and has not exited
    exit_code: int | None = None  # set when a child exited since the last tick
    since_start_s: float = 0.0
    ever_ok: bool = False         # has it ever been healthy (head) / registered (worker)
    not_ok_for_s: float = 0.0     # time since last healthy/registered (or since start)


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


def decide_head(child: ChildState, healthy: bool, limits: Limits) -> Decision:
    if child.exit_code is not None:
        return Decision(Action.STOP, f"ray start exited with code {child.exit_code}")
    if not child.running:
        return Decision(Action.START, "no head running")
    return _judge_running(child, healthy, limits, "healthy")


def decide_worker(child: ChildState, head: HeadRecord | None, head_reason: str,
                  head_healthy: bool, joined: tuple[str, str, int] | None,
                  registered: bool, limits: Limits) -> Decision:
    """``head`` is a *fresh* record or None; ``joined`` the target the child was started for."""
    if child.exit_code is not None:
        return Decision(Action.STOP, f"ray start exited with code {child.exit_code}")
    if child.running:
        if head is not None and head.target != joined:
            return Decision(Action.STOP, f"head.json names a new head {head.gcs_address} "
                                         f"generation {head.generation[:8]}")
        return _judge_running(child, registered, limits, "registered")
    if head is None:
        return Decision(Action.WAIT, f"no fresh head record: {head_reason}")
    if not head_healthy:
        return Decision(Action.WAIT, f"head {head.gcs_address} does not answer")
    return Decision(Action.START, f"joining head {head.gcs_address} "
                                  f"generation {head.generation[:8]}")
