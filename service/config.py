"""Service settings: one YAML file (Ray section + ``v2:`` section), loaded once, frozen.

Shape::

    ray:
      address: http://127.0.0.1:8265      # Ray job server (dashboard) URL
      gcs_address: null                   # host:port; default: host of address + :6379
      head_json: null                     # the head's record; set: addresses come from it
      shared_root: /private
      entrypoint_num_cpus: 1
      entrypoint_resources: {worker_node: 1}
      runtime_env: {env_vars: {...}}
    v2:
      api: {host: 0.0.0.0, port: 8080, header_timeout_s: 10, body_timeout_s: 30,
            max_connections: 512}
      auth: {token_env: ARGUS_API_TOKEN}
      sqlite: {db_path: /private/common/db/mvp_v2.sqlite3, synchronous: NORMAL}
      store: {url: null}                  # postgresql://user@host:port/db; null: the
                                          # SQLite file above (also sqlite:///path)
      scheduler: {tick_s: 1, retry_interval_s: 60, max_running_tasks: 0, ...}
      users:
        bootstrap_admin: admin            # who the token in token_env signs in as
        default_user: admin               # owner of tasks created before users existed
        limits: {max_running_tasks: 0, max_gpus: 0}   # every user's (0: no limit)
        per_user: {alice: {max_gpus: 8}}  # overrides, key by key
      progress: {enabled: true, poll_s: 5, max_points: 500, max_read_chars: 1048576}
      webhooks: {allow_networks: [], max_per_user: 10, ...}   # service/webhooks/settings.py
      ...

Precedence: defaults < file < environment (``ARGUS_*``) < command-line flags.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from service.domain.workloads import DEFAULT_OVERRIDES, WORKLOAD_NAMES
from service.policy.quotas import Limits
from service.webhooks.settings import WebhookSettings

WORKLOADS = WORKLOAD_NAMES  # the workload keys of v2.verl.default_overrides

# PRAGMA synchronous of the database's writing connection (``v2.sqlite.synchronous``). In
# WAL mode both keep a commit through kill -9 of the service; FULL also syncs the WAL to
# the disk at every commit, so an accepted task survives an OS crash or power loss too.
# NORMAL is the default: with one sync per submission, FULL misses the API's POST latency
# floor (README, "Limits and hostile input"); choose FULL where power loss matters more.
SYNCHRONOUS_MODES = ("FULL", "NORMAL")
DEFAULT_SYNCHRONOUS = "NORMAL"


class ConfigError(ValueError):
    """The configuration is invalid; the message says which key and why."""


def freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain dict/list copy of a frozen value (for JSON and for the Ray SDK)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


LEASE_TTL_S = {"sqlite": 15.0, "postgresql": 6.0}


@dataclass(frozen=True)
class SchedulerSettings:
    tick_s: float = 1.0
    retry_interval_s: float = 60.0
    retry_backoff: str = "fixed"  # fixed | exponential
    retry_max_interval_s: float = 600.0
    max_attempts: int | None = None  # None = unlimited retries of retryable failures
    max_running_tasks: int = 0  # 0 = no limit besides resources
    # a task that does not fit, waiting longer, gets nodes kept for it (no backfill there)
    starvation_guard_s: float = 300.0
    backfill: bool = True  # False: first come, first served (nothing passes a waiting task)
    # A forward plan (service.scheduling.reservations): the first N waiting tasks in
    # admission order get a reservation from the time limits, the rest a start estimate;
    # tasks without a limit are kept for as the starvation guard keeps them (on the Philly
    # replay, where none has a limit, it decides as the guard at every tick). 0 = the
    # guard alone (service.scheduling.passes.GuardPass), and no start estimates. 8 did
    # best on the trace bench's 72 variants, against 2 and 32 (docs/benchmarks.md, issue 21).
    reservations: int = 8
    # Past the guard the plan reserves the longest waiting first, each GPU a gang asks
    # counting as this many seconds more of waiting: the big gangs, the hardest to fit and
    # what the end of a busy spell waits on, go before small tasks that backfill around
    # them, and a task is passed only by gangs that ask more GPUs and waited at most this
    # times the difference less. 0: by age alone. 300 with ``reserve_small_after_s`` 1800:
    # on the trace bench's full-size traces the plan's utilization at ``backfill``'s on 5
    # of 6, against 1 of 6 with both at 0 (docs/benchmarks.md, issue 21).
    gang_size_credit_s: float = 300.0
    # A small gang (one node, at most half the GPUs of the largest node) with a time limit
    # is reserved only once it has waited this long; before that it starts wherever it
    # fits without delaying a reservation, and shows a start estimate. Reserving it drains
    # GPUs that runs ending there soon free anyway, and it moves the big gangs' reservations
    # later; past this wait it is reserved as any task, which bounds its wait. One of a
    # priority above ``default_priority`` is reserved at once. 0: every task is reserved
    # alike (docs/benchmarks.md, issue 21).
    reserve_small_after_s: float = 1800.0
    # With the plan and fair share on: a user whose weighted share is at least this many
    # times their fair part (their weight over the weights of the users with a task
    # waiting or running) gets no firm reservation for a task of ``default_priority`` or
    # lower; it starts wherever it fits without delaying a reservation (and shows a start
    # estimate), and is reserved again once its user's share is below the bar. The room
    # goes to the others' reservations first. 0: off. 1.5 on the trace bench's full-size
    # traces: Jain over 4-h windows +1.4 points, a task's mean wait 68 -> 62 min,
    # utilization -0.2 points, start estimates' error up (docs/benchmarks.md, issue 21).
    unreserved_above_share: float = 0.0
    stuck_timeout_s: float | None = 900.0  # RUNNING with unplaceable PGs -> stop + retry
    # Node health (issue 55, service.engine.node_health): with ``ray.head_json`` set, the
    # nodes' health files beside it (``nodes/<name>.health.json``) are read every
    # ``node_health_every_s`` on the tick; a node reported unhealthy is cordoned (source
    # health) and resumed after ``node_health_passes`` healthy checks in a row. 0: off.
    node_health_every_s: float = 10.0
    node_health_passes: int = 3
    # The Ray-side fence (service.engine.fences): every ``node_fence_every_s`` the tick
    # keeps one fence job on each cordoned or drained node, holding its free GPUs, CPUs and
    # driver resources so that Ray places nothing new there. 0: off.
    node_fence_every_s: float = 2.0
    # Quarantine (issue 55, service.policy.quarantine): when attempts of
    # ``quarantine_tasks`` different tasks fail on one node within ``quarantine_window_s``
    # with a hardware error in their log (RUNTIME_ERROR or UNKNOWN matching CUDA/NCCL/ECC/
    # Xid...), the node is cordoned (source quarantine; only an operator resumes it).
    # ``quarantine_requeue``: such failed attempts go back to the queue instead of FAILED:
    # at once and not counted once their node is quarantined; the first one on a node, in
    # ``quarantine_retry_delay_s`` (counted against max_attempts, once per task).
    quarantine: bool = True
    quarantine_window_s: float = 3600.0
    quarantine_tasks: int = 2
    quarantine_requeue: bool = True
    quarantine_retry_delay_s: float = 60.0
    cpus_per_gpu: float = 3.0  # verl's bundle: {"CPU": 3, "GPU": 1}
    pending_recheck_s: float = 0.0  # PENDING_RESOURCES re-check delay (0 = every tick)
    # Retry of a retryable failure: ``when_fits`` re-admits as soon as the gang fits and a
    # short backoff (doubling with consecutive resource failures, capped) has passed, the
    # task keeping its place meanwhile; ``timer`` waits ``retry_interval_s`` blindly (the
    # seeds' behaviour, ``retry_backoff`` fixed or exponential).
    retry_mode: str = "when_fits"
    retry_min_backoff_s: float = 5.0
    retry_max_backoff_s: float = 300.0
    # Priorities (service.policy.priorities): a task without one gets ``default_priority``; a
    # non-admin may ask for at most ``max_user_priority``.
    default_priority: int = 0
    max_user_priority: int = 0
    # Fair share among equal priorities: the user with the smallest weighted share of the
    # GPUs goes first (DRF); with a half-life, the share is of decayed recent usage.
    fair_share: bool = True
    fair_share_half_life_s: float | None = None
    # Preemption: a higher-priority gang waiting longer than the grace period stops the
    # fewest lower-priority running tasks that make it fit (those that checkpoint only,
    # unless ``preempt_without_checkpoint``).
    preemption: bool = False
    preemption_grace_s: float = 600.0
    preempt_without_checkpoint: bool = False
    # The time limit of a task whose JobSpec sets no ``max_runtime_s`` (None: no limit).
    default_max_runtime_s: float | None = None


@dataclass(frozen=True)
class UserSettings:
    bootstrap_admin: str = "admin"  # the user the token in ``token_env`` signs in as
    default_user: str = "admin"  # owner of the tasks created before users existed
    limits: Limits = field(default_factory=Limits)  # every user's, unless overridden
    per_user: Mapping[str, Limits] = field(default_factory=lambda: MappingProxyType({}))
    # fair-share weights (default 1): a user of weight 2 is due twice the GPUs of weight 1
    weights: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def limits_for(self, user: str) -> Limits:
        return self.per_user.get(user, self.limits)

    def weight_for(self, user: str | None) -> float:
        return 1.0 if user is None else float(self.weights.get(user, 1.0))


@dataclass(frozen=True)
class ProgressSettings:
    """The driver-log follower (``service.engine.progress_follower``): progress and curves."""

    enabled: bool = True
    poll_s: float = 5.0  # how often each running attempt's log is read for new lines
    max_points: int = 500  # kept points per metric and attempt (``curves.thin``)
    max_read_chars: int = 1 << 20  # at most this much of one log per read


_STORE_SCHEMES = ("sqlite:///", "postgresql://", "postgres://")


@dataclass(frozen=True)
class Settings:
    # Ray section
    ray_address: str = "http://127.0.0.1:8265"
    gcs_address: str | None = None
    shared_root: str = "/private"
    entrypoint_num_cpus: float = 1.0
    entrypoint_resources: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType({"worker_node": 1.0})
    )
    runtime_env: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    ray_timeout_s: float = 10.0
    # head.json path: when set, the job server and GCS addresses come from the head's
    # record (and follow a moved or restarted head); ray_address/gcs_address are unused.
    head_json: str | None = None
    # v2 section
    api_host: str = "0.0.0.0"
    api_port: int = 8080
    # server limits (service.web.http_server): a request's headers (and an idle keep-alive
    # connection) get header_timeout_s, its body body_timeout_s; connections beyond
    # max_connections are answered 503 and closed
    api_header_timeout_s: float = 10.0
    api_body_timeout_s: float = 30.0
    api_max_connections: int = 512
    # one client address may hold at most this many of them (0: no limit): set it high, or
    # 0, behind a reverse proxy, where every connection comes from the proxy's address
    api_max_connections_per_address: int = 128
    # of those, at most this many may still be sending their first request's headers
    # (half-open; 0: no limit): a flood of half-sent requests is refused early
    api_max_half_open_per_address: int = 16
    # CPU time of the API's store and work threads one user (or client address) may take,
    # as a share of one core, while another party is served; past it their next call
    # waits (service.store.offload.TimeShare). 1: a whole core
    api_cpu_share_per_user: float = 0.25
    # the console's live streams: open at once per sign-in session and per user (0: no
    # limit); a page refused one refreshes on its timer instead
    ui_max_streams_per_session: int = 4
    ui_max_streams_per_user: int = 16
    # console sessions a user keeps (signing in again drops the oldest; 0: no limit), and
    # the Secure cookie flag whatever the request's scheme (behind a TLS-terminating proxy)
    ui_max_sessions_per_user: int = 20
    ui_secure_cookie: bool = False
    token_env: str = "ARGUS_API_TOKEN"
    db_path: str | None = None  # default: <shared_root>/common/db/mvp_v2.sqlite3
    sqlite_synchronous: str = DEFAULT_SYNCHRONOUS  # FULL: a commit survives power loss too
    store_url: str | None = None  # v2.store.url; None: the SQLite file (resolved_db_path)
    # the database lease: one instance per SQLite file, the leader's on PostgreSQL (its TTL
    # bounds a failover there); None: LEASE_TTL_S by engine
    lease_ttl_s: float | None = None
    task_id_prefix: str = "mvp2"
    allowed_roots: tuple[str, ...] = ()  # default: (shared_root,)
    max_body_bytes: int = 256 << 10  # a real JobSpec is a few KiB; overrides fit many times over
    default_overrides: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType(dict(DEFAULT_OVERRIDES))
    )
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    users: UserSettings = field(default_factory=UserSettings)
    progress: ProgressSettings = field(default_factory=ProgressSettings)
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)

    # -- derived ----------------------------------------------------------------
    @property
    def resolved_db_path(self) -> str:
        return self.db_path or os.path.join(self.shared_root, "common", "db", "mvp_v2.sqlite3")

    @property
    def resolved_lease_ttl_s(self) -> float:
        """``lease_ttl_s``, else 15 s on SQLite (a second instance is only refused by it)
        and 6 s on PostgreSQL (a standby takes over a vanished leader after it)."""
        if self.lease_ttl_s is not None:
            return self.lease_ttl_s
        return LEASE_TTL_S["postgresql" if (self.store_url or "").startswith(
            "postgres") else "sqlite"]

    @property
    def resolved_store(self) -> str:
        """What the store opens: ``v2.store.url``, else the SQLite file."""
        return self.store_url or self.resolved_db_path

    @property
    def resolved_allowed_roots(self) -> tuple[str, ...]:
        return self.allowed_roots or (self.shared_root,)

    @property
    def resolved_gcs_address(self) -> str:
        if self.gcs_address:
            return self.gcs_address
        from urllib.parse import urlparse

        host = urlparse(self.ray_address).hostname or "127.0.0.1"
        return f"{host}:6379"

    def with_overrides(self, **changes: Any) -> Settings:
        """Copy with some top-level fields replaced (None values are ignored); a store URL
        (from ``ARGUS_STORE_URL``) is checked."""
        if changes.get("store_url"):
            self.checked_store_url(changes["store_url"], "ARGUS_STORE_URL")
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @staticmethod
    def checked_store_url(url: str, where: str) -> str:
        """``v2.store.url`` / ``ARGUS_STORE_URL``: ``sqlite:///path`` or
        ``postgresql://...`` (whether the server answers is found at start, by the store)."""
        if not url.startswith(_STORE_SCHEMES):
            shown = re.sub(r"://([^:/@]*):[^@/]*@", r"://\1:***@", url)
            raise ConfigError(f"{where}: sqlite:///absolute/path or "
                              f"postgresql://user@host:port/db, got {shown!r}")
        return url
