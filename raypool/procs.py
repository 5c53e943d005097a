"""Process effects: start a tagged Ray process tree, stop it, sweep what it left behind.

Every ``ray start`` runs with ``ARGUS_RAY_TAG=<node tag>`` in its environment. Ray's
raylet, agents, workers and job drivers inherit it, so after any fault the node's
leftovers (old raylet, a job driver re-parented to PID 1) are found by scanning
``/proc/<pid>/environ``, never by name, which would hit other nodes on the same host.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import psutil

RAY_TAG_ENV = "ARGUS_RAY_TAG"
NODE_TAG_ENV = "ARGUS_NODE_TAG"


def tagged_processes(env_name: str, tag: str, exclude: set[int] | None = None
                     ) -> list[psutil.Process]:
    """Processes whose environment holds ``env_name=tag`` (zombies and ``exclude`` skipped)."""
    wanted = f"{env_name}={tag}".encode()
    skip = {os.getpid()} | (exclude or set())
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid in skip:
            continue
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                if wanted not in f.read().split(b"\0"):
                    continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (OSError, psutil.Error):
            continue
        found.append(proc)
    return found


def kill_tagged(env_name: str, tag: str, timeout_s: float = 5.0,
                exclude: set[int] | None = None) -> list[int]:
    """SIGKILL every process carrying the tag, wait for them to go; returns their pids."""
    procs = tagged_processes(env_name, tag, exclude)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=timeout_s)
    return [p.pid for p in procs]


class TaggedChild:
    """One child process in its own session (process group), output sent to a logger."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], logger: logging.Logger):
        self.argv = list(argv)
        self.logger = logger
        self.started_mono = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, text=True, errors="replace",
        )
        self._pump = threading.Thread(target=self._forward, daemon=True, name="child-output")
        self._pump.start()

    def _forward(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.logger.info("[ray] %s", line.rstrip())

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> int | None:
        """Exit code once the child has exited, else None."""
        return self.proc.poll()

    def stop(self, timeout_s: float) -> None:
        """SIGTERM the child alone (``ray start`` then drains its node in order), wait up to
        ``timeout_s``, then SIGKILL the whole group. ``ray start --address`` towards a dead
        GCS ignores SIGTERM, hence the deadline."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.logger.warning("ray start (pid %d) ignored SIGTERM for %gs; SIGKILL",
                                    self.pid, timeout_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.2
               ) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passes; returns the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
