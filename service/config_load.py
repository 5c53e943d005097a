"""Settings loaded: the YAML file's sections parsed and checked, ``ARGUS_*`` environment
variables and command-line flags applied over them (``service.config`` holds the shapes).

Every bad value is a :class:`ConfigError` naming its key, raised before anything starts.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from service.config import (
    SYNCHRONOUS_MODES,
    WORKLOADS,
    ConfigError,
    ProgressSettings,
    Settings,
    UserSettings,
    freeze,
)
from service.config_scheduler import scheduler_settings
from service.config_values import flag, number, numbers, section, text
from service.domain.users import name_problem
from service.domain.workloads import DEFAULT_OVERRIDES
from service.policy.quotas import Limits
from service.webhooks.settings import WebhookSettings

_PROGRESS_LIMITS: dict[str, tuple[float, bool]] = {  # key: (minimum, integer)
    "poll_s": (0.1, False), "max_points": (2, True), "max_read_chars": (1024, True)}


def _progress(raw: Mapping[str, Any]) -> ProgressSettings:
    unknown = set(raw) - {"enabled", *_PROGRESS_LIMITS}
    if unknown:
        raise ConfigError(f"v2.progress: unknown keys {sorted(unknown)}")
    out: dict[str, Any] = {}
    if "enabled" in raw:
        out["enabled"] = flag(raw["enabled"], "v2.progress.enabled")
    out.update(numbers(raw, _PROGRESS_LIMITS, "v2.progress"))
    return ProgressSettings(**out)


_LIMIT_KEYS = ("max_running_tasks", "max_gpus", "max_waiting_tasks",
               "max_spec_bytes_per_day")


def _limits(raw: Any, where: str, base: Limits) -> Limits:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a mapping with keys {list(_LIMIT_KEYS)}")
    unknown = set(raw) - set(_LIMIT_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(map(str, unknown))}")
    values = {k: number(v, f"{where}.{k}", minimum=0, integer=True) for k, v in raw.items()}
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
        weight = float(number(value, where, minimum=0))
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
    """Build validated Settings from a parsed YAML document (each section in turn, in the
    order the errors are reported)."""
    if not isinstance(doc, Mapping):
        raise ConfigError("config: top level must be a mapping")
    ray = section(doc, "ray", "")
    v2 = section(doc, "v2", "")
    kw = _ray_settings(ray)
    kw |= _api_settings(section(v2, "api", "v2."))
    kw |= _ui_settings(section(v2, "ui", "v2."))
    auth = section(v2, "auth", "v2.")
    if "token_env" in auth:
        kw["token_env"] = text(auth["token_env"], "v2.auth.token_env")
    kw |= _sqlite_settings(section(v2, "sqlite", "v2."))
    kw |= _store_settings(section(v2, "store", "v2."))
    if "task_id_prefix" in v2:
        prefix = text(v2["task_id_prefix"], "v2.task_id_prefix")
        if not re.fullmatch(r"[a-z0-9]{1,32}", prefix):
            raise ConfigError(
                f"v2.task_id_prefix: must be 1-32 lowercase letters or digits, got {prefix!r}"
            )
        kw["task_id_prefix"] = prefix
    kw |= _jobspec_settings(section(v2, "jobspec", "v2."))
    kw |= _verl_settings(section(v2, "verl", "v2."))
    kw["scheduler"] = scheduler_settings(section(v2, "scheduler", "v2."))
    kw["users"] = _users(section(v2, "users", "v2."))
    kw["progress"] = _progress(section(v2, "progress", "v2."))
    try:
        kw["webhooks"] = _webhooks(section(v2, "webhooks", "v2."))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return Settings(**kw)


def _ray_settings(ray: Mapping[str, Any]) -> dict[str, Any]:
    """``ray``: the cluster's address, the driver's resources, the Ray timeout."""
    kw: dict[str, Any] = {}
    if "address" in ray:
        kw["ray_address"] = text(ray["address"], "ray.address")
    if ray.get("gcs_address"):
        kw["gcs_address"] = text(ray["gcs_address"], "ray.gcs_address")
    if "shared_root" in ray:
        root = text(ray["shared_root"], "ray.shared_root")
        if not os.path.isabs(root):
            raise ConfigError(f"ray.shared_root: must be an absolute path, got {root!r}")
        kw["shared_root"] = root
    if "entrypoint_num_cpus" in ray:
        kw["entrypoint_num_cpus"] = float(
            number(ray["entrypoint_num_cpus"], "ray.entrypoint_num_cpus", minimum=0)
        )
    if "entrypoint_resources" in ray:
        res = ray["entrypoint_resources"] or {}
        if not isinstance(res, Mapping):
            raise ConfigError("ray.entrypoint_resources: must be a mapping")
        kw["entrypoint_resources"] = freeze(
            {str(k): float(number(v, f"ray.entrypoint_resources.{k}", minimum=0))
             for k, v in res.items()}
        )
    if "runtime_env" in ray:
        env = ray["runtime_env"] or {}
        if not isinstance(env, Mapping):
            raise ConfigError("ray.runtime_env: must be a mapping")
        kw["runtime_env"] = freeze(env)
    if "timeout_s" in ray:
        kw["ray_timeout_s"] = float(number(ray["timeout_s"], "ray.timeout_s", minimum=0.1))
    if ray.get("head_json"):
        kw["head_json"] = _head_json(ray["head_json"], "ray.head_json")
    return kw


def _api_settings(api: Mapping[str, Any]) -> dict[str, Any]:
    """``v2.api``: where the API listens and its per-connection limits."""
    kw: dict[str, Any] = {}
    if "host" in api:
        kw["api_host"] = text(api["host"], "v2.api.host")
    if "port" in api:
        kw["api_port"] = int(number(api["port"], "v2.api.port", minimum=0, integer=True))
    for key in ("header_timeout_s", "body_timeout_s"):
        if key in api:
            kw[f"api_{key}"] = float(number(api[key], f"v2.api.{key}", minimum=0.1))
    if "max_connections" in api:
        kw["api_max_connections"] = int(
            number(api["max_connections"], "v2.api.max_connections", minimum=1, integer=True))
    for key in ("max_connections_per_address", "max_half_open_per_address"):
        if key in api:
            kw[f"api_{key}"] = int(number(api[key], f"v2.api.{key}", minimum=0, integer=True))
    if "cpu_share_per_user" in api:
        share = float(number(api["cpu_share_per_user"], "v2.api.cpu_share_per_user",
                           minimum=0.01))
        if share > 1.0:
            raise ConfigError(f"v2.api.cpu_share_per_user: must be <= 1 (one core), got "
                              f"{api['cpu_share_per_user']!r}")
        kw["api_cpu_share_per_user"] = share
    return kw


def _ui_settings(ui: Mapping[str, Any]) -> dict[str, Any]:
    """``v2.ui``: the console's streams, sessions and cookie."""
    kw: dict[str, Any] = {}
    ui_counts = ("max_streams_per_session", "max_streams_per_user", "max_sessions_per_user")
    unknown_ui = set(ui) - {*ui_counts, "secure_cookie"}
    if unknown_ui:
        raise ConfigError(f"v2.ui: unknown keys {sorted(map(str, unknown_ui))}")
    for key in ui_counts:
        if key in ui:
            kw[f"ui_{key}"] = int(number(ui[key], f"v2.ui.{key}", minimum=0, integer=True))
    if "secure_cookie" in ui:
        kw["ui_secure_cookie"] = flag(ui["secure_cookie"], "v2.ui.secure_cookie")
    return kw


def _sqlite_settings(sqlite: Mapping[str, Any]) -> dict[str, Any]:
    """``v2.sqlite``: the database's path, durability and lease."""
    kw: dict[str, Any] = {}
    if sqlite.get("db_path"):
        kw["db_path"] = text(sqlite["db_path"], "v2.sqlite.db_path")
    if "synchronous" in sqlite:
        mode = text(sqlite["synchronous"], "v2.sqlite.synchronous").upper()
        if mode not in SYNCHRONOUS_MODES:
            raise ConfigError(f"v2.sqlite.synchronous: one of {', '.join(SYNCHRONOUS_MODES)}, "
                              f"got {sqlite['synchronous']!r}")
        kw["sqlite_synchronous"] = mode
    if "lease_ttl_s" in sqlite:
        kw["lease_ttl_s"] = float(number(sqlite["lease_ttl_s"], "v2.sqlite.lease_ttl_s", minimum=3))
    return kw


def _store_settings(store: Mapping[str, Any]) -> dict[str, Any]:
    """``v2.store``: which store (a URL) and its lease."""
    kw: dict[str, Any] = {}
    unknown = set(store) - {"url", "lease_ttl_s"}
    if unknown:
        raise ConfigError(f"v2.store: unknown keys {sorted(map(str, unknown))}")
    if url := store.get("url"):
        kw["store_url"] = Settings.checked_store_url(text(url, "v2.store.url"), "v2.store.url")
    if "lease_ttl_s" in store:
        kw["lease_ttl_s"] = float(number(store["lease_ttl_s"], "v2.store.lease_ttl_s",
                                         minimum=3))
    return kw


def _jobspec_settings(jobspec: Mapping[str, Any]) -> dict[str, Any]:
    """``v2.jobspec``: the roots a JobSpec may name, the body limit."""
    kw: dict[str, Any] = {}
    if "allowed_roots" in jobspec:
        roots = jobspec["allowed_roots"] or []
        if not isinstance(roots, list) or not all(
            isinstance(r, str) and os.path.isabs(r) for r in roots
        ):
            raise ConfigError("v2.jobspec.allowed_roots: must be a list of absolute paths")
        kw["allowed_roots"] = tuple(roots)
    if "max_body_bytes" in jobspec:
        kw["max_body_bytes"] = int(
            number(jobspec["max_body_bytes"], "v2.jobspec.max_body_bytes", minimum=1, integer=True)
        )
    return kw


def _verl_settings(verl: Mapping[str, Any]) -> dict[str, Any]:
    """``v2.verl``: the overrides every task of a workload gets."""
    kw: dict[str, Any] = {}
    if "default_overrides" in verl:
        dov = verl["default_overrides"] or {}
        if not isinstance(dov, Mapping) or set(dov) - set(WORKLOADS):
            raise ConfigError(f"v2.verl.default_overrides: a mapping with keys in {WORKLOADS}")
        merged = dict(DEFAULT_OVERRIDES)
        for wl, items in dov.items():
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ConfigError(f"v2.verl.default_overrides.{wl}: must be a list of strings")
            merged[wl] = tuple(items)
        kw["default_overrides"] = freeze(merged)
    return kw


# v2.webhooks numbers: key -> (minimum, integer)
_WEBHOOK_NUMBERS: dict[str, tuple[float, bool]] = {
    "max_per_user": (0, True), "timeout_s": (0.1, False), "concurrency": (1, True),
    "per_host": (1, True), "max_attempts": (1, True), "max_age_s": (1, False),
    "retry_base_s": (0.01, False), "retry_max_s": (0.01, False), "poll_s": (0.01, False),
    "keep_s": (60, False),
}


def _network(value: Any, where: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: must be a CIDR string such as 127.0.0.0/8, got {value!r}")
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _webhooks(raw: Mapping[str, Any]) -> WebhookSettings:
    unknown = set(raw) - {f.name for f in fields(WebhookSettings)}
    if unknown:
        raise ConfigError(f"v2.webhooks: unknown keys {sorted(map(str, unknown))}")
    out: dict[str, Any] = {}
    if "enabled" in raw:
        out["enabled"] = flag(raw["enabled"], "v2.webhooks.enabled")
    if "allow_networks" in raw:
        nets = raw["allow_networks"] or []
        if not isinstance(nets, list):
            raise ConfigError("v2.webhooks.allow_networks: must be a list of CIDRs")
        out["allow_networks"] = tuple(_network(v, f"v2.webhooks.allow_networks[{i}]")
                                      for i, v in enumerate(nets))
    out.update(numbers(raw, _WEBHOOK_NUMBERS, "v2.webhooks"))
    hooks = WebhookSettings(**out)
    if hooks.retry_max_s < hooks.retry_base_s:
        raise ConfigError("v2.webhooks.retry_max_s: must be >= retry_base_s")
    return hooks


def _head_json(value: Any, where: str) -> str:
    path = text(value, where)
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
    "ARGUS_STORE_URL": "store_url",
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
