"""The WAL copied into the database on a thread of its own.

SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1,000 pages:
whichever write that is (a scheduler tick, an API submit) pays for copying them, several
milliseconds of CPU and the fsyncs. While a ``Checkpointer`` runs, the writing
connection's automatic checkpoint is off and this thread runs a passive checkpoint once
every ``every_s`` when something was committed since its last one. A passive checkpoint
never waits for, nor blocks, the writer or the readers (it copies what no reader still
needs; the next one goes on), and the writer starts the WAL over once all of it is
copied, as after an automatic one. ``stop`` turns the automatic checkpoint back on.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import Protocol

from service.store.db import connect

log = logging.getLogger(__name__)


class Checkpointed(Protocol):
    """What the checkpointer needs of the store (``writer.Store``)."""

    @property
    def db_path(self) -> str: ...

    def automatic_checkpoints(self, on: bool) -> None: ...


class Checkpointer:
    def __init__(self, store: Checkpointed, every_s: float = 1.0) -> None:
        self.store = store
        self.every_s = every_s
        self._conn: sqlite3.Connection | None = None
        self._version: int | None = None  # data_version at the last checkpoint
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> None:
        self._conn = connect(self.store.db_path)
        self.store.automatic_checkpoints(False)
        self._thread = threading.Thread(target=self._run, name="argus-checkpointer",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        self.store.automatic_checkpoints(True)
        if self._conn is not None:
            self._conn.close()

    def _run(self) -> None:
        while not self._stopping.wait(self.every_s):
            self.run_once()

    def run_once(self) -> bool:
        """A passive checkpoint when a commit came since the last one; whether it ran."""
        assert self._conn is not None, "start() first"
        try:
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if version == self._version:
                return False
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:  # the writer reports storage faults; say it once
            if not self._failing:
                log.warning("background checkpoint failed: %s", exc)
            self._failing = True
            return False
        self._failing = False
        self._version = version
        return True
