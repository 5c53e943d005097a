"""Node settings: every ``ARGUS_*`` variable read once, validated, frozen.

A bad value never reaches a running process: :func:`load_node_settings` collects every
problem and raises one :class:`SettingsError` whose lines each name the variable and the
expected form; the CLI prints them and exits 2.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import os
import re
import shlex
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from raypool.healthpolicy import APPLICATION_XIDS

# api: a container that runs only the task service (raypool/apiservice.py), no Ray node:
# a second service instance beside the head's, on the same PostgreSQL (docs/image.md).
ROLES = ("head", "worker", "api")
GCS_STORES = ("rocksdb", "memory")
DEFAULT_CLUSTER_NAME = "argus-ray"
SOCKET_NAME = "supervisor.sock"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
NAME_FORM = "1-63 characters of [A-Za-z0-9_.-], starting alphanumeric"
# A node name: a DNS label (letters, digits, '-', and '_' which host names in labs carry),
# so it is a file name, a log directory, a Ray node name and a Ray label value as it is.
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$")
NODE_NAME_FORM = ("1-63 characters of [A-Za-z0-9_-], starting and ending alphanumeric "
                  "(a DNS label)")
# The Ray label that carries the node name (`ray start --labels`), so the service can map a
# Ray node id to the node: ray.nodes()[i]["Labels"]["argus.node"].
NODE_LABEL = "argus.node"
_LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.:-]{0,251}[A-Za-z0-9])?$")
# The raylet's own limit on a GCS that does not answer (RAY_gcs_rpc_server_reconnect_timeout_s)
# and the worker watchdog's budget for waiting on it: a head restart of the same cluster
# (embedded store) must fit inside it, with room for a slow container restart.
DEFAULT_GCS_RECONNECT_TIMEOUT_S = 300
DEFAULT_HEALTH_INTERVAL_S = 30.0
DEFAULT_HEALTH_TIMEOUT_S = 20.0
DEFAULT_HEALTH_MIN_FREE_GB = 1
FAKE_GPU_MODES = ("", "0", "1", "standin")
_RESOURCE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")
# Flags the watchdogs set themselves; passing them again in ARGUS_RAY_EXTRA_ARGS would make
# the node disagree with head.json or with its own health checks.
MANAGED_RAY_FLAGS = (
    "--head", "--address", "--block", "--port", "--node-ip-address", "--temp-dir",
    "--resources", "--num-gpus", "--num-cpus", "--dashboard-port", "--dashboard-host",
    "--node-name", "--labels-file",
)


class SettingsError(ValueError):
    """One or more ARGUS_* variables are invalid; ``problems`` holds one line each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid node settings:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class NodeSettings:
    role: str
    node_name: str
    shared_root: str
    cluster_name: str
    head_ip_file: str
    ray_port: int
    dashboard_port: int
    ttl_s: float
    refresh_s: float
    poll_s: float
    node_ip: str
    worker_resources: Mapping[str, float]
    ray_extra_args: tuple[str, ...]  # without --labels (merged into ray_labels)
    log_dir: str
    run_dir: str
    ray_temp_dir: str
    worker_num_gpus: int | None
    worker_num_cpus: int | None
    gcs_reconnect_timeout_s: int
    gcs_store: str
    gcs_store_dir: str
    head_host: str
    start_timeout_s: float
    unhealthy_s: float
    stop_timeout_s: float
    ray_labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # node health (raypool/nodehealth.py): 0 = off
    health_interval_s: float = DEFAULT_HEALTH_INTERVAL_S
    health_timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S
    health_min_free_bytes: int = DEFAULT_HEALTH_MIN_FREE_GB * 2**30
    health_cmd: tuple[str, ...] = ()
    health_ignore_xids: frozenset[int] = APPLICATION_XIDS
    fake_gpus: str = ""  # "" real GPUs, "1" fake (no nvidia-smi), "standin" fake + stand-in
    # the task service as a program of the head's supervisord (raypool/apiservice.py)
    api_config: str = ""  # ARGUS_API_CONFIG: "" = not run by the node
    api_repo: str = "/workspace/argus"
    api_token_env: str = "ARGUS_API_TOKEN"

    @property
    def node_tag(self) -> str:
        """Marker put in the environment of every process tree this node starts.

        Derived from the run dir, so two nodes on one host never share it.
        """
        return hashlib.sha1(os.path.abspath(self.run_dir).encode()).hexdigest()[:12]

    @property
    def node_log_dir(self) -> str:
        return os.path.join(self.log_dir, self.node_name)

    @property
    def node_manager_port(self) -> int | None:
        """``--node-manager-port`` from the extra args, used to tell nodes on one IP apart."""
        return _flag_int(self.ray_extra_args, "--node-manager-port")

    @property
    def generation_file(self) -> str:
        return os.path.join(self.run_dir, "head.generation.json")

    @property
    def health_file(self) -> str:
        """``<head.json's dir>/nodes/<node>.health.json``: beside head.json on the shared
        root, one file per node, read by the task service."""
        return os.path.join(os.path.dirname(self.head_ip_file), "nodes",
                            f"{self.node_name}.health.json")

    @property
    def offered_gpus(self) -> int | None:
        """The GPUs this node offers Ray: none on the head, ``ARGUS_WORKER_NUM_GPUS`` on a
        worker (None: Ray's autodetection, then the GCS tells)."""
        return 0 if self.role == "head" else self.worker_num_gpus

    @property
    def gcs_store_lock(self) -> str:
        """The lock file a head holds while it may open the store (next to it, not in it:
        a wipe removes the store, never the lock another head may hold)."""
        return self.gcs_store_dir.rstrip("/") + ".lock"

    @property
    def job_server_url(self) -> str:
        return f"http://{_url_host(self.node_ip)}:{self.dashboard_port}"


def _url_host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def _flag_int(args: tuple[str, ...], flag: str) -> int | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        else:
            continue
        return int(value) if value.isdigit() else None
    return None


def is_valid_node_name(value: str) -> bool:
    return bool(_NODE_NAME_RE.match(value))


def parse_labels(text: str) -> dict[str, str]:
    """Ray's ``--labels`` form ``k1=v1,k2=v2`` (keys may carry a ``prefix/``); ValueError
    when an item is not one. ``argus.node`` is Argus's own and refused."""
    labels: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key, value = key.strip(), value.strip()
        name = key.rsplit("/", 1)[-1]
        if not sep or not _LABEL_RE.match(name) or (value and not _LABEL_RE.match(value)):
            raise ValueError(f"bad label {item.strip()!r} (key=value, Kubernetes label syntax)")
        if key == NODE_LABEL:
            raise ValueError(f"{NODE_LABEL} is set by Argus (ARGUS_NODE_NAME)")
        labels[key] = value
    return labels


def _extra_labels(args: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """``--labels`` taken out of the extra args: (the other args, its value or None)."""
    rest: list[str] = []
    value: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--labels" and i + 1 < len(args):
            value = args[i + 1]
            i += 2
            continue
        if arg.startswith("--labels="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return tuple(rest), value


def ray_identity_args(settings: NodeSettings) -> list[str]:
    """What ``ray start`` gets to name the node: ``--node-name`` (``ray.nodes()``'s
    ``NodeName``, the state API's ``node_name``) and ``--labels`` with ``argus.node=<name>``
    merged into any labels of ``ARGUS_RAY_EXTRA_ARGS`` (Ray keeps only the last
    ``--labels``). One argv element each: no shell sees them."""
    labels = {**settings.ray_labels, NODE_LABEL: settings.node_name}
    joined = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return [f"--node-name={settings.node_name}", f"--labels={joined}"]


def is_valid_name(value: str) -> bool:
    """A node or cluster name: it becomes a log directory and a path component."""
    return bool(_NAME_RE.match(value))


class _Reader:
    """Reads variables and records problems instead of failing on the first one."""

    def __init__(self, env: Mapping[str, str]):
        self.env = env
        self.problems: list[str] = []

    def raw(self, name: str, default: str = "") -> str:
        value = self.env.get(name, "")
        return value.strip() if value.strip() else default

    def bad(self, name: str, value: str, expected: str) -> None:
        self.problems.append(f"{name}={value!r}: expected {expected}")

    def choice(self, name: str, choices: tuple[str, ...], default: str = "") -> str:
        value = self.raw(name, default)
        if value not in choices:
            self.bad(name, value, "one of " + "|".join(choices)
                     + (f" (default {default})" if default else " (required)"))
        return value

    def name(self, name: str, default: str) -> str:
        value = self.raw(name, default)
        if not is_valid_name(value):
            self.bad(name, value, NAME_FORM)
        return value

    def path(self, name: str, default: str) -> str:
        """An absolute path; ``default`` (derived from another variable) is not re-checked."""
        value = self.raw(name, default)
        explicit = bool(self.raw(name))  # a bad derived default was reported for its base
        if explicit and (not os.path.isabs(value) or any(ord(c) < 32 for c in value)):
            self.bad(name, value, "an absolute path without control characters")
        return os.path.normpath(value) if os.path.isabs(value) else value

    def port(self, name: str, default: int) -> int:
        value = self.raw(name, str(default))
        if not value.isdigit() or not 1 <= int(value) <= 65535:
            self.bad(name, value, "a TCP port 1..65535")
            return default
        return int(value)

    def seconds(self, name: str, default: float, *, minimum: float = 0.0) -> float:
        value = self.raw(name, str(default))
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number <= minimum:
            self.bad(name, value, f"a number of seconds > {minimum:g}")
            return default
        return number

    def count(self, name: str) -> int | None:
        value = self.raw(name)
        if not value:
            return None
        if not value.isdigit():
            self.bad(name, value, "an integer >= 0, or empty for Ray's autodetection")
            return None
        return int(value)


def _api_settings(r: _Reader, role: str) -> dict[str, str]:
    """``ARGUS_API_CONFIG`` (the service's config, relative to ``ARGUS_API_REPO``) makes the
    head's supervisord run the task service; the role ``api`` runs nothing else and needs
    it. Its token is checked by ``argus-node run`` alone (``raypool/apiservice.py``): the
    programs read these settings after the token left the environment."""
    config = r.raw("ARGUS_API_CONFIG")
    repo = r.path("ARGUS_API_REPO", "/workspace/argus")
    token_env = r.raw("ARGUS_API_TOKEN_ENV", "ARGUS_API_TOKEN")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token_env):
        r.bad("ARGUS_API_TOKEN_ENV", token_env, "an environment variable name")
    if config and role == "worker":
        r.bad("ARGUS_API_CONFIG", config, "unset on a worker (the head runs the task service)")
    elif not config and role == "api":
        r.bad("ARGUS_API_CONFIG", config, "the service's config with ARGUS_ROLE=api (the "
              "role runs the task service and nothing else)")
    elif config and any(ord(c) < 32 for c in config):
        r.bad("ARGUS_API_CONFIG", config, "a path without control characters")
    return {"api_config": config, "api_repo": repo, "api_token_env": token_env}


def _health_settings(r: _Reader) -> dict[str, object]:
    out: dict[str, object] = {}
    for var, key, default in (("ARGUS_HEALTH_INTERVAL_S", "health_interval_s",
                               DEFAULT_HEALTH_INTERVAL_S),
                              ("ARGUS_HEALTH_MIN_FREE_GB", "health_min_free_bytes",
                               float(DEFAULT_HEALTH_MIN_FREE_GB))):
        value = r.raw(var, f"{default:g}")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < 0:
            r.bad(var, value, "a number >= 0 (0 = off)")
            number = default
        out[key] = int(number * 2**30) if key == "health_min_free_bytes" else number
    out["health_timeout_s"] = r.seconds("ARGUS_HEALTH_TIMEOUT_S", DEFAULT_HEALTH_TIMEOUT_S)
    cmd = r.raw("ARGUS_HEALTH_CMD")
    try:
        out["health_cmd"] = tuple(shlex.split(cmd))
    except ValueError as exc:
        r.bad("ARGUS_HEALTH_CMD", cmd, f"a command as shell-style words ({exc})")
        out["health_cmd"] = ()
    ignore = r.raw("ARGUS_HEALTH_IGNORE_XIDS", ",".join(map(str, sorted(APPLICATION_XIDS))))
    words = [w.strip() for w in ignore.split(",") if w.strip()]
    if ignore.strip() == "none":
        words = []
    if not all(w.isdigit() for w in words):
        r.bad("ARGUS_HEALTH_IGNORE_XIDS", ignore, "a comma list of XID numbers, or none")
        words = [str(x) for x in APPLICATION_XIDS]
    out["health_ignore_xids"] = frozenset(int(w) for w in words)
    fake = r.raw("ARGUS_FAKE_GPUS")
    if fake not in FAKE_GPU_MODES:
        r.bad("ARGUS_FAKE_GPUS", fake, "empty or 0 (real GPUs), 1 (fake GPUs, no nvidia-smi) "
                                       "or standin (fake GPUs, the stand-in nvidia-smi)")
    out["fake_gpus"] = "" if fake in ("", "0") or fake not in FAKE_GPU_MODES else fake
    return out


def parse_resources_kv(text: str) -> dict[str, float]:
    """``worker_node=100,ssd=1.5`` -> ``{"worker_node": 100.0, "ssd": 1.5}``; ValueError if bad."""
    resources: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not _RESOURCE_RE.match(key):
            raise ValueError(f"bad item {item.strip()!r}")
        if key in ("CPU", "GPU", "memory", "object_store_memory"):
            raise ValueError(f"{key} is set through ARGUS_WORKER_NUM_CPUS/GPUS or by Ray")
        if key in resources:
            raise ValueError(f"duplicate key {key!r}")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"value of {key!r} is not a number") from None
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"value of {key!r} must be a finite number >= 0")
        resources[key] = number
    return resources


def _split_extra_args(reader: _Reader) -> tuple[str, ...]:
    name = "ARGUS_RAY_EXTRA_ARGS"
    text = reader.raw(name)
    try:
        args = tuple(shlex.split(text))
    except ValueError as exc:
        reader.bad(name, text, f"shell-style words ({exc})")
        return ()
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in MANAGED_RAY_FLAGS:
            reader.bad(name, text, f"extra ray start flags other than {flag}, which Argus sets")
    return args


def _split_labels(reader: _Reader, args: tuple[str, ...]
                  ) -> tuple[tuple[str, ...], dict[str, str]]:
    rest, value = _extra_labels(args)
    if value is None:
        return rest, {}
    try:
        return rest, parse_labels(value)
    except ValueError as exc:
        reader.bad("ARGUS_RAY_EXTRA_ARGS", reader.raw("ARGUS_RAY_EXTRA_ARGS"),
                   f"--labels as key=value,... ({exc})")
        return rest, {}


# --- node IP detection -------------------------------------------------------------------

def _ip_by_route(target: str = "8.8.8.8") -> str | None:
    """Source address the kernel would use towards ``target``; a UDP connect sends nothing."""
    family = socket.AF_INET6 if ":" in target else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((target, 9))
        except OSError:
            return None
        return sock.getsockname()[0]


def _ip_by_hostname_i() -> str | None:
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.stdout.split()
    return words[0] if out.returncode == 0 and words else None


def _ip_by_getaddrinfo() -> str | None:
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        return None
    return infos[0][4][0] if infos else None


DEFAULT_IP_STRATEGIES: tuple[Callable[[], str | None], ...] = (
    _ip_by_route, _ip_by_hostname_i, _ip_by_getaddrinfo,
)


def detect_node_ip(strategies: tuple[Callable[[], str | None], ...] = DEFAULT_IP_STRATEGIES
                   ) -> str:
    """First non-loopback address any strategy finds; 127.0.0.1 when none does."""
    for strategy in strategies:
        ip = strategy()
        if ip and not ipaddress.ip_address(ip).is_loopback:
            return ip
    return "127.0.0.1"


def load_node_settings(env: Mapping[str, str] | None = None,
                       detect_ip: Callable[[], str] = detect_node_ip) -> NodeSettings:
    """Build NodeSettings from ``env`` (default: ``os.environ``); SettingsError if invalid."""
    r = _Reader(os.environ if env is None else env)
    role = r.choice("ARGUS_ROLE", ROLES)
    shared_root = r.path("ARGUS_SHARED_ROOT", "/private")
    cluster_name = r.name("ARGUS_CLUSTER_NAME", DEFAULT_CLUSTER_NAME)
    head_ip_file = r.path("ARGUS_HEAD_IP_FILE", os.path.join(
        shared_root, "ray", "discovery", cluster_name, "head.json"))
    ray_port = r.port("ARGUS_RAY_PORT", 6379)
    dashboard_port = r.port("ARGUS_DASHBOARD_PORT", 8265)
    if ray_port == dashboard_port:
        r.bad("ARGUS_DASHBOARD_PORT", str(dashboard_port), "a port different from ARGUS_RAY_PORT")
    ttl_s = r.seconds("ARGUS_TTL_S", 60)
    refresh_s = r.seconds("ARGUS_REFRESH_S", 10)
    if refresh_s >= ttl_s:
        r.bad("ARGUS_REFRESH_S", r.raw("ARGUS_REFRESH_S", "10"),
              f"a refresh interval shorter than ARGUS_TTL_S ({ttl_s:g})")
    poll_s = r.seconds("ARGUS_POLL_S", 5)

    node_ip = r.raw("ARGUS_NODE_IP")
    if node_ip:
        try:
            ipaddress.ip_address(node_ip)
        except ValueError:
            r.bad("ARGUS_NODE_IP", node_ip, "an IPv4/IPv6 address, or empty to auto-detect")
    else:
        node_ip = detect_ip()

    resources: dict[str, float] = {}
    kv = r.raw("ARGUS_WORKER_RESOURCES_KV", "worker_node=100")
    try:
        resources = parse_resources_kv(kv)
    except ValueError as exc:
        r.bad("ARGUS_WORKER_RESOURCES_KV", kv, f"a comma list of name=number ({exc})")

    gcs_timeout = r.raw("ARGUS_GCS_RECONNECT_TIMEOUT_S", str(DEFAULT_GCS_RECONNECT_TIMEOUT_S))
    if not gcs_timeout.isdigit() or int(gcs_timeout) < 1:
        r.bad("ARGUS_GCS_RECONNECT_TIMEOUT_S", gcs_timeout, "an integer number of seconds >= 1")
        gcs_timeout = str(DEFAULT_GCS_RECONNECT_TIMEOUT_S)
    head_host = r.raw("ARGUS_HEAD_HOST")
    if head_host and not _HOST_RE.match(head_host):
        r.bad("ARGUS_HEAD_HOST", head_host, "a DNS name or an IP address, or empty")

    node_name = r.raw("ARGUS_NODE_NAME", socket.gethostname().split(".")[0] or "node")
    if not is_valid_node_name(node_name):
        default = "" if r.raw("ARGUS_NODE_NAME") else " (the host name: set ARGUS_NODE_NAME)"
        r.bad("ARGUS_NODE_NAME", node_name, NODE_NAME_FORM + default)
    extra_args, labels = _split_labels(r, _split_extra_args(r))

    settings = NodeSettings(
        role=role,
        node_name=node_name,
        shared_root=shared_root,
        cluster_name=cluster_name,
        head_ip_file=head_ip_file,
        ray_port=ray_port,
        dashboard_port=dashboard_port,
        ttl_s=ttl_s,
        refresh_s=refresh_s,
        poll_s=poll_s,
        node_ip=node_ip,
        worker_resources=MappingProxyType(resources),
        ray_extra_args=extra_args,
        log_dir=r.path("ARGUS_LOG_DIR", os.path.join(shared_root, "common", "logs")),
        run_dir=r.path("ARGUS_RUN_DIR", "/run/argus-node"),
        ray_temp_dir=r.path("ARGUS_RAY_TEMP_DIR", "/tmp/ray"),
        worker_num_gpus=r.count("ARGUS_WORKER_NUM_GPUS"),
        worker_num_cpus=r.count("ARGUS_WORKER_NUM_CPUS"),
        gcs_reconnect_timeout_s=int(gcs_timeout),
        gcs_store=r.choice("ARGUS_GCS_STORE", GCS_STORES, default="rocksdb"),
        gcs_store_dir=r.path("ARGUS_GCS_STORE_DIR", os.path.join(
            shared_root, "ray", "gcs", cluster_name)),
        head_host=head_host,
        start_timeout_s=r.seconds("ARGUS_START_TIMEOUT_S", 60),
        unhealthy_s=r.seconds("ARGUS_UNHEALTHY_S", 10),
        stop_timeout_s=r.seconds("ARGUS_STOP_TIMEOUT_S", 10),
        ray_labels=MappingProxyType(labels),
        **_health_settings(r),  # type: ignore[arg-type]
        **_api_settings(r, role),
    )
    if len(os.path.join(settings.run_dir, SOCKET_NAME)) > 100:
        r.bad("ARGUS_RUN_DIR", settings.run_dir,
              "a path short enough for a unix socket (under 80 characters)")
    if r.problems:
        raise SettingsError(r.problems)
    return settings
