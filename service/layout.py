"""Where a task's files live on shared storage; one function per place, no I/O.

* ``attempt_dir``: ``<jobs_dir>/<ray_submission_id>/``, per attempt: the JobSpec as
  received, what was sent to Ray, the archived driver log, and verl's Hydra run dir;
* ``checkpoint_dir``: ``<checkpoints_dir>/<task_id>``, per task, not per attempt, so a
  retried attempt resumes with ``resume_mode=auto``.
"""

from __future__ import annotations

import posixpath

from service.ids import parse_submission_id


def attempt_dir(jobs_dir: str, sid: str) -> str:
    """ValueError for anything but an Argus submission id (``[a-z0-9-]`` only), so no
    path can escape ``jobs_dir``."""
    parse_submission_id(sid)
    return posixpath.join(jobs_dir, sid)


def checkpoint_dir(checkpoints_dir: str, task_id: str) -> str:
    return posixpath.join(checkpoints_dir, task_id)
