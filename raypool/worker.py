"""Worker side: the watchdog that finds the head through head.json and keeps this node
joined to it, starting over whenever Ray exits, stops being registered with the head, or
head.json names a new head or generation (a restarted head is a new Ray cluster: the old
raylets never rejoin it)."""

from __future__ import annotations

import json
import logging
import time

from raypool import discovery
from raypool.config import NodeSettings
from raypool.headrecord import HeadRecord, Sighting, judge
from raypool.health import HealthError, gcs_alive, is_registered, list_nodes
from raypool.policy import Action, Limits, decide_worker
from raypool.watchdog import RayWatchdog, ray_executable


def worker_argv(settings: NodeSettings, head: HeadRecord) -> list[str]:
    argv = [
        ray_executable(), "start", f"--address={head.gcs_address}",
        f"--resources={json.dumps(dict(settings.worker_resources), sort_keys=True)}",
        f"--node-ip-address={settings.node_ip}", f"--temp-dir={settings.ray_temp_dir}",
        "--disable-usage-stats", "--log-color=false", "--block",
    ]
    if settings.worker_num_gpus is not None:
        argv.append(f"--num-gpus={settings.worker_num_gpus}")
    if settings.worker_num_cpus is not None:
        argv.append(f"--num-cpus={settings.worker_num_cpus}")
    return argv + list(settings.ray_extra_args)


class WorkerWatchdog(RayWatchdog):
    def __init__(self, settings: NodeSettings, logger: logging.Logger):
        super().__init__(settings, logger)
        self.tick_s = settings.poll_s
        self.joined: HeadRecord | None = None
        self._sighting: Sighting | None = None
        self._last_reason = ""

    def fresh_head(self) -> tuple[HeadRecord | None, str]:
        s = self.settings
        result = discovery.read_record(s.head_ip_file, s.cluster_name)
        if result.record is None:
            self._sighting = None
            return None, result.reason
        verdict, self._sighting = judge(
            result.record, result.mtime, time.time(), time.monotonic(), self._sighting)
        return (result.record if verdict.fresh else None), verdict.reason

    def registered(self) -> bool:
        if self.joined is None:
            return False
        try:
            nodes = list_nodes(self.joined.gcs_address, timeout_s=3.0)
        except HealthError:
            return False
        return is_registered(nodes, self.settings.node_ip, self.settings.node_manager_port)

    def tick(self) -> bool:
        s = self.settings
        head, reason = self.fresh_head()
        child = self.child_state()
        registered = False
        if child.running and child.exit_code is None:
            registered = self.registered()
            self.mark_ok(registered)
            child = self.child_state()
        head_healthy = (not child.running and head is not None
                        and gcs_alive(head.gcs_address, timeout_s=3.0))
        decision = decide_worker(child, head, reason, head_healthy,
                                 self.joined.target if self.joined else None, registered,
                                 Limits(s.start_timeout_s, s.unhealthy_s))
        if decision.action is Action.STOP:
            self.stop_child(decision.reason)
            self.joined = None
            return True
        if decision.action is Action.START:
            assert head is not None
            self.log.info(decision.reason)
            self.stop_child("clean node before joining")
            self.joined = head
            self.start_child(worker_argv(s, head))
            return False
        if decision.reason != self._last_reason:
            self.log.info(decision.reason)
            self._last_reason = decision.reason
        return False


def run_worker_watchdog(settings: NodeSettings, logger: logging.Logger) -> int:
    return WorkerWatchdog(settings, logger).run()
