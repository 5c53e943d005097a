"""verl's checkpoint layout under a task's checkpoint dir (``trainer.default_local_dir``).

verl 0.9.1 (``verl.utils.checkpoint.checkpoint_manager.find_latest_ckpt_path``) keeps one
``global_step_<k>/`` directory per save and ``latest_checkpointed_iteration.txt`` holding
``<k>`` of the newest complete one (written after the step directory). A run resumes from
``global_step_<k>`` only when the tracker parses as an integer and that directory exists;
the stand-in (``examples/standin-verl``) writes the same layout. A pipeline stage's
``latest_checkpoint`` output is read here, with the same rule.

The checkpoint dir is in the owner's tree, which the owner's job writes: the tracker is
read through ``service.cluster.sharedfs`` (no link followed, a regular file, 64 bytes at
most) and a message names the file, never what it holds.
"""

from __future__ import annotations

import posixpath

from service.cluster.sharedfs import SharedTree

TRACKER = "latest_checkpointed_iteration.txt"
STEP_PREFIX = "global_step_"
MAX_TRACKER_BYTES = 64
MAX_STEP_DIGITS = 18


class NoCheckpoint(LookupError):
    """No complete checkpoint under a checkpoint dir; the message says why (never with a
    byte of the files it read)."""


def latest_checkpoint(tree: SharedTree, root: str) -> str:
    """``<root>/global_step_<k>`` of the newest complete save; NoCheckpoint otherwise."""
    tracker = posixpath.join(root, TRACKER)
    try:
        got = tree.read(tracker, MAX_TRACKER_BYTES)
    except FileNotFoundError:
        raise NoCheckpoint(f"no checkpoint under {root} (no {TRACKER})") from None
    except OSError as exc:
        raise NoCheckpoint(f"cannot read {tracker}: {exc.strerror}") from None
    raw = got.data.strip()
    if got.truncated or not raw.isdigit() or len(raw) > MAX_STEP_DIGITS:
        raise NoCheckpoint(f"{tracker} is not a valid checkpoint tracker (it must hold a "
                           f"step number)")
    step_dir = posixpath.join(root, f"{STEP_PREFIX}{int(raw)}")
    if not tree.is_dir(step_dir):
        raise NoCheckpoint(f"{tracker} names {step_dir}, which is not a directory")
    return step_dir
