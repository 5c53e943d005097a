"""Write a file so that every reader, and the file after a crash, holds either the old
content or the new one, never a mix or a truncated file.

The steps: a temp file in the same directory (a rename is atomic only within one file
system), every byte written, the file fsynced (else the rename can reach the disk before
the data: after a power cut the name points at an empty file), rename over the target,
then the directory fsynced (else the rename itself can be lost). On any error the temp
file is removed and the target is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile


def write_atomic(path: str, data: str | bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) atomically and durably.

    The directory must exist. ``mode`` is the new file's permission bits (a temp file is
    created 0600; the umask does not apply).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=directory)
    try:
        try:
            view = memoryview(payload)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_directory(directory)


def fsync_directory(directory: str) -> None:
    """Make a rename or a new name in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
