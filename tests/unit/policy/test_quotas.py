"""Per-user limits, by table: usage + limits + gang -> hold reason or go."""

from __future__ import annotations

import pytest

from service.policy.quotas import Limits, Load, hold_reason, load_by_user

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


# -- what a user may store: submit_refusal ----------------------------------------------------

HOUR = 3600
NOW = 1_766_000_000.0  # inside hour 490555
THIS_HOUR = int(NOW // HOUR)


def test_the_window_is_this_hour_and_the_23_before() -> None:
    from service.policy.quotas import window_start_hour
    assert window_start_hour(NOW) == THIS_HOUR - 23


@pytest.mark.parametrize(("limits", "waiting", "hourly", "new", "limit", "retry"), [
    # under both limits
    (Limits(max_waiting_tasks=3, max_spec_bytes_per_day=100), 2, [(THIS_HOUR, 50)], 50,
     None, None),
    # the waiting-task limit, checked first
    (Limits(max_waiting_tasks=3, max_spec_bytes_per_day=100), 3, [(THIS_HOUR, 99)], 50,
     "max_waiting_tasks", 60),
    # 0: no limit
    (Limits(max_waiting_tasks=0, max_spec_bytes_per_day=0), 10**6, [(THIS_HOUR, 10**12)],
     10**6, None, None),
    # the byte limit: the oldest hour that leaves the window makes room
    (Limits(max_spec_bytes_per_day=100), 0, [(THIS_HOUR - 23, 40), (THIS_HOUR, 50)], 20,
     "max_spec_bytes_per_day", int((THIS_HOUR + 1) * HOUR - NOW)),
    # ... or only a later one does
    (Limits(max_spec_bytes_per_day=100), 0, [(THIS_HOUR - 23, 10), (THIS_HOUR - 5, 80)], 30,
     "max_spec_bytes_per_day", int((THIS_HOUR - 5 + 24) * HOUR - NOW)),
    # a JobSpec larger than a whole day's quota: a day
    (Limits(max_spec_bytes_per_day=100), 0, [], 101, "max_spec_bytes_per_day", 24 * HOUR),
])
def test_submit_refusal_by_table(limits, waiting, hourly, new, limit, retry) -> None:
    from service.policy.quotas import submit_refusal
    refusal = submit_refusal("mallory", limits, waiting=waiting, hourly_bytes=hourly,
                             new_bytes=new, now=NOW)
    if limit is None:
        assert refusal is None
    else:
        assert refusal is not None and refusal.limit == limit
        assert refusal.retry_after_s == retry and refusal.retry_after_s >= 1
        assert limit in refusal.message and "mallory" in refusal.message


def test_defaults_stop_a_flood_and_bad_values_are_refused() -> None:
    assert Limits().max_waiting_tasks == 1000
    assert Limits().max_spec_bytes_per_day == 64 << 20
    with pytest.raises(ValueError, match="max_waiting_tasks"):
        Limits(max_waiting_tasks=-1)
