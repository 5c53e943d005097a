"""Where a task's files live on shared storage; one function per place, no I/O.

Every user has a tree of their own, ``<shared_root>/users/<user>/``:

* ``attempt_dir``: ``users/<user>/jobs/<ray_submission_id>/``, per attempt: the JobSpec
  as received, what was sent to Ray, the archived driver log, verl's Hydra run dir, and
  the exit marker the entrypoint writes when the driver ends (``EXIT_MARKER``);
* ``checkpoint_dir``: ``users/<user>/checkpoints/<task_id>``, per task, not per attempt,
  so a retried attempt resumes with ``resume_mode=auto``;
* ``task_lock``: ``users/<user>/locks/<task_id>.lock``, per task: the entrypoint holds it
  while the task's driver lives (``service.jobspec.submission``), so two attempts of one
  task never run at once, even when Ray lost an attempt whose driver still runs.

Before users existed every attempt lived in ``<shared_root>/jobs/<sid>/`` and every
checkpoint in ``<shared_root>/checkpoints/<task_id>``. Those stay where they are, but an
owned task never reads there (anyone could write it: docs/security.md, the upgrade
note); ``legacy_attempt_dir`` is a task's own place only when it has no owner, and a
task whose id carries no user (created before users) keeps its checkpoint dir (and its lock, in
``<shared_root>/locks/``), so its next attempt still resumes from it.
"""

from __future__ import annotations

import posixpath

from service.domain.ids import parse_submission_id, task_id_user
from service.domain.users import is_user_name

USERS_DIR = "users"
# Written by the entrypoint's shell when the driver exits: its exit code. The driver's own
# evidence when Ray lost the final status in a head failover (``service.policy.failures``).
EXIT_MARKER = "exit_code"
LOCKS_DIR = "locks"
# The entrypoint's exit code (EX_TEMPFAIL) and its line in the log when an earlier driver
# of the task still holds the task's lock: this attempt's driver was not started.
LOCK_BUSY_EXIT = 75
LOCK_BUSY_LINE = "argus: not started: an earlier driver of this task still runs"
# ``<task lock><STOP_REQUEST_SUFFIX>``: the service asks the driver's watcher to stop it.
STOP_REQUEST_SUFFIX = ".stop"


def users_root(shared_root: str) -> str:
    """``<shared_root>/users``: every user's tree is under it."""
    return posixpath.join(shared_root, USERS_DIR)


def user_root(shared_root: str, user: str) -> str:
    """``<shared_root>/users/<user>``; ValueError for anything but a user name."""
    if not is_user_name(user):
        raise ValueError(f"not a user name: {user!r}")
    return posixpath.join(users_root(shared_root), user)


def attempt_dir(shared_root: str, user: str | None, sid: str) -> str:
    """ValueError for anything but an Argus submission id (``[a-z0-9_-]`` only) or a
    user name, so no path can escape the user's tree. A task without an owner (only
    before start-up assigns one) uses the legacy place."""
    parse_submission_id(sid)
    if user is None:
        return legacy_attempt_dir(shared_root, sid)
    return posixpath.join(user_root(shared_root, user), "jobs", sid)


def legacy_attempt_dir(shared_root: str, sid: str) -> str:
    """Where attempts made before users existed keep their files."""
    parse_submission_id(sid)
    return posixpath.join(shared_root, "jobs", sid)


def checkpoint_dir(shared_root: str, user: str | None, task_id: str) -> str:
    """ValueError for anything but a task id or a user name."""
    if task_id_user(task_id) is None or user is None:
        return posixpath.join(shared_root, "checkpoints", task_id)
    return posixpath.join(user_root(shared_root, user), "checkpoints", task_id)


def task_lock(shared_root: str, user: str | None, task_id: str) -> str:
    """The task's driver lock, beside its checkpoint dir's tree; ValueError for anything
    but a task id or a user name."""
    checkpoints = posixpath.dirname(checkpoint_dir(shared_root, user, task_id))
    return posixpath.join(posixpath.dirname(checkpoints), LOCKS_DIR, f"{task_id}.lock")
