"""The one signal-driven loop of the node programs, and both watchdogs and the head
publisher running on it."""

from __future__ import annotations

import logging
import os
import signal

from raypool.config import load_node_settings
from raypool.head import HeadPublisher
from raypool.loop import SignalLoop
from raypool.watchdog import RayWatchdog

LOG = logging.getLogger("test")


def test_steps_back_to_back_until_stopped_after_setup():
    loop = SignalLoop(interval_s=3600, log=LOG)
    events = []

    def step() -> bool:
        events.append("step")
        if len(events) == 4:
            loop.stop()
        return True  # the next step at once: no pause

    loop.run(step, setup=lambda: events.append("setup"))
    assert events == ["setup", "step", "step", "step"]


def test_a_stop_ends_the_pause_at_once():
    loop = SignalLoop(interval_s=3600, log=LOG)
    steps = []

    def step() -> bool:
        steps.append(1)
        loop.stop()
        return False  # asks for a pause of an hour, cut short by the stop

    loop.run(step)
    assert steps == [1]


def test_wake_ends_the_pause():
    loop = SignalLoop(interval_s=3600, log=LOG, wake=lambda: True)
    steps = []

    def step() -> bool:
        steps.append(1)
        if len(steps) == 3:
            loop.stop()
        return False

    loop.run(step)
    assert len(steps) == 3


def test_sigterm_ends_the_loop_and_the_old_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    loop = SignalLoop(interval_s=3600, log=LOG)
    steps = []

    def step() -> bool:
        steps.append(1)
        os.kill(os.getpid(), signal.SIGTERM)  # what supervisord sends to stop a program
        return False

    loop.run(step)
    assert steps == [1] and loop.stopping.is_set()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_signal_during_setup_ends_the_loop_before_the_first_step():
    loop = SignalLoop(interval_s=3600, log=LOG)
    steps = []
    loop.run(lambda: bool(steps.append(1)),
             setup=lambda: os.kill(os.getpid(), signal.SIGINT))
    assert steps == []


def settings(tmp_path, role: str):
    return load_node_settings({
        "ARGUS_ROLE": role, "ARGUS_NODE_IP": "10.0.0.2", "ARGUS_NODE_NAME": "n",
        "ARGUS_SHARED_ROOT": str(tmp_path), "ARGUS_RUN_DIR": str(tmp_path / "run")})


class ScriptedWatchdog(RayWatchdog):
    """Ticks twice, then receives SIGTERM; records every stop instead of sweeping."""

    def __init__(self, settings) -> None:
        super().__init__(settings, LOG)
        self.events: list[str] = []

    def stop_child(self, reason: str) -> None:
        self.events.append(f"stop: {reason.split(':')[0]}")

    def tick(self) -> bool:
        self.events.append("tick")
        if self.events.count("tick") == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return True


def test_watchdog_runs_on_the_loop_and_stops_ray_on_the_way_out(tmp_path):
    dog = ScriptedWatchdog(settings(tmp_path, "worker"))
    assert dog.run() == 0
    assert dog.events == ["stop: watchdog start", "tick", "tick", "stop: watchdog exiting"]


def test_head_publisher_runs_on_the_loop_until_sigterm(tmp_path):
    s = settings(tmp_path, "head")
    checks = []

    def healthy() -> bool:
        checks.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
        return True

    os.makedirs(s.run_dir)
    with open(s.generation_file, "w") as f:
        f.write('{"generation": "g1"}')
    publisher = HeadPublisher(s, LOG, healthy=healthy, read_cluster_id=lambda: "c1")
    assert publisher.run() == 0
    assert checks == [1]
    assert publisher.state.generation == "g1" and publisher.state.seq == 1
