"""Typed wait reasons: the one renderer, by table; kinds parsed strictly."""

from __future__ import annotations

import typing

import pytest

from service.domain import reasons
from service.domain.reasons import (
    Ahead,
    AtGpuLimit,
    AtTaskLimit,
    Backoff,
    BehindFifo,
    Cordoned,
    Guard,
    Interrupted,
    MaxRunning,
    NeverFits,
    NoRoom,
    OverGpuLimit,
    Planned,
    PlannedAhead,
    Preempted,
    Preempting,
    Reason,
    ReservedFor,
    RetryAfterFailure,
    Text,
    Unreachable,
    UserDisabled,
    WaitKind,
    parse_kind,
    render,
)

T = 1_767_225_600.0  # 2026-01-01T00:00:00.000Z
GANG = "1x4 GPUs (+12 CPUs per node)"

RENDERED = [
    (NoRoom(GANG, "10.0.0.1 0 GPU/3 CPU"), f"needs {GANG}; free: 10.0.0.1 0 GPU/3 CPU"),
    (NoRoom(GANG, "x", "CPU 1"), f"no free driver slot (CPU 1) next to {GANG}; free: x"),
    (NeverFits(GANG, "10.0.0.1 2 GPU/8 CPU"), "can never fit this cluster as it is: needs "
     f"{GANG} and a driver slot; node capacity: 10.0.0.1 2 GPU/8 CPU"),
    (UserDisabled("bob"), "user bob is disabled: the task waits until an admin enables the "
     "user again or cancels it"),
    (OverGpuLimit("bob", 16, 8), "needs 16 GPUs, more than user bob's limit of 8 GPUs: it "
     "cannot start unless the limit is raised"),
    (AtTaskLimit("bob", 2, 2), "user bob runs 2 of 2 tasks allowed"),
    (AtGpuLimit("bob", 6, 8, 4), "user bob uses 6 of 8 GPUs allowed; this task needs 4"),
    (MaxRunning(4), "max_running_tasks (4) reached"),
    (Guard("t-1", 9, "10.0.0.2", 300.0), "waiting behind t-1 (priority 9), runnable for over "
     "300s: nodes 10.0.0.2 are kept for it (starvation guard)"),
    (Guard("t-1", 9, "10.0.0.2", 300.0, preempting=True), "waiting behind t-1 (priority 9), "
     "lower-priority tasks are being preempted for it: nodes 10.0.0.2 are kept for it "
     "(starvation guard)"),
    (Guard("t-1", 9, "n", 300.0, shadow=T), "waiting behind t-1 (priority 9), runnable for "
     "over 300s: nodes n are kept for it (starvation guard); they are free by "
     "2026-01-01T00:00:00.000Z at the latest: a task whose max_runtime_s ends by then may run "
     "there meanwhile"),
    (BehindFifo("t-1", 0), "waiting behind t-1 (priority 0): first come, first served "
     "(backfill off)"),
    (ReservedFor("t-1", "10.0.0.1", T), "waiting behind t-1: nodes 10.0.0.1 are reserved for "
     "it from 2026-01-01T00:00:00.000Z; a task whose max_runtime_s ends by then may run there"),
    (PlannedAhead("10.0.0.1"), "fits now on nodes 10.0.0.1, but they are planned for tasks "
     "ahead of it"),
    (Preempting("t-2 (priority 0)", 600.0), "preempting t-2 (priority 0) to make room "
     "(waited past preemption_grace_s=600)"),
    (Preempted(1, "t-1"), "attempt 1 preempted for t-1; attempt 2 as soon as it fits again "
     "(resumes from its checkpoint)"),
    (Preempted(1, "node:gpu-07", "replacing GPU 3"), "attempt 1 preempted (node gpu-07 "
     "drained: replacing GPU 3); attempt 2 as soon as it fits on another node (resumes from "
     "its checkpoint)"),
    (Preempted(2, "node:gpu-07"), "attempt 2 preempted (node gpu-07 drained); attempt 3 as "
     "soon as it fits on another node (resumes from its checkpoint)"),
    (Backoff(2, T), "retry backoff: attempt 2 not before 2026-01-01T00:00:00.000Z; the room it "
     "needs is kept for it"),
    (RetryAfterFailure(1, "CLUSTER_LOST", T), "attempt 1 failed (CLUSTER_LOST); attempt 2 not "
     "before 2026-01-01T00:00:00.000Z"),
    (Interrupted(1, "t--a01"), "attempt 1 never reached Ray (interrupted submit); it will be "
     "submitted again as t--a01"),
    (Unreachable("timeout"), "Ray cluster unreachable: timeout"),
    (Text("anything"), "anything"),
    (Cordoned(NoRoom(GANG, "w1 0 GPU/3 CPU"), "node-b is cordoned: bad ECC"),
     f"needs {GANG}; free: w1 0 GPU/3 CPU; node-b is cordoned: bad ECC"),
]


@pytest.mark.parametrize(("details", "text"), RENDERED)
def test_render(details, text) -> None:
    assert render(Reason(WaitKind.OTHER, details)) == text


def test_the_table_covers_every_wording() -> None:
    assert {type(d) for d, _ in RENDERED} == set(typing.get_args(reasons.Details))


def test_what_came_first_and_the_planned_start_follow_the_details() -> None:
    base = Reason(WaitKind.RESOURCES, NoRoom(GANG, "x"))
    assert base.behind(Ahead(higher_priority=True)).text.endswith(
        "; after tasks of higher priority")
    users = base.behind(Ahead(users=("a", "b", "c", "d")))
    assert users.text.endswith("; after users a, b, c ... (smaller fair share)")
    assert base.behind(Ahead()).text == base.text
    planned = base.planned_by(Planned(T))
    assert planned.text == (base.text + "; planned start by 2026-01-01T00:00:00.000Z (from "
                            "time limits)")
    expected = base.planned_by(Planned(T, T - 3600 + 20))  # rounded to the minute
    assert expected.text.endswith("; expected start about 2025-12-31T23:00:00.000Z (from run "
                                  "history), by 2026-01-01T00:00:00.000Z at the latest (from time "
                                  "limits)")
    assert planned.kind is expected.kind is WaitKind.RESOURCES


def test_parse_kind_takes_exact_values_only() -> None:
    assert parse_kind("never_fits") is WaitKind.NEVER_FITS
    for bad in ("Never_Fits", "never fits", "", "other "):
        with pytest.raises(ValueError, match="reason must be one of"):
            parse_kind(bad)
