"""The head's GCS store on disk: Ray's embedded RocksDB store (``RAY_gcs_storage=rocksdb``),
the lock that keeps two heads from opening one store, and the wipe that starts a new
cluster.

With the store, a restarted GCS (a SIGKILL, the head watchdog's restart, a container
restart or a new image on the same volume) reloads the cluster's tables: the same cluster
id, its nodes, actors, placement groups and jobs. Worker raylets and everything they run
wait for it and resubscribe; nothing is lost. A second head opening the same store would
corrupt it, so a head watchdog holds an exclusive ``flock`` on ``<store dir>.lock`` for as
long as it runs (released by the kernel when it dies; the lock file names the holder).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import socket
import time
from typing import IO

from raypool.config import NodeSettings


class StoreLocked(RuntimeError):
    """Another process holds the store's lock."""


def ray_store_env(settings: NodeSettings) -> dict[str, str]:
    """The Ray variables that put the head's GCS on the embedded store (none for memory)."""
    if settings.gcs_store != "rocksdb":
        return {}
    return {"RAY_gcs_storage": "rocksdb", "RAY_gcs_storage_path": settings.gcs_store_dir}


def _holder(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(200).strip() or "unknown holder"
    except OSError:
        return "unknown holder"


class StoreLock:
    """An exclusive, non-blocking lock on one store; :meth:`acquire` again is a no-op."""

    def __init__(self, path: str):
        self.path = path
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> None:
        """Take the lock or raise :class:`StoreLocked` naming who holds it."""
        if self._file is not None:
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        f = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held while locked
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            f.close()
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreLocked(f"GCS store lock {self.path} is held by "
                                  f"{_holder(self.path)}") from None
            raise
        f.seek(0)
        f.truncate()
        f.write(f"host={socket.gethostname()} pid={os.getpid()} since={time.time():.0f}\n")
        f.flush()
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the flock
            self._file = None


def wipe(settings: NodeSettings) -> str:
    """Remove the store so the next head starts a new cluster; refused while a head holds
    the lock. Returns what was done, for the operator."""
    lock = StoreLock(settings.gcs_store_lock)
    lock.acquire()
    try:
        if not os.path.exists(settings.gcs_store_dir):
            return f"no GCS store at {settings.gcs_store_dir}"
        shutil.rmtree(settings.gcs_store_dir)
        return f"removed GCS store {settings.gcs_store_dir}: the next head starts a new cluster"
    finally:
        lock.release()
