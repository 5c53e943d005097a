"""Task priorities: the range, the default, and who may ask for what (pure policy).

A higher priority is admitted first; equal priorities share by fair share, then FIFO.
Everyone may lower their own tasks' priority down to ``MIN_PRIORITY``; a non-admin may
ask for at most ``max_user_priority`` (config, by default the default priority: users
can only step back), an admin for up to ``MAX_PRIORITY``.
"""

from __future__ import annotations

MIN_PRIORITY = -1000
MAX_PRIORITY = 1000


def range_problem(value: object) -> str | None:
    """Why ``value`` is no priority at all (None: it is one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}"
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        return f"must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {value}"
    return None


def allowance_problem(priority: int, *, is_admin: bool, max_user_priority: int,
                      current: int | None = None) -> str | None:
    """Why this caller may not ask for ``priority`` (None: they may). ``current``: the
    task's priority now, when changing one: lowering it is always allowed, even from
    above ``max_user_priority`` (where an admin raised it); setting it again is not."""
    if is_admin or priority <= max_user_priority:
        return None
    if current is not None and priority < current:
        return None
    return (f"priority {priority} is above what users may ask for ({max_user_priority}); "
            f"only an admin sets a priority up to {MAX_PRIORITY}")
