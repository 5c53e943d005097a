"""Who may ask for which priority, by table."""

from __future__ import annotations

import pytest

from service.policy.priorities import allowance_problem


@pytest.mark.parametrize(("priority", "admin", "current", "allowed"), [
    (0, False, None, True),  # up to max_user_priority (0 here)
    (5, False, None, False),
    (5, True, None, True),  # an admin: up to the maximum
    (400, False, 500, True),  # lowering a task an admin raised
    (500, False, 500, False),  # setting it again: as for any value over the allowance
    (501, False, 500, False),  # raising it further: an admin's
    (-1000, False, 3, True),
])
def test_allowance_by_table(priority, admin, current, allowed) -> None:
    problem = allowance_problem(priority, is_admin=admin, max_user_priority=0,
                                current=current)
    assert (problem is None) is allowed
    if not allowed:
        assert "only an admin" in problem
