"""verl's checkpoint layout under a task's checkpoint dir (``trainer.default_local_dir``).

verl 0.9.1 (``verl.utils.checkpoint.checkpoint_manager.find_latest_ckpt_path``) keeps one
``global_step_<k>/`` directory per save and ``latest_checkpointed_iteration.txt`` holding
``<k>`` of the newest complete one (written after the step directory). A run resumes from
``global_step_<k>`` only when the tracker parses as an integer and that directory exists;
the stand-in (``examples/standin-verl``) writes the same layout. A pipeline stage's
``latest_checkpoint`` output is read here, with the same rule.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"
STEP_PREFIX = "global_step_"
MAX_TRACKER_BYTES = 64


class NoCheckpoint(LookupError):
    """No complete checkpoint under a checkpoint dir; the message says why."""


def latest_checkpoint(root: str) -> str:
    """``<root>/global_step_<k>`` of the newest complete save; NoCheckpoint otherwise."""
    tracker = Path(root) / TRACKER
    try:
        with tracker.open("rb") as fh:
            raw = fh.read(MAX_TRACKER_BYTES).decode("utf-8").strip()
    except FileNotFoundError:
        raise NoCheckpoint(f"no checkpoint under {root} (no {TRACKER})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise NoCheckpoint(f"cannot read {tracker}: {exc}") from None
    if not raw.isdigit():
        raise NoCheckpoint(f"{tracker} holds {raw[:40]!r}, not a step number")
    step_dir = posixpath.join(root, f"{STEP_PREFIX}{int(raw)}")
    if not Path(step_dir).is_dir():
        raise NoCheckpoint(f"{tracker} names {step_dir}, which does not exist")
    return step_dir
