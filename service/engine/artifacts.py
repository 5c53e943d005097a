"""Per-attempt files on shared storage, in the owner's tree:
``<shared_root>/users/<user>/jobs/<ray_submission_id>/`` (``service.domain.layout``).

* ``jobspec.yaml``: the JobSpec exactly as the user sent it;
* ``submit.json``: what was sent to Ray (entrypoint, argv, runtime_env, resources,
  metadata, submission id);
* ``driver.log``: the driver log, archived when the attempt ends (Ray's own copy dies
  with the head).

Per task, beside its lock (``service.jobspec.submission``): ``task_lock_held`` asks
whether a driver of the task still holds it, ``lock_holder`` who took it last, and
``request_driver_stop`` asks that driver's watcher to stop it (``<lock>.stop``).

The owner's job can write anything in that tree, so every file is touched through
``service.cluster.sharedfs`` (no symlink followed, regular files only, reads capped) and
read only from the attempt's own directory in its owner's tree: nothing read here is
another user's, nor outside the shared root. What is read is checked against its form
(an exit code, a lock record) and otherwise taken as absent; no caller quotes it. Every
file is written atomically (temp file in the same directory, fsync, rename), so a reader
never sees half a file. Submission ids and user names are checked before they become
paths.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from service.cluster.sharedfs import SharedTree, UnsafePath
from service.domain.layout import (
    EXIT_MARKER,
    STOP_REQUEST_SUFFIX,
    attempt_dir,
    task_lock,
)

log = logging.getLogger(__name__)

JOBSPEC_FILE = "jobspec.yaml"
SUBMIT_FILE = "submit.json"
LOG_FILE = "driver.log"
# What is read back, at most: an archived log (beyond it, a note says the rest is not
# served), a submission record, an exit marker, the tail of a lock file.
LOG_READ_MAX = 64 << 20
SUBMIT_READ_MAX = 1 << 20
MARKER_READ_MAX = 16
LOCK_TAIL_MAX = 4096
LOG_CUT_NOTE = "\n[argus: the archived log is longer than {} bytes; the rest is not served]\n"
# The entrypoint's exit marker (``echo "$code"``) and lock record (``<sid> on <host> pid
# <pid> since <UTC time>``, ``service.jobspec.submission``): anything else is not one.
_EXIT_CODE_RE = re.compile(r"\A(\d{1,3})\n?\Z")
_LOCK_RECORD_RE = re.compile(
    r"\A[a-z0-9_-]{1,200} on [A-Za-z0-9._-]{1,253} pid \d{1,10} "
    r"since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\Z")


class Artifacts:
    def __init__(self, shared_root: str | os.PathLike[str]) -> None:
        self.shared_root = Path(shared_root)
        self.tree = SharedTree(shared_root)

    def attempt_dir(self, sid: str, user: str | None) -> Path:
        """The directory of one attempt of ``user``'s task; ValueError for anything but
        an Argus submission id or a user name."""
        return Path(attempt_dir(str(self.shared_root), user, sid))

    def _read(self, sid: str, user: str | None, name: str, limit: int
              ) -> tuple[bytes, bool] | None:
        """A file of the attempt's own directory (its bytes, whether it held more), or
        None when there is none or it is not a regular file reached without a link
        (logged, by path only)."""
        path = self.attempt_dir(sid, user) / name
        try:
            got = self.tree.read(path, limit)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("not reading %s: %s", path, exc.strerror)
            return None
        return got.data, got.truncated

    def write_submission(self, sid: str, user: str | None, jobspec_yaml: str,
                         payload: Mapping[str, Any]) -> None:
        """Write ``jobspec.yaml`` and ``submit.json`` for attempt ``sid``."""
        path = self.attempt_dir(sid, user)
        self.tree.write_atomic(path / JOBSPEC_FILE, jobspec_yaml)
        self.tree.write_atomic(path / SUBMIT_FILE,
                               json.dumps(payload, indent=2, sort_keys=True) + "\n")

    def archive_log(self, sid: str, user: str | None, text: str) -> None:
        self.tree.write_atomic(self.attempt_dir(sid, user) / LOG_FILE, text)

    def read_log(self, sid: str, user: str | None) -> str | None:
        """The archived driver log (its first ``LOG_READ_MAX`` bytes, then a note), or
        None when there is none."""
        got = self._read(sid, user, LOG_FILE, LOG_READ_MAX)
        if got is None:
            return None
        data, truncated = got
        text = data.decode("utf-8", "replace")
        return text + LOG_CUT_NOTE.format(LOG_READ_MAX) if truncated else text

    def read_exit_code(self, sid: str, user: str | None) -> int | None:
        """The driver's exit code from the entrypoint's marker in the attempt's own
        directory; None when there is none (the driver has not ended, was killed, or its
        node died) or it is not a valid one (a number 0..255 on one line)."""
        got = self._read(sid, user, EXIT_MARKER, MARKER_READ_MAX)
        match = None if got is None or got[1] else _EXIT_CODE_RE.match(
            got[0].decode("ascii", "replace"))
        code = None if match is None else int(match.group(1))
        return code if code is not None and code <= 255 else None

    def read_submission(self, sid: str, user: str | None) -> dict[str, Any] | None:
        """The recorded ``submit.json`` payload, or None when there is none or it is not
        a valid one."""
        got = self._read(sid, user, SUBMIT_FILE, SUBMIT_READ_MAX)
        if got is None or got[1]:
            return None
        try:
            payload = json.loads(got[0])
        except ValueError:
            return None
        return payload if isinstance(payload, dict) else None

    def task_lock(self, task_id: str, user: str | None) -> Path:
        """The task's driver lock file (it may not exist)."""
        return Path(task_lock(str(self.shared_root), user, task_id))

    def task_lock_held(self, task_id: str, user: str | None) -> bool:
        """Whether a driver of the task (or a process it forked) still holds the task's
        lock. False when there is no lock file (attempts from before the lock), it is not
        a regular file reached without a link, or the storage cannot tell (no locks
        there: logged), so the answer never holds a task up on a guess. Tried with a
        non-blocking exclusive lock, released at once; the file is opened for writing
        because NFS emulates flock with write locks."""
        path = self.task_lock(task_id, user)
        try:
            fd = self.tree.open_lock(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("cannot open the task lock %s: %s", path, exc.strerror)
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return True
            log.warning("cannot test the task lock %s: %s", path, exc.strerror)
            return False
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def lock_holder(self, task_id: str, user: str | None) -> str | None:
        """The lock file's last line, the attempt that took it, its host, pid and since
        when (written by the entrypoint); None when there is none or the line is not such
        a record."""
        try:
            got = self.tree.read(self.task_lock(task_id, user), LOCK_TAIL_MAX, tail=True)
        except OSError:
            return None
        lines = got.data.decode("ascii", "replace").splitlines()
        last = lines[-1].strip() if lines else ""
        return last if _LOCK_RECORD_RE.match(last) else None

    def request_driver_stop(self, task_id: str, user: str | None, why: str) -> None:
        """Ask the watcher of the driver that holds the task's lock to stop it (idempotent;
        the next attempt's entrypoint removes the request once it holds the lock)."""
        lock = self.task_lock(task_id, user)
        try:
            self.tree.create_once(lock.parent / f"{lock.name}{STOP_REQUEST_SUFFIX}",
                                  why + "\n")
        except UnsafePath as exc:
            log.warning("cannot ask the driver of %s to stop: %s", task_id, exc)
