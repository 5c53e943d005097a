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

Every file is written atomically (temp file in the same directory, fsync, rename), so a
reader never sees half a file. Submission ids and user names are checked before they
become paths. Readers also look in the place attempts used before users existed
(``<shared_root>/jobs/<sid>/``), so those attempts' files stay readable.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from service.domain.layout import (
    EXIT_MARKER,
    STOP_REQUEST_SUFFIX,
    attempt_dir,
    legacy_attempt_dir,
    task_lock,
)

log = logging.getLogger(__name__)

JOBSPEC_FILE = "jobspec.yaml"
SUBMIT_FILE = "submit.json"
LOG_FILE = "driver.log"


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step (same-directory temp file + rename)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Artifacts:
    def __init__(self, shared_root: str | os.PathLike[str]) -> None:
        self.shared_root = Path(shared_root)

    def attempt_dir(self, sid: str, user: str | None) -> Path:
        """The directory of one attempt of ``user``'s task; ValueError for anything but
        an Argus submission id or a user name."""
        return Path(attempt_dir(str(self.shared_root), user, sid))

    def _dir(self, sid: str, user: str | None) -> Path:
        path = self.attempt_dir(sid, user)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _read(self, sid: str, user: str | None, name: str) -> str | None:
        """A file of the attempt: the owner's tree first, then the pre-users place."""
        places = [self.attempt_dir(sid, user), Path(legacy_attempt_dir(str(self.shared_root),
                                                                      sid))]
        for place in dict.fromkeys(places):
            try:
                return (place / name).read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
        return None

    def write_submission(self, sid: str, user: str | None, jobspec_yaml: str,
                         payload: Mapping[str, Any]) -> None:
        """Write ``jobspec.yaml`` and ``submit.json`` for attempt ``sid``."""
        path = self._dir(sid, user)
        write_atomic(path / JOBSPEC_FILE, jobspec_yaml)
        write_atomic(path / SUBMIT_FILE, json.dumps(payload, indent=2, sort_keys=True) + "\n")

    def archive_log(self, sid: str, user: str | None, text: str) -> None:
        write_atomic(self._dir(sid, user) / LOG_FILE, text)

    def read_log(self, sid: str, user: str | None) -> str | None:
        """The archived driver log, or None when there is none."""
        return self._read(sid, user, LOG_FILE)

    def read_exit_code(self, sid: str, user: str | None) -> int | None:
        """The driver's exit code from the entrypoint's marker; None when there is none
        (the driver has not ended, was killed, or its node died) or it is not a number."""
        try:
            text = self._read(sid, user, EXIT_MARKER)
        except OSError:
            return None
        try:
            return None if text is None else int(text.strip())
        except ValueError:
            return None

    def read_submission(self, sid: str, user: str | None) -> dict[str, Any] | None:
        """The recorded ``submit.json`` payload, or None when there is none."""
        text = self._read(sid, user, SUBMIT_FILE)
        return None if text is None else json.loads(text)

    def task_lock(self, task_id: str, user: str | None) -> Path:
        """The task's driver lock file (it may not exist)."""
        return Path(task_lock(str(self.shared_root), user, task_id))

    def task_lock_held(self, task_id: str, user: str | None) -> bool:
        """Whether a driver of the task (or a process it forked) still holds the task's
        lock. False when there is no lock file (attempts from before the lock) or the
        storage cannot tell (no locks there: logged), so the answer never holds a task
        up on a guess. Tried with a non-blocking exclusive lock, released at once; the
        file is opened for writing because NFS emulates flock with write locks."""
        path = self.task_lock(task_id, user)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("cannot open the task lock %s: %s", path, exc)
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return True
            log.warning("cannot test the task lock %s: %s", path, exc)
            return False
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def lock_holder(self, task_id: str, user: str | None) -> str | None:
        """The lock file's last line: the attempt that took it, its host, pid and since
        when (written by the entrypoint); None when there is none."""
        try:
            lines = self.task_lock(task_id, user).read_text(errors="replace").splitlines()
        except OSError:
            return None
        return lines[-1].strip()[:200] if lines and lines[-1].strip() else None

    def request_driver_stop(self, task_id: str, user: str | None, why: str) -> None:
        """Ask the watcher of the driver that holds the task's lock to stop it (idempotent;
        the next attempt's entrypoint removes the request once it holds the lock)."""
        lock = self.task_lock(task_id, user)
        path = lock.parent / f"{lock.name}{STOP_REQUEST_SUFFIX}"
        if not path.exists():
            write_atomic(path, why + "\n")
