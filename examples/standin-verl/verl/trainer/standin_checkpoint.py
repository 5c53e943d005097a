"""verl 0.9.1's checkpoint layout on disk, for the stand-in (NOT verl).

verl's trainer (``RayPPOTrainer._save_checkpoint`` / ``_load_checkpoint`` and
``verl.utils.checkpoint.checkpoint_manager.find_latest_ckpt_path``) keeps, under
``trainer.default_local_dir``::

    global_step_<k>/                        one directory per saved step
    latest_checkpointed_iteration.txt       "<k>": the newest complete save

The step directory is written first and the tracker last, so a run killed mid-save
still resumes from the previous complete step. verl resumes from ``global_step_<k>``
only when the tracker parses as an integer AND that directory exists; anything else
means "train from scratch". The stand-in writes every file atomically (temp file, fsync,
rename, directory fsync) so a kill at any instant, which is what a preemption is, leaves
either the old tracker or the new one.

Pure file I/O on paths passed in: no Ray, testable on its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACKER = "latest_checkpointed_iteration.txt"
STEP_PREFIX = "global_step_"
STATE_FILE = "standin_state.json"


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"{STEP_PREFIX}{step}"


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: readers see the old content or the new, never part."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            view = memoryview(text.encode("utf-8"))
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)  # else the rename itself may not survive a crash
    finally:
        os.close(dir_fd)


def save(root: str | Path, step: int, state: Mapping[str, Any]) -> Path:
    """Save ``step`` the way verl does: ``global_step_<step>/`` (here holding one small
    state file), then the tracker. Creates directories as needed; returns the step dir."""
    folder = step_dir(root, step)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / STATE_FILE, json.dumps({"global_step": step, **state}) + "\n")
    write_atomic(Path(root) / TRACKER, f"{step}")
    return folder


@dataclass(frozen=True)
class Latest:
    """What the tracker under a checkpoint root says: ``step`` to resume from, or None
    with ``problem`` saying why not (None when there simply is no checkpoint yet)."""

    step: int | None
    problem: str | None = None


def find_latest(root: str | Path) -> Latest:
    """The newest complete checkpoint under ``root``, checked as verl checks it."""
    tracker = Path(root) / TRACKER
    try:
        raw = tracker.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return Latest(None)
    except (OSError, UnicodeDecodeError) as exc:
        return Latest(None, f"cannot read {tracker}: {exc}")
    try:
        step = int(raw)
    except ValueError:
        return Latest(None, f"{tracker} holds {raw[:40]!r}, not a step number")
    if step < 0:
        return Latest(None, f"{tracker} holds a negative step {step}")
    if not step_dir(root, step).is_dir():
        return Latest(None, f"{tracker} names {step_dir(root, step)}, which does not exist")
    return Latest(step)


def step_of(path: str | Path) -> int | None:
    """k from a ``.../global_step_<k>`` directory path (verl's ``resume_path`` mode)."""
    name = Path(path).name
    if not name.startswith(STEP_PREFIX):
        return None
    try:
        step = int(name[len(STEP_PREFIX):])
    except ValueError:
        return None
    return step if step >= 0 else None
