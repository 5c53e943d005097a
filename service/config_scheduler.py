"""``v2.scheduler`` read and checked: each key's kind (a choice, a flag, a priority, a
count, seconds), then the rules between keys (``SchedulerSettings`` holds the shape)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from service.config import ConfigError, SchedulerSettings
from service.config_values import flag, number
from service.policy.priorities import range_problem

_SCHED_KEYS = {f.name for f in fields(SchedulerSettings)}
_CHOICES = {"retry_backoff": ("fixed", "exponential"), "retry_mode": ("when_fits", "timer")}
_FLAGS = ("backfill", "fair_share", "preemption", "preempt_without_checkpoint", "quarantine",
          "quarantine_requeue")
_PRIORITIES = ("default_priority", "max_user_priority")


def scheduler_settings(raw: Mapping[str, Any]) -> SchedulerSettings:
    """The scheduler's settings from the ``v2.scheduler`` mapping ``raw``."""
    unknown = set(raw) - _SCHED_KEYS
    if unknown:
        raise ConfigError(f"v2.scheduler: unknown keys {sorted(unknown)}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"v2.scheduler.{key}"
        if key in _CHOICES:
            if value not in _CHOICES[key]:
                choices = " or ".join(repr(c) for c in _CHOICES[key])
                raise ConfigError(f"{where}: must be {choices}, got {value!r}")
            out[key] = value
        elif key in _FLAGS:
            out[key] = flag(value, where)
        elif key in _PRIORITIES:
            problem = range_problem(value)
            if problem:
                raise ConfigError(f"{where}: {problem}")
            out[key] = value
        elif key in ("max_attempts", "stuck_timeout_s", "fair_share_half_life_s",
                     "default_max_runtime_s") and value is None:
            out[key] = None
        elif key in ("max_attempts", "max_running_tasks", "reservations",
                     "quarantine_tasks"):
            out[key] = number(value, where, integer=True,
                            minimum=1 if key in ("max_attempts", "quarantine_tasks") else 0)
        else:
            out[key] = float(number(value, where, minimum=0))
    sched = SchedulerSettings(**out)
    _check(sched)
    return sched


def _check(sched: SchedulerSettings) -> None:
    """Rules between keys, and values that make no sense (``ConfigError``)."""
    if sched.tick_s <= 0:
        raise ConfigError("v2.scheduler.tick_s: must be > 0")
    if sched.retry_max_backoff_s < sched.retry_min_backoff_s:
        raise ConfigError(
            f"v2.scheduler.retry_max_backoff_s ({sched.retry_max_backoff_s:g}) must be >= "
            f"retry_min_backoff_s ({sched.retry_min_backoff_s:g})")
    if sched.max_user_priority < sched.default_priority:
        raise ConfigError(
            f"v2.scheduler.max_user_priority ({sched.max_user_priority}) must be >= "
            f"default_priority ({sched.default_priority}): a user's task without a "
            "priority would be above what users may ask for")
    if sched.fair_share_half_life_s is not None and sched.fair_share_half_life_s <= 0:
        raise ConfigError("v2.scheduler.fair_share_half_life_s: must be > 0 or null")
    if sched.quarantine_window_s <= 0:
        raise ConfigError("v2.scheduler.quarantine_window_s: must be > 0")
    if sched.default_max_runtime_s is not None and sched.default_max_runtime_s < 1:
        raise ConfigError("v2.scheduler.default_max_runtime_s: must be >= 1 (seconds) or null")
