"""A consistent copy of a live SQLite database (``argus-api db backup``).

SQLite's online backup API copies the database in one step: one read transaction, so the
copy is the database as of one commit, while the service goes on writing (in WAL mode a
reader never blocks the writer; a copy made page batch by page batch would start over at
every commit of another connection, and under load might never finish). The copy is
written beside the destination under a temporary name, switched to a rollback journal (a
backup is one self-contained file: no ``-wal`` beside it to forget), checked
(``PRAGMA integrity_check``, a schema version this code knows), synced, and only then
linked to the destination, which must not exist: a backup never overwrites a file, and a
failed one leaves nothing at the destination.

Restoring is copying a backup into place while the service is stopped
(docs/operations.md, "Backups").
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from service.store.db import migration_files, schema_version

# the tables whose row counts a backup reports (the installation's contents)
MAIN_TABLES = ("users", "tokens", "tasks", "attempts", "events", "pipelines", "webhooks",
               "idempotency_keys")


class BackupError(Exception):
    """The backup was not made (nothing is left at the destination); the message says
    why."""


@dataclass(frozen=True)
class BackupReport:
    source: str
    path: str
    size_bytes: int
    schema_version: int
    rows: dict[str, int]
    seconds: float

    def lines(self) -> list[str]:
        """What ``argus-api db backup`` prints."""
        counts = ", ".join(f"{name} {n}" for name, n in self.rows.items())
        return [f"backup written: {self.path} ({self.size_bytes} bytes, "
                f"{self.size_bytes / 2**20:.1f} MiB) in {self.seconds:.2f}s",
                f"  from {self.source}",
                f"  schema version {self.schema_version}, integrity_check ok",
                f"  rows: {counts}"]


def backup(source: str, dest: str) -> BackupReport:
    """Copy the database at ``source`` (it must exist: never created here) to ``dest``
    (it must not exist), check the copy, and report what was written. ``BackupError``
    when any of that fails."""
    started = time.monotonic()
    target = Path(dest)
    if target.exists() or target.is_symlink():
        raise BackupError(f"{dest} exists: a backup never overwrites a file; choose a new "
                          "path or remove it first")
    if not target.parent.is_dir():
        raise BackupError(f"{target.parent} is not a directory")
    if not Path(source).is_file():
        raise BackupError(f"no database at {source}")
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        _copy(source, partial)
        version, rows = _check(partial)
        _sync(partial)
        try:
            os.link(partial, target)  # fails if the destination appeared meanwhile
        except FileExistsError as exc:
            raise BackupError(f"{dest} exists: a backup never overwrites a file") from exc
        except OSError as exc:
            raise BackupError(f"cannot write {dest}: {exc.strerror}") from exc
    finally:
        for leftover in (partial, *(Path(f"{partial}-{s}") for s in ("journal", "wal", "shm"))):
            leftover.unlink(missing_ok=True)
    _sync_dir(target.parent)
    return BackupReport(source, str(target), target.stat().st_size, version, rows,
                        time.monotonic() - started)


def _copy(source: str, partial: Path) -> None:
    """The online backup, in one step, then the copy made a single-file database."""
    try:
        src = sqlite3.connect(_uri(Path(source), "rw"), uri=True, timeout=10.0)
    except sqlite3.Error as exc:
        raise BackupError(f"cannot open {source}: {exc}") from exc
    try:
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst)  # pages=-1: every page in one step, one read transaction
            dst.execute("PRAGMA journal_mode = DELETE").fetchall()
        finally:
            dst.close()
    except sqlite3.Error as exc:
        raise BackupError(f"the backup of {source} failed: {exc}") from exc
    finally:
        src.close()


def _check(path: Path) -> tuple[int, dict[str, int]]:
    """The copy's schema version and row counts, once it passes ``integrity_check`` and
    its schema is one this code knows."""
    conn = sqlite3.connect(_uri(path, "ro"), uri=True)
    conn.row_factory = sqlite3.Row
    try:
        problems = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            raise BackupError("the copy failed its integrity check: "
                              + "; ".join(problems[:5]))
        version = schema_version(conn)
        latest = len(migration_files())
        if not 1 <= version <= latest:
            raise BackupError(f"the copy's schema version is {version}; this code knows "
                              f"1..{latest}: not an Argus database of this version")
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = {name: int(conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0])
                for name in MAIN_TABLES if name in tables}
    except sqlite3.Error as exc:
        raise BackupError(f"the copy cannot be read: {exc}") from exc
    finally:
        conn.close()
    return version, rows


def _uri(path: Path, mode: str) -> str:
    """An SQLite URI of ``path`` (any character of the name escaped) in ``mode``: ``rw``
    never creates a missing file, ``ro`` never writes."""
    return f"{path.absolute().as_uri()}?mode={mode}"


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: Path) -> None:
    """The new directory entry on disk too (best effort: some file systems refuse)."""
    with suppress(OSError):
        _sync(path)
