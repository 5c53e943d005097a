"""The effect side shared by both watchdogs: own one ``ray start --block`` child, track how
long it has been healthy, stop it and sweep the node's leftovers; run in a
:class:`~raypool.loop.SignalLoop` that ends on SIGTERM.

Subclasses supply one ``tick()`` (observe, ask :mod:`raypool.policy`, act).
"""

from __future__ import annotations

import abc
import logging
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence

from raypool.config import NodeSettings
from raypool.gcsstore import ray_store_env
from raypool.loop import SignalLoop
from raypool.policy import ChildState
from raypool.procs import RAY_TAG_ENV, TaggedChild, kill_tagged

HEAD_HEALTH_CHECK_ENV = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "5",
}


def ray_executable() -> str:
    """The ``ray`` next to this interpreter (a venv), else the one on PATH."""
    sibling = os.path.join(os.path.dirname(sys.executable), "ray")
    return sibling if os.access(sibling, os.X_OK) else (shutil.which("ray") or "ray")


def ray_env(settings: NodeSettings, base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env[RAY_TAG_ENV] = settings.node_tag
    # Raylets, drivers and workers inherit it: how long they wait for a GCS that does not
    # answer (a head restart) before they exit.
    env["RAY_gcs_rpc_server_reconnect_timeout_s"] = str(settings.gcs_reconnect_timeout_s)
    env.pop("RAY_ADDRESS", None)  # `ray start` must not pick up someone else's cluster
    if settings.role == "head":
        env.update(ray_store_env(settings))
        # The GCS notices a SIGKILLed raylet only by health checks (default ~30 s); until
        # then it schedules onto the dead node. Check every second, give up after 5 misses.
        for key, value in HEAD_HEALTH_CHECK_ENV.items():
            env.setdefault(key, value)
    return env


class RayWatchdog(abc.ABC):
    tick_s: float = 1.0

    def __init__(self, settings: NodeSettings, logger: logging.Logger):
        self.settings = settings
        self.log = logger
        self.child: TaggedChild | None = None
        self._ever_ok = False
        self._last_ok_mono = 0.0

    # --- child bookkeeping -------------------------------------------------------------
    def child_state(self) -> ChildState:
        if self.child is None:
            return ChildState(running=False)
        now = time.monotonic()
        since = now - self.child.started_mono
        not_ok = now - (self._last_ok_mono if self._ever_ok else self.child.started_mono)
        return ChildState(running=True, exit_code=self.child.exited(), since_start_s=since,
                          ever_ok=self._ever_ok, not_ok_for_s=not_ok)

    def mark_ok(self, ok: bool) -> None:
        if ok and self.child is not None:
            self._ever_ok = True
            self._last_ok_mono = time.monotonic()

    def start_child(self, argv: Sequence[str]) -> None:
        self.log.info("starting: %s", " ".join(argv))
        self.child = TaggedChild(argv, ray_env(self.settings, os.environ), self.log)
        self._ever_ok = False

    def stop_child(self, reason: str) -> None:
        """Stop the child (if any) and sweep every process carrying this node's Ray tag."""
        self.log.info("stopping Ray: %s", reason)
        if self.child is not None:
            self.child.stop(self.settings.stop_timeout_s)
            self.child = None
        swept = kill_tagged(RAY_TAG_ENV, self.settings.node_tag)
        if swept:
            self.log.info("swept %d leftover Ray process(es): %s", len(swept), swept)

    # --- loop --------------------------------------------------------------------------
    @abc.abstractmethod
    def tick(self) -> bool:
        """One observe-decide-act step; True asks for the next tick at once."""

    def _child_exited(self) -> bool:
        return self.child is not None and self.child.exited() is not None

    def run(self) -> int:
        """Clear what a previous watchdog left, tick until SIGTERM, stop Ray on the way out.

        A pause between ticks ends early when the child exits, so an exit is acted on at
        once rather than a tick later.
        """
        loop = SignalLoop(self.tick_s, self.log, wake=self._child_exited)
        try:
            loop.run(self.tick, setup=lambda: self.stop_child(
                "watchdog start: clear anything a previous watchdog left"))
        finally:
            self.stop_child("watchdog exiting")
        return 0
