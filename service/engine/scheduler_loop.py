"""The scheduler's thread: ``startup`` once, then ``tick`` every ``tick_s`` or on a wake;
storage faults make it degraded, not noisy."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from service.engine.tick_report import TickReport
from service.store.core import Deposed
from service.store.db import storage_fault

log = logging.getLogger(__name__)


class Ticker(Protocol):
    """What the loop drives (``service.engine.scheduler.Scheduler``)."""

    def startup(self, now: float) -> TickReport: ...

    def tick(self, now: float) -> TickReport: ...


class StorageHealth(Protocol):
    """What the loop needs of the store to tell whether writes work (``Store``)."""

    @property
    def write_fault(self) -> str | None: ...

    def probe_write(self) -> None: ...


class SchedulerLoop:
    """Runs ``startup`` then ``tick`` every ``tick_s`` (or at once after ``wake``) in a
    daemon thread. A failing tick is logged and counted; the loop goes on.

    Storage faults (disk full, read-only, locked: ``db.storage_fault``) make the loop
    ``degraded`` rather than noisy: one log line when writes start failing and one when
    they work again, no traceback per tick. While the store reports a failed write, each
    tick starts with ``storage.probe_write()`` (a write that changes nothing), so the
    loop notices the storage is back within a tick even when it has nothing to write.
    ``last_error`` is the error of the last tick, None once a tick succeeds again.
    """

    def __init__(self, scheduler: Ticker, tick_s: float,
                 clock: Callable[[], float] = time.time, *,
                 storage: StorageHealth | None = None,
                 thread_init: Callable[[], None] | None = None) -> None:
        """``thread_init``: called first in the loop's thread (the leader fences it)."""
        if tick_s <= 0:
            raise ValueError(f"tick_s must be > 0, got {tick_s}")
        self.scheduler = scheduler
        self.tick_s = tick_s
        self.clock = clock
        self.storage = storage
        self.thread_init = thread_init
        self.ticks = 0
        self.errors = 0
        self.last_error: str | None = None
        self.last_tick_duration_s = 0.0
        self.last_report: TickReport | None = None
        self._tick_fault: str | None = None  # storage fault of the last tick
        self._started = False  # startup() succeeded
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def failed(self) -> bool:
        """The loop thread ended without being asked to: nothing is being scheduled."""
        return self._thread is not None and not self._thread.is_alive() and not self._stop.is_set()

    @property
    def degraded(self) -> str | None:
        """Why the service cannot write its database now (None: it can, as far as the
        last tick and the last write know)."""
        fault = self._tick_fault
        if fault is None and self.storage is not None:
            fault = self.storage.write_fault
        return None if fault is None else f"storage unavailable: {fault}"

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("scheduler loop already started")
        self._thread = threading.Thread(target=self._run, name="argus-scheduler", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Tick as soon as possible (a task arrived or was canceled)."""
        self._wake.set()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        if self.thread_init is not None:
            self.thread_init()
        while not self._stop.is_set():
            self._wake.clear()  # a wake() during the tick below triggers the next at once
            self.run_once()
            self._wake.wait(self.tick_s)

    def run_once(self) -> None:
        """One turn of the loop: probe the storage if a write failed, ``startup`` until it
        has succeeded once, then ``tick``; failures are recorded, never raised."""
        try:
            if self.storage is not None and self.storage.write_fault is not None:
                self.storage.probe_write()
            if not self._started:
                self.scheduler.startup(self.clock())
                self._started = True
            report = self.scheduler.tick(self.clock())
        except Deposed as exc:  # another instance leads now: this loop's work is over
            log.warning("scheduler: %s; the loop stops", exc)
            self._stop.set()
            return
        except Exception as exc:  # a bug or a DB hiccup must not end scheduling
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            fault = storage_fault(exc)
            if fault is None:
                log.exception("scheduler tick failed")
            elif fault != self._tick_fault:
                log.warning("scheduler: the database cannot be written (%s); retrying every "
                            "tick", exc)
            self._tick_fault = fault
            return
        if self._tick_fault is not None:
            log.warning("scheduler: the database is writable again")
        self._tick_fault = None
        self.ticks += 1
        self.last_report = report
        self.last_tick_duration_s = report.duration_s
        self.last_error = None
