"""The loop every long-running node program runs: one step, a pause, again, until SIGTERM
or SIGINT (supervisord's stop) asks it to end.

The pause is one interval, cut short by the stop signal at once and by ``wake`` (polled)
for events the program must act on without waiting out the interval (a Ray child that
exited).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

WAKE_POLL_S = 0.2


class SignalLoop:
    def __init__(self, interval_s: float, log: logging.Logger,
                 wake: Callable[[], bool] | None = None, wake_poll_s: float = WAKE_POLL_S):
        self.interval_s = interval_s
        self.log = log
        self.wake = wake
        self.wake_poll_s = wake_poll_s
        self.stopping = threading.Event()

    def stop(self) -> None:
        """End the loop after the current step (what the signal handler does)."""
        self.stopping.set()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.log.info("signal %d: shutting down", signum)
        self.stop()

    def pause(self) -> None:
        """Wait one interval, cut short by :meth:`stop` or by ``wake`` returning True."""
        if self.wake is None:
            self.stopping.wait(self.interval_s)
            return
        deadline = time.monotonic() + self.interval_s
        while not self.stopping.is_set() and time.monotonic() < deadline:
            if self.wake():
                return
            self.stopping.wait(min(self.wake_poll_s, self.interval_s))

    def run(self, step: Callable[[], bool], setup: Callable[[], None] | None = None) -> None:
        """Handle SIGTERM/SIGINT, call ``setup`` (a signal during it ends the loop before
        the first step), then call ``step`` until stopped; a step returning True asks for
        the next one at once. The previous signal handlers are restored on the way out."""
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if setup is not None:
                setup()
            while not self.stopping.is_set():
                if not step():
                    self.pause()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
