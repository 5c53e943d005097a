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
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from service.priorities import range_problem
from service.quotas import Limits
from service.users import name_problem
from service.webhooks.settings import WebhookSettings, webhook_settings
from service.workloads import DEFAULT_OVERRIDES, WORKLOAD_NAMES

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


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain dict/list copy of a frozen value (for JSON and for the Ray SDK)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


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
    # A forward plan (service.reservations): the first N waiting tasks in admission order
    # get a reservation from the time limits, the rest a start estimate; 0 = the
    # starvation guard alone (service.passes.GuardPass). Off by default: without time
    # limits the plan holds nodes for good and loses to the guard (the Philly replay);
    # with limits declared, 32 did best on the trace bench.
    reservations: int = 0
    stuck_timeout_s: float | None = 900.0  # RUNNING with unplaceable PGs -> stop + retry
    cpus_per_gpu: float = 3.0  # verl's bundle: {"CPU": 3, "GPU": 1}
    pending_recheck_s: float = 0.0  # PENDING_RESOURCES re-check delay (0 = every tick)
    # Retry of a retryable failure: ``when_fits`` re-admits as soon as the gang fits and a
    # short backoff (doubling with consecutive resource failures, capped) has passed, the
    # task keeping its place meanwhile; ``timer`` waits ``retry_interval_s`` blindly (the
    # seeds' behaviour, ``retry_backoff`` fixed or exponential).
    retry_mode: str = "when_fits"
    retry_min_backoff_s: float = 5.0
    retry_max_backoff_s: float = 300.0
    # Priorities (service.priorities): a task without one gets ``default_priority``; a
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
    """The driver-log follower (``service.progress_follower``): progress and curves."""

    enabled: bool = True
    poll_s: float = 5.0  # how often each running attempt's log is read for new lines
    max_points: int = 500  # kept points per metric and attempt (``curves.thin``)
    max_read_chars: int = 1 << 20  # at most this much of one log per read


_PROGRESS_LIMITS: dict[str, tuple[float, bool]] = {  # key: (minimum, integer)
    "poll_s": (0.1, False), "max_points": (2, True), "max_read_chars": (1024, True)}


def _progress(raw: Mapping[str, Any]) -> ProgressSettings:
    unknown = set(raw) - {"enabled", *_PROGRESS_LIMITS}
    if unknown:
        raise ConfigError(f"v2.progress: unknown keys {sorted(unknown)}")
    out: dict[str, Any] = {}
    if "enabled" in raw:
        if not isinstance(raw["enabled"], bool):
            raise ConfigError(f"v2.progress.enabled: must be true or false, got "
                              f"{raw['enabled']!r}")
        out["enabled"] = raw["enabled"]
    for key, (minimum, integer) in _PROGRESS_LIMITS.items():
        if key in raw:
            value = _num(raw[key], f"v2.progress.{key}", minimum=minimum, integer=integer)
            out[key] = int(value) if integer else float(value)
    return ProgressSettings(**out)


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
    # server limits (service.http_server): a request's headers (and an idle keep-alive
    # connection) get header_timeout_s, its body body_timeout_s; connections beyond
    # max_connections are answered 503 and closed
    api_header_timeout_s: float = 10.0
    api_body_timeout_s: float = 30.0
    api_max_connections: int = 512
    # one client address may hold at most this many of them (0: no limit): set it high, or
    # 0, behind a reverse proxy, where every connection comes from the proxy's address
    api_max_connections_per_address: int = 128
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
        """Copy with some top-level fields replaced (None values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


# -- loading ------------------------------------------------------------------------

_SCHED_KEYS = {f.name for f in fields(SchedulerSettings)}


def _section(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}{key}: must be a mapping")
    return value


def _num(value: Any, where: str, *, minimum: float | None = None, integer: bool = False):
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ConfigError(f"{where}: must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where}: must be >= {minimum}, got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: must be a non-empty string, got {value!r}")
    return value


_CHOICES = {"retry_backoff": ("fixed", "exponential"), "retry_mode": ("when_fits", "timer")}
_FLAGS = ("backfill", "fair_share", "preemption", "preempt_without_checkpoint")
_PRIORITIES = ("default_priority", "max_user_priority")


def _scheduler(raw: Mapping[str, Any]) -> SchedulerSettings:
    unknown = set(raw) - _SCHED_KEYS
    if unknown:
        raise ConfigError(f"v2.scheduler: unknown keys {sorted(unknown)}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"v2.scheduler.{key}"
        if key in _CHOICES:
            if value not in _CHOICES[key]:
                choices = " or ".join(repr(c) for c in _CHOICES[key])
                raise ConfigError(f"{where}: must be {choices}, got {value!r}")
            out[key] = value
        elif key in _FLAGS:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: must be true or false, got {value!r}")
            out[key] = value
        elif key in _PRIORITIES:
            problem = range_problem(value)
            if problem:
                raise ConfigError(f"{where}: {problem}")
            out[key] = value
        elif key in ("max_attempts", "stuck_timeout_s", "fair_share_half_life_s",
                     "default_max_runtime_s") and value is None:
            out[key] = None
        elif key in ("max_attempts", "max_running_tasks", "reservations"):
            out[key] = _num(value, where, minimum=1 if key == "max_attempts" else 0,
                            integer=True)
        else:
            out[key] = float(_num(value, where, minimum=0))
    sched = SchedulerSettings(**out)
    _check_scheduler(sched)
    return sched


def _check_scheduler(sched: SchedulerSettings) -> None:
    """Rules between keys, and values that make no sense (``ConfigError``)."""
    if sched.tick_s <= 0:
        raise ConfigError("v2.scheduler.tick_s: must be > 0")
    if sched.retry_max_backoff_s < sched.retry_min_backoff_s:
        raise ConfigError(
            f"v2.scheduler.retry_max_backoff_s ({sched.retry_max_backoff_s:g}) must be >= "
            f"retry_min_backoff_s ({sched.retry_min_backoff_s:g})")
    if sched.max_user_priority < sched.default_priority:
        raise ConfigError(
            f"v2.scheduler.max_user_priority ({sched.max_user_priority}) must be >= "
            f"default_priority ({sched.default_priority}): a user's task without a "
            "priority would be above what users may ask for")
    if sched.fair_share_half_life_s is not None and sched.fair_share_half_life_s <= 0:
        raise ConfigError("v2.scheduler.fair_share_half_life_s: must be > 0 or null")
    if sched.default_max_runtime_s is not None and sched.default_max_runtime_s < 1:
        raise ConfigError("v2.scheduler.default_max_runtime_s: must be >= 1 (seconds) or null")


_LIMIT_KEYS = ("max_running_tasks", "max_gpus", "max_waiting_tasks",
               "max_spec_bytes_per_day")


def _limits(raw: Any, where: str, base: Limits) -> Limits:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a mapping with keys {list(_LIMIT_KEYS)}")
    unknown = set(raw) - set(_LIMIT_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(map(str, unknown))}")
    values = {k: _num(v, f"{where}.{k}", minimum=0, integer=True) for k, v in raw.items()}
    return replace(base, **values)


def _user_name(value: Any, where: str) -> str:
    problem = name_problem(value)
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return value


def _weights(raw: Any) -> Mapping[str, float]:
    if not isinstance(raw, Mapping):
        raise ConfigError("v2.users.weights: must be a mapping of user name to a weight")
    out = {}
    for name, value in raw.items():
        where = f"v2.users.weights.{name}"
        weight = float(_num(value, where, minimum=0))
        if weight <= 0:
            raise ConfigError(f"{where}: must be > 0, got {value!r}")
        out[_user_name(name, where)] = weight
    return MappingProxyType(out)


def _users(raw: Mapping[str, Any]) -> UserSettings:
    known = {"bootstrap_admin", "default_user", "limits", "per_user", "weights"}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"v2.users: unknown keys {sorted(map(str, unknown))}")
    kw: dict[str, Any] = {}
    for key in ("bootstrap_admin", "default_user"):
        if key in raw:
            kw[key] = _user_name(raw[key], f"v2.users.{key}")
    limits = _limits(raw.get("limits") or {}, "v2.users.limits", Limits())
    per_user_raw = raw.get("per_user") or {}
    if not isinstance(per_user_raw, Mapping):
        raise ConfigError("v2.users.per_user: must be a mapping of user name to limits")
    per_user = {
        _user_name(name, f"v2.users.per_user.{name}"):
            _limits(entry or {}, f"v2.users.per_user.{name}", limits)
        for name, entry in per_user_raw.items()
    }
    return UserSettings(**kw, limits=limits, per_user=MappingProxyType(per_user),
                        weights=_weights(raw.get("weights") or {}))


def settings_from_mapping(doc: Mapping[str, Any]) -> Settings:
    """Build validated Settings from a parsed YAML document."""
    if not isinstance(doc, Mapping):
        raise ConfigError("config: top level must be a mapping")
    ray = _section(doc, "ray", "")
    v2 = _section(doc, "v2", "")
    kw: dict[str, Any] = {}
    if "address" in ray:
        kw["ray_address"] = _str(ray["address"], "ray.address")
    if ray.get("gcs_address"):
        kw["gcs_address"] = _str(ray["gcs_address"], "ray.gcs_address")
    if "shared_root" in ray:
        root = _str(ray["shared_root"], "ray.shared_root")
        if not os.path.isabs(root):
            raise ConfigError(f"ray.shared_root: must be an absolute path, got {root!r}")
        kw["shared_root"] = root
    if "entrypoint_num_cpus" in ray:
        kw["entrypoint_num_cpus"] = float(
            _num(ray["entrypoint_num_cpus"], "ray.entrypoint_num_cpus", minimum=0)
        )
    if "entrypoint_resources" in ray:
        res = ray["entrypoint_resources"] or {}
        if not isinstance(res, Mapping):
            raise ConfigError("ray.entrypoint_resources: must be a mapping")
        kw["entrypoint_resources"] = _freeze(
            {str(k): float(_num(v, f"ray.entrypoint_resources.{k}", minimum=0))
             for k, v in res.items()}
        )
    if "runtime_env" in ray:
        env = ray["runtime_env"] or {}
        if not isinstance(env, Mapping):
            raise ConfigError("ray.runtime_env: must be a mapping")
        kw["runtime_env"] = _freeze(env)
    if "timeout_s" in ray:
        kw["ray_timeout_s"] = float(_num(ray["timeout_s"], "ray.timeout_s", minimum=0.1))
    if ray.get("head_json"):
        kw["head_json"] = _head_json(ray["head_json"], "ray.head_json")

    api = _section(v2, "api", "v2.")
    if "host" in api:
        kw["api_host"] = _str(api["host"], "v2.api.host")
    if "port" in api:
        kw["api_port"] = int(_num(api["port"], "v2.api.port", minimum=0, integer=True))
    for key in ("header_timeout_s", "body_timeout_s"):
        if key in api:
            kw[f"api_{key}"] = float(_num(api[key], f"v2.api.{key}", minimum=0.1))
    if "max_connections" in api:
        kw["api_max_connections"] = int(
            _num(api["max_connections"], "v2.api.max_connections", minimum=1, integer=True))
    if "max_connections_per_address" in api:
        kw["api_max_connections_per_address"] = int(_num(
            api["max_connections_per_address"], "v2.api.max_connections_per_address",
            minimum=0, integer=True))
    ui = _section(v2, "ui", "v2.")
    ui_counts = ("max_streams_per_session", "max_streams_per_user", "max_sessions_per_user")
    unknown_ui = set(ui) - {*ui_counts, "secure_cookie"}
    if unknown_ui:
        raise ConfigError(f"v2.ui: unknown keys {sorted(map(str, unknown_ui))}")
    for key in ui_counts:
        if key in ui:
            kw[f"ui_{key}"] = int(_num(ui[key], f"v2.ui.{key}", minimum=0, integer=True))
    if "secure_cookie" in ui:
        if not isinstance(ui["secure_cookie"], bool):
            raise ConfigError(f"v2.ui.secure_cookie: must be true or false, "
                              f"got {ui['secure_cookie']!r}")
        kw["ui_secure_cookie"] = ui["secure_cookie"]
    auth = _section(v2, "auth", "v2.")
    if "token_env" in auth:
        kw["token_env"] = _str(auth["token_env"], "v2.auth.token_env")
    sqlite = _section(v2, "sqlite", "v2.")
    if sqlite.get("db_path"):
        kw["db_path"] = _str(sqlite["db_path"], "v2.sqlite.db_path")
    if "synchronous" in sqlite:
        mode = _str(sqlite["synchronous"], "v2.sqlite.synchronous").upper()
        if mode not in SYNCHRONOUS_MODES:
            raise ConfigError(f"v2.sqlite.synchronous: one of {', '.join(SYNCHRONOUS_MODES)}, "
                              f"got {sqlite['synchronous']!r}")
        kw["sqlite_synchronous"] = mode
    if "task_id_prefix" in v2:
        prefix = _str(v2["task_id_prefix"], "v2.task_id_prefix")
        if not re.fullmatch(r"[a-z0-9]{1,32}", prefix):
            raise ConfigError(
                f"v2.task_id_prefix: must be 1-32 lowercase letters or digits, got {prefix!r}"
            )
        kw["task_id_prefix"] = prefix
    jobspec = _section(v2, "jobspec", "v2.")
    if "allowed_roots" in jobspec:
        roots = jobspec["allowed_roots"] or []
        if not isinstance(roots, list) or not all(
            isinstance(r, str) and os.path.isabs(r) for r in roots
        ):
            raise ConfigError("v2.jobspec.allowed_roots: must be a list of absolute paths")
        kw["allowed_roots"] = tuple(roots)
    if "max_body_bytes" in jobspec:
        kw["max_body_bytes"] = int(
            _num(jobspec["max_body_bytes"], "v2.jobspec.max_body_bytes", minimum=1, integer=True)
        )
    verl = _section(v2, "verl", "v2.")
    if "default_overrides" in verl:
        dov = verl["default_overrides"] or {}
        if not isinstance(dov, Mapping) or set(dov) - set(WORKLOADS):
            raise ConfigError(f"v2.verl.default_overrides: a mapping with keys in {WORKLOADS}")
        merged = dict(DEFAULT_OVERRIDES)
        for wl, items in dov.items():
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ConfigError(f"v2.verl.default_overrides.{wl}: must be a list of strings")
            merged[wl] = tuple(items)
        kw["default_overrides"] = _freeze(merged)
    kw["scheduler"] = _scheduler(_section(v2, "scheduler", "v2."))
    kw["users"] = _users(_section(v2, "users", "v2."))
    kw["progress"] = _progress(_section(v2, "progress", "v2."))
    try:
        kw["webhooks"] = webhook_settings(_section(v2, "webhooks", "v2."))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return Settings(**kw)


def _head_json(value: Any, where: str) -> str:
    path = _str(value, where)
    if not os.path.isabs(path):
        raise ConfigError(f"{where}: must be an absolute path, got {path!r}")
    return path


# ARGUS_HEAD_IP_FILE: the same variable (and meaning) as on the nodes: where head.json is.
_ENV = {
    "ARGUS_RAY_ADDRESS": "ray_address",
    "ARGUS_GCS_ADDRESS": "gcs_address",
    "ARGUS_HEAD_IP_FILE": "head_json",
    "ARGUS_SHARED_ROOT": "shared_root",
    "ARGUS_DB_PATH": "db_path",
    "ARGUS_API_HOST": "api_host",
    "ARGUS_API_PORT": "api_port",
}


def load_settings(path: str | os.PathLike[str] | None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Read the YAML file (if any), then apply ``ARGUS_*`` environment overrides."""
    doc: Any = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    settings = settings_from_mapping(doc)
    env = os.environ if environ is None else environ
    changes: dict[str, Any] = {}
    for var, attr in _ENV.items():
        if env.get(var):
            changes[attr] = int(env[var]) if attr == "api_port" else env[var]
    if "head_json" in changes:
        _head_json(changes["head_json"], "ARGUS_HEAD_IP_FILE")
    return settings.with_overrides(**changes)
