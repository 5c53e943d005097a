"""Task ids and Ray submission ids.

``task_id`` is ``<prefix>-<user>-<workload>-<YYYYMMDD>-<HHMMSS>-<4 hex>`` in UTC,
readable and sortable by creation time; the 4 random hex digits tell apart tasks created
in the same second, and ``exists`` (the store's lookup) turns a rare clash into a retry.
Tasks created before users existed have ids without the user part
(``<prefix>-<workload>-...``); those stay valid everywhere. Parsing is unambiguous
although a user name may hold ``-``: neither the prefix nor the workload has one, and
the last four parts are always workload, date, time and suffix, so the user is whatever
lies between the prefix and them. Who owns a task is the store's record, never read off
its id.

``ray_submission_id`` is ``<task_id>--a<NN>`` and is deterministic on purpose: after a
crash between "submit" and "record", the scheduler recomputes it and asks Ray whether
that attempt exists instead of submitting it twice.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime

from service.domain.users import is_user_name

_NAME_RE = re.compile(r"[a-z0-9]+")
_PREFIX_RE = re.compile(r"[a-z0-9]{1,32}")
_TAIL_RE = re.compile(r"[a-z0-9]{1,32}-[0-9]{8}-[0-9]{6}-[0-9a-f]{4}")
_SUBMISSION_ID_RE = re.compile(r"(?P<task_id>.+)--a(?P<attempt>[0-9]{2,})")

MAX_PREFIX_LEN = 32
# prefix, user and workload at most 32 characters each, then the stamp and the suffix
MAX_TASK_ID_LEN = 3 * 32 + 3 + 8 + 1 + 6 + 1 + 4
# 65536 suffixes per second: a clash is rare, a run of 64 clashes means something is wrong
# with ``exists`` or the random source, and retrying forever would hide that.
MAX_TRIES = 64


class TaskIdExhausted(RuntimeError):
    """No free task id was found within ``MAX_TRIES`` random suffixes."""


def _random_suffix() -> str:
    return secrets.token_hex(2)


def new_task_id(
    prefix: str,
    workload: str,
    now: float,
    exists: Callable[[str], bool],
    *,
    user: str | None = None,
    suffix: Callable[[], str] = _random_suffix,
) -> str:
    """A fresh task id for a task of ``user`` created at ``now`` (epoch seconds, rendered
    in UTC); without a user, the id has no user part.

    ``exists`` says whether an id is taken; a taken id is retried with a new suffix.
    ``suffix`` yields 4 lowercase hex digits (injectable so tests can force clashes).
    """
    if not isinstance(prefix, str) or not _NAME_RE.fullmatch(prefix):
        raise ValueError(f"task id prefix must match [a-z0-9]+, got {prefix!r}")
    if len(prefix) > MAX_PREFIX_LEN:
        raise ValueError(f"task id prefix must be at most {MAX_PREFIX_LEN} characters")
    if not isinstance(workload, str) or not _NAME_RE.fullmatch(workload):
        raise ValueError(f"workload must match [a-z0-9]+, got {workload!r}")
    if user is not None and not is_user_name(user):
        raise ValueError(f"not a user name: {user!r}")
    stamp = datetime.fromtimestamp(now, tz=UTC).strftime("%Y%m%d-%H%M%S")
    head = prefix if user is None else f"{prefix}-{user}"
    for _ in range(MAX_TRIES):
        candidate = f"{head}-{workload}-{stamp}-{suffix()}"
        if not is_task_id(candidate):
            raise ValueError(f"suffix source gave a malformed task id {candidate!r}")
        if not exists(candidate):
            return candidate
    raise TaskIdExhausted(
        f"no free task id for {head}-{workload}-{stamp} after {MAX_TRIES} tries"
    )


def _split(text: object) -> tuple[str, str | None] | None:
    """``(prefix, user or None)`` of a task id, or None when ``text`` is not one."""
    if not isinstance(text, str) or len(text) > MAX_TASK_ID_LEN:
        return None
    parts = text.split("-")
    if len(parts) < 5:
        return None
    prefix, middle, tail = parts[0], parts[1:-4], "-".join(parts[-4:])
    if not _PREFIX_RE.fullmatch(prefix) or not _TAIL_RE.fullmatch(tail):
        return None
    if not middle:
        return prefix, None  # an id from before users
    user = "-".join(middle)
    return (prefix, user) if is_user_name(user) else None


def is_task_id(text: str) -> bool:
    """Whether ``text`` has the shape of a task id (with or without a user part)."""
    return _split(text) is not None


def task_id_user(task_id: str) -> str | None:
    """The user named in a task id; None for an id from before users.

    ValueError for anything that is not a task id."""
    split = _split(task_id)
    if split is None:
        raise ValueError(f"not a task id: {task_id!r}")
    return split[1]


def submission_id(task_id: str, attempt_no: int) -> str:
    """Ray submission id of attempt ``attempt_no`` (1-based): ``<task_id>--a01``."""
    if not is_task_id(task_id):
        raise ValueError(f"not a task id: {task_id!r}")
    if isinstance(attempt_no, bool) or not isinstance(attempt_no, int) or attempt_no < 1:
        raise ValueError(f"attempt number must be an integer >= 1, got {attempt_no!r}")
    return f"{task_id}--a{attempt_no:02d}"


def parse_submission_id(sid: str) -> tuple[str, int]:
    """``(task_id, attempt_no)`` back from a submission id made by ``submission_id``.

    Raises ValueError for anything else (e.g. a Ray job not submitted by Argus), including
    non-canonical spellings such as ``--a1`` or ``--a001``.
    """
    match = _SUBMISSION_ID_RE.fullmatch(sid) if isinstance(sid, str) else None
    if match is None or not is_task_id(match["task_id"]):
        raise ValueError(f"not an Argus submission id: {sid!r}")
    task_id, attempt_no = match["task_id"], int(match["attempt"])
    if attempt_no < 1 or submission_id(task_id, attempt_no) != sid:
        raise ValueError(f"not an Argus submission id: {sid!r}")
    return task_id, attempt_no
