"""Task ids and Ray submission ids: format, UTC, retry on collision, round trip."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from service.domain.ids import (
    MAX_TRIES,
    TaskIdExhausted,
    is_task_id,
    new_task_id,
    parse_submission_id,
    submission_id,
    task_id_user,
)

NOW = datetime(2025, 12, 23, 14, 32, 1, tzinfo=UTC).timestamp()
TASK_ID = "mvp2-ppo-20251223-143201-7f3a"


def _suffixes(*values: str):
    it: Iterator[str] = iter(values)
    return lambda: next(it)


def test_format_is_prefix_workload_utc_stamp_and_hex() -> None:
    tid = new_task_id("mvp2", "ppo", NOW, lambda _: False, suffix=_suffixes("7f3a"))
    assert tid == TASK_ID


def test_stamp_is_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        tid = new_task_id("mvp2", "sft", NOW, lambda _: False, suffix=_suffixes("0000"))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert tid == "mvp2-sft-20251223-143201-0000"


def test_default_suffix_is_four_lowercase_hex() -> None:
    tid = new_task_id("alice", "grpo", NOW, lambda _: False)
    assert re.fullmatch(r"alice-grpo-20251223-143201-[0-9a-f]{4}", tid)
    assert is_task_id(tid)


def test_collision_retries_with_a_new_suffix() -> None:
    taken = {"mvp2-ppo-20251223-143201-aaaa", "mvp2-ppo-20251223-143201-bbbb"}
    asked: list[str] = []

    def exists(candidate: str) -> bool:
        asked.append(candidate)
        return candidate in taken

    tid = new_task_id("mvp2", "ppo", NOW, exists, suffix=_suffixes("aaaa", "bbbb", "cccc"))
    assert tid == "mvp2-ppo-20251223-143201-cccc"
    assert asked == [
        "mvp2-ppo-20251223-143201-aaaa",
        "mvp2-ppo-20251223-143201-bbbb",
        "mvp2-ppo-20251223-143201-cccc",
    ]


def test_many_ids_in_one_second_are_unique() -> None:
    # 600 ids among 65536 suffixes: random clashes are near certain, the retry resolves them.
    seen: set[str] = set()
    for _ in range(600):
        tid = new_task_id("mvp2", "ppo", NOW, seen.__contains__)
        assert tid not in seen
        seen.add(tid)
    assert len(seen) == 600


def test_gives_up_after_max_tries() -> None:
    calls: list[str] = []

    def exists(candidate: str) -> bool:
        calls.append(candidate)
        return True

    with pytest.raises(TaskIdExhausted, match="mvp2-ppo-20251223-143201"):
        new_task_id("mvp2", "ppo", NOW, exists)
    assert len(calls) == MAX_TRIES


@pytest.mark.parametrize("prefix", ["", "MVP2", "a-b", "a_b", "a b", "x" * 33, None, 7])
def test_bad_prefix_is_refused(prefix: object) -> None:
    with pytest.raises(ValueError, match="prefix"):
        new_task_id(prefix, "ppo", NOW, lambda _: False)  # type: ignore[arg-type]


@pytest.mark.parametrize("workload", ["", "PPO", "p-o", None])
def test_bad_workload_is_refused(workload: object) -> None:
    with pytest.raises(ValueError, match="workload"):
        new_task_id("mvp2", workload, NOW, lambda _: False)  # type: ignore[arg-type]


def test_malformed_suffix_source_is_refused() -> None:
    with pytest.raises(ValueError, match="malformed task id"):
        new_task_id("mvp2", "ppo", NOW, lambda _: False, suffix=_suffixes("XYZ"))


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, "--a01"), (2, "--a02"), (10, "--a10"), (99, "--a99"), (100, "--a100")],
)
def test_submission_id_format(attempt: int, expected: str) -> None:
    assert submission_id(TASK_ID, attempt) == TASK_ID + expected


@pytest.mark.parametrize("attempt", [0, -1, True, "1", 1.0])
def test_submission_id_refuses_bad_attempt(attempt: object) -> None:
    with pytest.raises(ValueError, match="attempt number"):
        submission_id(TASK_ID, attempt)  # type: ignore[arg-type]


def test_submission_id_refuses_a_non_task_id() -> None:
    with pytest.raises(ValueError, match="not a task id"):
        submission_id("rm -rf", 1)


@pytest.mark.parametrize("attempt", [*range(1, 13), 99, 100, 101, 1234])
def test_submission_id_round_trip(attempt: int) -> None:
    assert parse_submission_id(submission_id(TASK_ID, attempt)) == (TASK_ID, attempt)


@pytest.mark.parametrize(
    "sid",
    [
        TASK_ID,
        TASK_ID + "--a1",
        TASK_ID + "--a001",
        TASK_ID + "--a00",
        TASK_ID + "--b01",
        TASK_ID + "--a01x",
        "--a01",
        "something--a01",
        "raysubmit_4pXyJmPzXh1rBnG7",
        "MVP2-ppo-20251223-143201-7f3a--a01",
        "mvp2-ppo-20251223-143201-7F3A--a01",
    ],
)
def test_parse_submission_id_refuses_foreign_ids(sid: str) -> None:
    with pytest.raises(ValueError, match="not an Argus submission id"):
        parse_submission_id(sid)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (TASK_ID, True),
        ("alice-sft-20260101-000000-ffff", True),
        (TASK_ID + "--a01", False),
        ("mvp2-ppo-2025122-143201-7f3a", False),
        ("mvp2-ppo-20251223-143201-7f3", False),
        ("", False),
    ],
)
def test_is_task_id(text: str, expected: bool) -> None:
    assert is_task_id(text) is expected


# -- ids with a user ------------------------------------------------------------------------


def test_format_with_a_user() -> None:
    tid = new_task_id("mvp2", "ppo", NOW, lambda _: False, user="alice",
                      suffix=_suffixes("7f3a"))
    assert tid == "mvp2-alice-ppo-20251223-143201-7f3a"
    assert is_task_id(tid) and task_id_user(tid) == "alice"
    assert parse_submission_id(submission_id(tid, 3)) == (tid, 3)


@pytest.mark.parametrize("user", ["bob-2", "ci_nightly", "a", "x-y-z", "ppo",
                                  "a-20251223-143201-7f3a"])
def test_user_names_with_dashes_parse_back(user: str) -> None:
    tid = new_task_id("mvp2", "sft", NOW, lambda _: False, user=user, suffix=_suffixes("00ff"))
    assert tid == f"mvp2-{user}-sft-20251223-143201-00ff"
    assert task_id_user(tid) == user
    for attempt in (1, 12, 100):
        assert parse_submission_id(submission_id(tid, attempt)) == (tid, attempt)


def test_ids_from_before_users_stay_valid() -> None:
    assert is_task_id(TASK_ID) and task_id_user(TASK_ID) is None
    assert parse_submission_id(TASK_ID + "--a02") == (TASK_ID, 2)


@pytest.mark.parametrize("user", ["Alice", "bo--b", "bob-", "all", "", "a/b", "x" * 33])
def test_no_id_for_a_bad_user_name(user: str) -> None:
    with pytest.raises(ValueError, match="user name"):
        new_task_id("mvp2", "ppo", NOW, lambda _: False, user=user)


@pytest.mark.parametrize("text", [
    "mvp2--ppo-20251223-143201-7f3a",  # empty user part
    "mvp2-bo--b-ppo-20251223-143201-7f3a",  # "--" cannot be in a name
    "mvp2-bob--ppo-20251223-143201-7f3a",
    "mvp2-Bob-ppo-20251223-143201-7f3a",
    "mvp2-all-ppo-20251223-143201-7f3a",
    "mvp2-" + "x" * 33 + "-ppo-20251223-143201-7f3a",
    "mvp2-alice-ppo-20251223-143201-7f3a" + "-x" * 60,
    "-alice-ppo-20251223-143201-7f3a",
])
def test_malformed_ids_with_a_user_part(text: str) -> None:
    assert not is_task_id(text)
    with pytest.raises(ValueError, match="not a task id"):
        task_id_user(text)


def test_is_task_id_is_cheap_on_long_input() -> None:
    started = time.perf_counter()
    for _ in range(100):
        assert not is_task_id("a-" * 5000 + "ppo-20251223-143201-7f3a")
    assert time.perf_counter() - started < 0.5
