"""Task dependencies: what ``after`` means, as pure functions (no I/O).

A task may wait on other tasks (its parents) with Slurm's conditions:

* ``ok`` (afterok): the parent ended SUCCEEDED;
* ``notok`` (afternotok): the parent ended FAILED or CANCELED;
* ``any`` (afterany): the parent ended, whatever its outcome.

Only a parent's *final* state decides: a parent re-queued for a retry, preempted, waiting
or running has not ended, so nothing is decided yet. A dependent waits (state BLOCKED)
until every condition holds; as soon as one can never hold (the parent of an ``ok``
failed, the parent of a ``notok`` succeeded), ``on_unsatisfiable`` says what happens:
``cancel`` (the default) ends the dependent CANCELED naming that parent; ``wait`` keeps it
BLOCKED (Slurm's default, ``DependencyNeverSatisfied``) until a person cancels it.

Limits (a 400 past them): at most ``MAX_PARENTS`` parents per task, and a dependency
chain at most ``MAX_DEPTH`` tasks deep. Parents must exist and be visible to the
submitter (their own tasks; an admin sees all); a task cannot name itself, and since a
parent always exists before its dependent, plain tasks cannot form a cycle (a pipeline's
stages are checked for cycles by ``service.policy.pipelines``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from service.domain.ids import is_task_id
from service.domain.states import TaskState

MAX_PARENTS = 32
MAX_DEPTH = 32


class Condition(StrEnum):
    OK = "ok"
    NOTOK = "notok"
    ANY = "any"


class OnUnsatisfiable(StrEnum):
    CANCEL = "cancel"
    WAIT = "wait"


class Verdict(StrEnum):
    WAIT = "wait"  # some parent has not ended
    RELEASE = "release"  # every condition holds: the dependent may be queued
    UNSATISFIABLE = "unsatisfiable"  # a condition can never hold


@dataclass(frozen=True)
class Dep:
    """One dependency of a task as the store sees it now."""

    parent_id: str
    condition: Condition
    parent_state: TaskState


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    # the dependency that can never hold (UNSATISFIABLE) or the first one not decided
    # yet (WAIT); None for RELEASE
    dep: Dep | None = None


def holds(condition: Condition, parent_state: TaskState) -> bool | None:
    """Whether ``condition`` holds for a parent in ``parent_state``; None while the parent
    has not ended (a retry or a preemption puts it back to waiting: still undecided)."""
    if not parent_state.is_terminal():
        return None
    if condition is Condition.OK:
        return parent_state is TaskState.SUCCEEDED
    if condition is Condition.NOTOK:
        return parent_state is not TaskState.SUCCEEDED
    return True


def decide(deps: Sequence[Dep]) -> Decision:
    """What to do with a BLOCKED task now: an unsatisfiable condition wins over waiting (a
    dependent that can never run is told at once, not when its last parent ends)."""
    waiting: Dep | None = None
    for dep in deps:
        result = holds(dep.condition, dep.parent_state)
        if result is False:
            return Decision(Verdict.UNSATISFIABLE, dep)
        if result is None and waiting is None:
            waiting = dep
    if waiting is not None:
        return Decision(Verdict.WAIT, waiting)
    return Decision(Verdict.RELEASE)


def wait_reason(deps: Sequence[Dep], on_unsatisfiable: OnUnsatisfiable) -> str | None:
    """Why a BLOCKED task waits, for people: ``after <id> (RUNNING)``, every parent not
    ended listed; a condition that can never hold (kept waiting by ``wait``) says so.
    None when nothing holds it back any more (it is released on the next tick)."""
    decision = decide(deps)
    if decision.verdict is Verdict.UNSATISFIABLE and decision.dep is not None:
        dep = decision.dep
        tail = ("waits until canceled" if on_unsatisfiable is OnUnsatisfiable.WAIT
                else "to be canceled")
        return (f"after {dep.parent_id} ({dep.parent_state}): {dep.condition} can never "
                f"hold; {tail}")
    pending = [d for d in deps if not d.parent_state.is_terminal()]
    if not pending:
        return None
    return "after " + ", ".join(f"{d.parent_id} ({d.parent_state})" for d in pending)


def cancel_reason(dep: Dep) -> str:
    """The error summary of a dependent canceled because ``dep`` can never hold."""
    return (f"dependency never satisfied: {dep.parent_id} ended {dep.parent_state} "
            f"(after {dep.condition})")


@dataclass(frozen=True)
class After:
    """A JobSpec's validated ``after``: ``(condition, parent)`` pairs in document order."""

    pairs: tuple[tuple[Condition, str], ...] = ()

    def to_json(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for cond, parent in self.pairs:
            out.setdefault(cond.value, []).append(parent)
        return out


def in_order(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``(condition, parent)`` pairs in one order (ok, notok, any; each as written), so a
    JobSpec read back from a dict whose keys a JSON or YAML dump sorted equals the one
    parsed."""
    rank = {c.value: i for i, c in enumerate(Condition)}
    return tuple(sorted(pairs, key=lambda pair: rank[pair[0]]))


def parse_after(value: Any, *, is_ref: Any = is_task_id) -> tuple[After, list[str]]:
    """``after`` of a document (``{ok: [...], notok: [...], any: [...]}``, or null) to an
    ``After`` and the problems found (every one; empty when valid). ``is_ref`` says what
    may be named: a task id for a task, a stage name inside a pipeline."""
    if value is None:
        return After(), []
    if not isinstance(value, Mapping):
        return After(), ["must be a mapping of condition -> list (ok, notok, any)"]
    problems: list[str] = []
    pairs: list[tuple[Condition, str]] = []
    seen: set[str] = set()
    for key, items in value.items():
        try:
            cond = Condition(key)
        except ValueError:
            problems.append(f"unknown condition {str(key)[:40]!r} (known: ok, notok, any)")
            continue
        if items is None:
            continue
        if isinstance(items, str):
            items = [items]
        if not isinstance(items, list):
            problems.append(f"{cond}: must be a list")
            continue
        for item in items:
            if not isinstance(item, str) or not is_ref(item):
                problems.append(f"{cond}: {str(item)[:80]!r} is not a valid reference")
            elif item in seen:
                problems.append(f"{cond}: {item} is named more than once")
            else:
                seen.add(item)
                pairs.append((cond, item))
    if len(pairs) > MAX_PARENTS:
        problems.append(f"names {len(pairs)} parents, over the limit of {MAX_PARENTS}")
    return After(tuple(pairs)), problems


def on_unsatisfiable_of(value: Any) -> tuple[OnUnsatisfiable, str | None]:
    """``on_unsatisfiable`` of a document (null: cancel) and a problem, if any."""
    if value is None:
        return OnUnsatisfiable.CANCEL, None
    try:
        return OnUnsatisfiable(value), None
    except ValueError:
        return OnUnsatisfiable.CANCEL, "must be cancel or wait"


def depth_problem(parent_depths: Sequence[int]) -> str | None:
    """A 400's message when a dependent of parents at these depths would be too deep."""
    depth = 1 + max(parent_depths, default=0)
    if depth > MAX_DEPTH:
        return (f"dependency chain would be {depth} tasks deep, over the limit of "
                f"{MAX_DEPTH}")
    return None
