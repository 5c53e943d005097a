"""The host beside a bench's figures: its name, CPU, the date, the load and a calibration
loop's time, so that a figure measured on another host or another day can be compared (the
hosts this project runs on differ by up to 3x from day to day, and are often shared).

Every bench of this folder that prints figures prints ``host_line()`` with them::

    host vm (x86_64, 2 cores), 2026-12-06; calibration 152 ms; load 1.9

The calibration is a fixed CPU-bound loop's CPU time: a higher number, a slower host. Compare
two figures by their calibrations, not by their dates.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
import time


def calibration_ms() -> float:
    """A fixed CPU-bound loop (the same in every bench of this folder that prints one)."""
    start = time.process_time()
    total = 0
    for i in range(2_000_000):
        total += i * i % 7
    return (time.process_time() - start) * 1000


def host_line() -> str:
    """``host NAME (MACHINE, N cores), YYYY-MM-DD; calibration MS ms; load L`` (the one-minute
    load average: other work on the host, which skews wall-clock figures)."""
    return (f"host {socket.gethostname()} ({platform.machine()}, {os.cpu_count()} cores), "
            f"{datetime.date.today().isoformat()}; calibration {calibration_ms():.0f} ms; "
            f"load {os.getloadavg()[0]:.1f}")
