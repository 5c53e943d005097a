"""Per-user limits, by table: usage + limits + gang -> hold reason or go."""

from __future__ import annotations

import pytest

from service.quotas import Limits, Load, hold_reason, load_by_user

NONE = Limits()


@pytest.mark.parametrize(("load", "limits", "gpus", "enabled", "expected"), [
    # no limits: always go
    (Load(5, 40), NONE, 8, True, None),
    # GPU limit
    (Load(1, 4), Limits(max_gpus=8), 4, True, None),
    (Load(1, 4), Limits(max_gpus=8), 5, True,
     "user alice uses 4 of 8 GPUs allowed; this task needs 5"),
    (Load(2, 8), Limits(max_gpus=8), 1, True,
     "user alice uses 8 of 8 GPUs allowed; this task needs 1"),
    (Load(), Limits(max_gpus=8), 8, True, None),
    (Load(), Limits(max_gpus=8), 16, True,
     "needs 16 GPUs, more than user alice's limit of 8 GPUs: it cannot start unless the "
     "limit is raised"),
    # task limit
    (Load(1, 4), Limits(max_running_tasks=2), 4, True, None),
    (Load(2, 2), Limits(max_running_tasks=2), 1, True, "user alice runs 2 of 2 tasks allowed"),
    # both: the task limit is reported first
    (Load(2, 8), Limits(max_running_tasks=2, max_gpus=8), 1, True,
     "user alice runs 2 of 2 tasks allowed"),
    # nothing on the cluster yet
    (None, Limits(max_running_tasks=1, max_gpus=4), 4, True, None),
    # disabled: held whatever the limits
    (None, NONE, 1, False,
     "user alice is disabled: the task waits until an admin enables the user again or "
     "cancels it"),
])
def test_hold_reason(load, limits, gpus, enabled, expected) -> None:
    assert hold_reason("alice", load, limits, gpus, enabled=enabled) == expected


def test_tasks_without_an_owner_are_not_limited() -> None:
    assert hold_reason(None, Load(9, 99), Limits(1, 1), 8, enabled=False) is None


def test_load_by_user_counts_tasks_and_gpus() -> None:
    loads = load_by_user([("alice", 4), ("bob", 8), ("alice", 2), (None, 4)])
    assert loads == {"alice": Load(2, 6), "bob": Load(1, 8)}


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_limits_are_non_negative_integers(bad) -> None:
    with pytest.raises(ValueError, match="integer >= 0"):
        Limits(max_gpus=bad)
