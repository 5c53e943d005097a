"""Worker side: the watchdog that finds the head through head.json and keeps this node
joined to it. It starts over when Ray exits, when a GCS that answers says this node is dead
or unknown, when head.json names another cluster (a restarted head without its store is a
new Ray cluster: the old raylets never rejoin it), or when the head moved and Ray was
joined by IP. A GCS that does not answer (a head restart on the embedded store) is waited
for, within the reconnect budget: the raylet and the runs on it carry on."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace

from raypool import discovery
from raypool.config import NodeSettings, ray_identity_args
from raypool.headrecord import HeadRecord, Sighting, judge
from raypool.health import HealthError, gcs_alive, is_registered, list_nodes
from raypool.policy import Action, ChildState, GcsView, Joined, Limits, decide_worker
from raypool.watchdog import RayWatchdog, ray_executable


def join_address(settings: NodeSettings, head: HeadRecord) -> str:
    """Where ``ray start`` joins: the stable name (``ARGUS_HEAD_HOST``) when the deployment
    has one, so a head that comes back at another address is followed by Ray itself;
    else head.json's address."""
    if settings.head_host:
        host = f"[{settings.head_host}]" if ":" in settings.head_host else settings.head_host
        return f"{host}:{head.gcs_port}"
    return head.gcs_address


def worker_argv(settings: NodeSettings, head: HeadRecord) -> list[str]:
    argv = [
        ray_executable(), "start", f"--address={join_address(settings, head)}",
        f"--resources={json.dumps(dict(settings.worker_resources), sort_keys=True)}",
        f"--node-ip-address={settings.node_ip}", f"--temp-dir={settings.ray_temp_dir}",
        "--disable-usage-stats", "--log-color=false", "--block", *ray_identity_args(settings),
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
        self.joined: Joined | None = None
        self._join_address = ""
        self._sighting: Sighting | None = None
        self._last_reason = ""
        self._silent_since: float | None = None
        self._answered_mono = 0.0
        self._started_wall = 0.0

    def fresh_head(self) -> tuple[HeadRecord | None, str]:
        s = self.settings
        result = discovery.read_record(s.head_ip_file, s.cluster_name)
        if result.record is None:
            self._sighting = None
            return None, result.reason
        verdict, self._sighting = judge(
            result.record, result.mtime, time.time(), time.monotonic(), self._sighting)
        return (result.record if verdict.fresh else None), verdict.reason

    def gcs_view(self) -> GcsView:
        """What the GCS this node joined says about it."""
        if self.joined is None:
            return GcsView.UNKNOWN
        try:
            nodes = list_nodes(self._join_address, timeout_s=3.0)
        except HealthError:
            return GcsView.SILENT
        # The raylet starts after `ray start` does (same host, same clock); a second of
        # slack for the GCS's millisecond stamps.
        if is_registered(nodes, self.settings.node_ip, self.settings.node_manager_port,
                         started_after=self._started_wall - 1.0):
            return GcsView.REGISTERED
        return GcsView.UNKNOWN

    def observe(self, view: GcsView) -> ChildState:
        """The child's state with this observation: how long the GCS has been silent, and
        the grace for "not registered" counted from when the GCS answered again (a node
        resubscribes after an outage; the outage itself is judged by the budget)."""
        now = time.monotonic()
        self.mark_ok(view is GcsView.REGISTERED)
        if view is GcsView.SILENT:
            if self._silent_since is None:
                self._silent_since = now
                self.log.info("GCS %s does not answer: waiting for it", self._join_address)
        elif self._silent_since is not None:
            self.log.info("GCS %s answers again after %.1fs (%s)", self._join_address,
                          now - self._silent_since, view)
            self._silent_since = None
            self._answered_mono = now
        child = self.child_state()
        silent = 0.0 if self._silent_since is None else now - self._silent_since
        return replace(child, silent_for_s=silent,
                       not_ok_for_s=min(child.not_ok_for_s, now - self._answered_mono))

    def tick(self) -> bool:
        s = self.settings
        head, reason = self.fresh_head()
        child = self.child_state()
        view = GcsView.UNKNOWN
        if child.running and child.exit_code is None:
            view = self.gcs_view()
            child = self.observe(view)
        head_healthy = (not child.running and head is not None
                        and gcs_alive(join_address(s, head), timeout_s=3.0))
        decision = decide_worker(child, head, reason, head_healthy, self.joined, view,
                                 Limits(s.start_timeout_s, s.unhealthy_s,
                                        s.gcs_reconnect_timeout_s))
        if decision.action is Action.STOP:
            self.stop_child(decision.reason)
            self.joined = None
            self._silent_since = None
            return True
        if decision.action is Action.START:
            assert head is not None
            self.log.info(decision.reason)
            self.stop_child("clean node before joining")
            self._join_address = join_address(s, head)
            self.joined = Joined(head.identity, head.gcs_address, bool(s.head_host))
            self._started_wall = time.time()
            self.start_child(worker_argv(s, head))
            return False
        if decision.reason != self._last_reason:
            self.log.info(decision.reason)
            self._last_reason = decision.reason
        return False


def run_worker_watchdog(settings: NodeSettings, logger: logging.Logger) -> int:
    return WorkerWatchdog(settings, logger).run()
