"""The dependency policy by table: every condition x every parent state (a parent
re-queued for a retry or preempted is back in PENDING_RESOURCES: not ended)."""

from __future__ import annotations

import pytest

from service.domain.states import TaskState
from service.policy.dependencies import (
    MAX_DEPTH,
    MAX_PARENTS,
    Condition,
    Dep,
    OnUnsatisfiable,
    Verdict,
    cancel_reason,
    decide,
    depth_problem,
    holds,
    on_unsatisfiable_of,
    parse_after,
    wait_reason,
)

S = TaskState
C = Condition
P = "mvp2-alice-sft-20251223-143201-7f3a"
Q = "mvp2-alice-ppo-20251223-143202-0b1c"

# parent state -> (ok, notok, any); None: not decided (the parent has not ended)
TABLE = {
    S.BLOCKED: (None, None, None),
    S.QUEUED: (None, None, None),
    # a retry (retryable failure) or a preemption puts the parent here: not ended
    S.PENDING_RESOURCES: (None, None, None),
    S.SUBMITTING: (None, None, None),
    S.SUBMITTED: (None, None, None),
    S.RUNNING: (None, None, None),
    S.SUCCEEDED: (True, False, True),
    S.FAILED: (False, True, True),
    S.CANCELED: (False, True, True),
}


def test_the_table_covers_every_state() -> None:
    assert set(TABLE) == set(TaskState)


@pytest.mark.parametrize("state", list(TaskState))
@pytest.mark.parametrize("cond", list(Condition))
def test_holds(state: TaskState, cond: Condition) -> None:
    expected = TABLE[state][list(Condition).index(cond)]
    assert holds(cond, state) is expected
    verdict = decide([Dep(P, cond, state)]).verdict
    assert verdict is {None: Verdict.WAIT, True: Verdict.RELEASE,
                       False: Verdict.UNSATISFIABLE}[expected]


def test_a_parent_retried_or_preempted_keeps_its_dependents_waiting() -> None:
    """RUNNING -> PENDING_RESOURCES (retry, preemption) -> RUNNING -> SUCCEEDED: only the
    final state decides, for every condition."""
    for cond in Condition:
        seen = [decide([Dep(P, cond, s)]).verdict
                for s in (S.RUNNING, S.PENDING_RESOURCES, S.SUBMITTED, S.RUNNING)]
        assert seen == [Verdict.WAIT] * 4
    assert decide([Dep(P, C.OK, S.SUCCEEDED)]).verdict is Verdict.RELEASE
    assert decide([Dep(P, C.NOTOK, S.SUCCEEDED)]).verdict is Verdict.UNSATISFIABLE


def test_unsatisfiable_is_told_at_once_and_names_the_parent() -> None:
    deps = [Dep(Q, C.ANY, S.RUNNING), Dep(P, C.OK, S.FAILED)]
    decision = decide(deps)
    assert decision.verdict is Verdict.UNSATISFIABLE and decision.dep == deps[1]
    assert cancel_reason(deps[1]) == (
        f"dependency never satisfied: {P} ended FAILED (after ok)")
    assert wait_reason(deps, OnUnsatisfiable.WAIT) == (
        f"after {P} (FAILED): ok can never hold; waits until canceled")


def test_wait_reason_lists_every_parent_not_ended() -> None:
    deps = [Dep(P, C.OK, S.RUNNING), Dep(Q, C.ANY, S.PENDING_RESOURCES)]
    assert wait_reason(deps, OnUnsatisfiable.CANCEL) == (
        f"after {P} (RUNNING), {Q} (PENDING_RESOURCES)")
    assert decide(deps).dep == deps[0]
    assert wait_reason([Dep(P, C.OK, S.SUCCEEDED)], OnUnsatisfiable.CANCEL) is None


@pytest.mark.parametrize(("value", "problems"), [
    (None, []),
    ({"ok": [P], "any": Q}, []),
    ({"ok": [P, P]}, [f"ok: {P} is named more than once"]),
    ({"ok": [P], "notok": [P]}, [f"notok: {P} is named more than once"]),
    ({"afterok": [P]}, ["unknown condition 'afterok' (known: ok, notok, any)"]),
    ({"ok": ["nope"]}, ["ok: 'nope' is not a valid reference"]),
    ({"ok": {"a": 1}}, ["ok: must be a list"]),
    ([P], ["must be a mapping of condition -> list (ok, notok, any)"]),
])
def test_parse_after(value: object, problems: list[str]) -> None:
    after, found = parse_after(value)
    assert found == problems
    if not problems and value:
        assert after.pairs == ((C.OK, P), (C.ANY, Q))
        assert after.to_json() == {"ok": [P], "any": [Q]}


def test_fan_in_and_depth_limits() -> None:
    many = [f"mvp2-alice-ppo-20251223-143201-{i:04x}" for i in range(MAX_PARENTS + 1)]
    _, problems = parse_after({"ok": many})
    assert problems == [f"names {MAX_PARENTS + 1} parents, over the limit of {MAX_PARENTS}"]
    assert depth_problem([MAX_DEPTH - 1]) is None
    assert depth_problem([MAX_DEPTH]) == (
        f"dependency chain would be {MAX_DEPTH + 1} tasks deep, over the limit of "
        f"{MAX_DEPTH}")


def test_on_unsatisfiable() -> None:
    assert on_unsatisfiable_of(None) == (OnUnsatisfiable.CANCEL, None)
    assert on_unsatisfiable_of("wait") == (OnUnsatisfiable.WAIT, None)
    assert on_unsatisfiable_of("kill") == (OnUnsatisfiable.CANCEL, "must be cancel or wait")
