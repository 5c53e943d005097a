"""Per-attempt files on shared storage: ``<jobs_dir>/<ray_submission_id>/``.

* ``jobspec.yaml``: the JobSpec exactly as the user sent it;
* ``submit.json``: what was sent to Ray (entrypoint, argv, runtime_env, resources,
  metadata, submission id);
* ``driver.log``: the driver log, archived when the attempt ends (Ray's own copy dies
  with the head).

Every file is written atomically (temp file in the same directory, fsync, rename), so a
reader never sees half a file. Submission ids are checked before they become paths.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from service.layout import attempt_dir

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
    def __init__(self, jobs_dir: Path) -> None:
        self.jobs_dir = Path(jobs_dir)

    def attempt_dir(self, sid: str) -> Path:
        """The directory of one attempt; ValueError for anything but an Argus id."""
        return Path(attempt_dir(str(self.jobs_dir), sid))

    def _dir(self, sid: str) -> Path:
        path = self.attempt_dir(sid)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_submission(self, sid: str, jobspec_yaml: str, payload: Mapping[str, Any]
                         ) -> None:
        """Write ``jobspec.yaml`` and ``submit.json`` for attempt ``sid``."""
        path = self._dir(sid)
        write_atomic(path / JOBSPEC_FILE, jobspec_yaml)
        write_atomic(path / SUBMIT_FILE, json.dumps(payload, indent=2, sort_keys=True) + "\n")

    def archive_log(self, sid: str, text: str) -> None:
        write_atomic(self._dir(sid) / LOG_FILE, text)

    def read_log(self, sid: str) -> str | None:
        """The archived driver log, or None when there is none."""
        try:
            return (self.attempt_dir(sid) / LOG_FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def read_submission(self, sid: str) -> dict[str, Any] | None:
        """The recorded ``submit.json`` payload, or None when there is none."""
        try:
            text = (self.attempt_dir(sid) / SUBMIT_FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return json.loads(text)
