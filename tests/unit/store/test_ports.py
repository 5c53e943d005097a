"""The narrow ports name store calls that exist: every method a port lists, by aggregate,
is on the real ``Store``'s aggregate with the same parameters (nothing type-checks the
Protocols otherwise), and the store's shape stays the documented one."""

from __future__ import annotations

import inspect
from typing import get_type_hints

import pytest

from service.engine.ports import FollowerStore, SchedulerStore
from service.engine.sampling import SampleStore
from service.store.checkpointer import Checkpointed
from service.store.writer import Store
from service.usecases.ports import UseCaseStore
from service.web.metrics import QueueStatsSource, UserStatsSource

AGGREGATES = ("tasks", "attempts", "users", "pipelines", "webhooks", "progress", "console",
              "usage")


@pytest.fixture
def store(store_url: str):
    s = Store(store_url)
    yield s
    s.close()


def _methods(protocol: type) -> dict[str, object]:
    return {name: fn for name, fn in vars(protocol).items()
            if callable(fn) and not name.startswith("_")}


def _same_parameters(declared: object, actual: object) -> bool:
    wanted = [(p.name, p.kind, p.default is p.empty)
              for p in inspect.signature(declared).parameters.values()][1:]  # type: ignore[arg-type]
    have = [(p.name, p.kind, p.default is p.empty)
            for p in inspect.signature(actual).parameters.values()]  # type: ignore[arg-type]
    return wanted == have


def _check(protocol: type, target: object) -> list[str]:
    """What ``target`` lacks of ``protocol`` (its aggregates' ports checked in turn)."""
    problems = []
    for name, member in vars(protocol).items():
        if isinstance(member, property):
            port = get_type_hints(member.fget)["return"]
            if not getattr(port, "_is_protocol", False):  # a plain value (db_path: str)
                problems += [] if hasattr(target, name) else [name]
                continue
            problems += [f"{name}.{p}" for p in _check(port, getattr(target, name))]
    for name, declared in _methods(protocol).items():
        actual = getattr(target, name, None)
        if actual is None or not _same_parameters(declared, actual):
            problems.append(name)
    return problems


@pytest.mark.parametrize("port, part", [
    (SchedulerStore, None), (FollowerStore, None), (UseCaseStore, None),
    (UserStatsSource, None), (Checkpointed, None),
    (SampleStore, "console"), (QueueStatsSource, "console"),
])
def test_each_port_names_calls_the_store_has(store: Store, port: type, part: str | None
                                              ) -> None:
    target = store if part is None else getattr(store, part)
    assert _check(port, target) == []


def test_the_store_is_its_aggregates_around_one_core(store: Store) -> None:
    parts = [getattr(store, name) for name in AGGREGATES]
    assert len({id(p) for p in parts}) == len(AGGREGATES)
    assert all(p._core is store.core and p._reads is store.reads for p in parts)
    # no aggregate reaches another: each is given the core and the readers, nothing else
    assert all(set(vars(p)) <= {"_core", "_reads", "_runnable_rows", "_swept"} for p in parts)
