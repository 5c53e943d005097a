"""``argus-node local``: one head and N workers on this host, each a real ``argus-node run``
(supervisord + watchdogs, the image's code path) with its own run dir, log dir and env.

Isolation modes:

* ``ports``: nodes side by side on the host IP, each with its own block of Ray ports,
  one shared Ray temp dir (SPEC B2), started one after another. Works next to other Ray
  clusters on the host. ``ray stop`` cannot be aimed at one node in this mode.
* ``netns`` (root): one network namespace per node, a veth into a private bridge
  (10.77.<n>.0/24; the bridge holds .1 so the host reaches the head's dashboard), each
  node run under ``unshare --pid --fork --mount-proc`` so supervisord is PID 1 of its
  node (orphans are re-parented to it, as in a container) and ``ray stop`` inside one node
  only sees that node. Ray temp dirs are distinct per node (each node is its own "host").

Everything the launcher creates is written to ``<state dir>/local.json``; ``down`` undoes
exactly that and checks that no process carrying a node tag is left.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

import psutil

from raypool import discovery
from raypool.config import NodeSettings, detect_node_ip, load_node_settings
from raypool.health import HealthError, alive_workers, list_nodes
from raypool.procs import NODE_TAG_ENV, RAY_TAG_ENV, tagged_processes

STATE_FILE = "local.json"
LOCK_FILE = "/run/argus-local.lock"
PORT_BLOCK = 48  # per node in ports mode: 8 service ports + 40 worker ports
OBJECT_STORE_BYTES = 256 * 1024 * 1024


class LocalError(RuntimeError):
    """The launcher cannot do what was asked; the message says why."""


@dataclass
class LocalNode:
    name: str
    role: str
    ip: str
    env: dict[str, str]
    netns: str | None = None
    veth: str | None = None
    port_base: int | None = None     # ports mode: first port of this node's block
    pid: int | None = None           # the process the launcher started
    supervisord_pid: int | None = None

    @property
    def settings(self) -> NodeSettings:
        return load_node_settings(self.env)


@dataclass
class LocalCluster:
    state_dir: str
    isolation: str
    cluster_id: str
    ray_temp_root: str
    head_file: str
    gcs_address: str = ""
    job_server_url: str = ""
    bridge: str | None = None
    subnet: str | None = None        # "10.77.<n>"
    nodes: list[LocalNode] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)

    def save(self) -> None:
        path = os.path.join(self.state_dir, STATE_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump(asdict(self), f, indent=1)
        os.replace(path + ".tmp", path)

    @classmethod
    def load(cls, state_dir: str) -> LocalCluster:
        path = os.path.join(state_dir, STATE_FILE)
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            raise LocalError(f"no local cluster state at {path}") from None
        data["nodes"] = [LocalNode(**n) for n in data["nodes"]]
        return cls(**data)

    def node(self, name: str) -> LocalNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise LocalError(f"no node {name!r}; nodes: {', '.join(n.name for n in self.nodes)}")


# --- small effects -----------------------------------------------------------------------

def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise LocalError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc


def _port_block_free(base: int, size: int) -> bool:
    for port in range(base, base + size):
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                return False
    return True


def free_port_block(size: int, taken: set[int]) -> int:
    """Base of ``size`` consecutive free TCP ports in 20000-40000, avoiding ``taken``."""
    for _ in range(200):
        base = 20000 + secrets.randbelow(20000 - size)
        if not taken & set(range(base, base + size)) and _port_block_free(base, size):
            return base
    raise LocalError("no free block of ports found in 20000-40000")


def port_args(base: int) -> tuple[dict[str, int], list[str]]:
    """Ray ports for one node from a block: (head ports, extra ray start args)."""
    ports = {"gcs": base, "dashboard": base + 1}
    extra = [
        f"--node-manager-port={base + 2}", f"--object-manager-port={base + 3}",
        f"--metrics-export-port={base + 4}", f"--dashboard-agent-listen-port={base + 5}",
        f"--dashboard-agent-grpc-port={base + 6}", f"--runtime-env-agent-port={base + 7}",
        f"--min-worker-port={base + 8}", f"--max-worker-port={base + PORT_BLOCK - 1}",
    ]
    return ports, extra


def _used_subnets() -> set[int]:
    out = _sh("ip", "-o", "-4", "addr", "show").stdout
    used = set()
    for word in out.split():
        if word.startswith("10.77."):
            used.add(int(word.split(".")[2]))
    return used


def _supervisord_of(pid: int, timeout_s: float = 10.0) -> int | None:
    """The supervisord the launcher's child became or forked (netns: unshare's child)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            proc = psutil.Process(pid)
            for candidate in [proc, *proc.children(recursive=True)]:
                if "supervisord" in " ".join(candidate.cmdline()):
                    return candidate.pid
        except psutil.Error:
            return None
        time.sleep(0.1)
    return None


# --- up ----------------------------------------------------------------------------------

def _base_env(cluster: LocalCluster, name: str, role: str, ip: str) -> dict[str, str]:
    opts = cluster.options
    env = {
        "ARGUS_ROLE": role, "ARGUS_NODE_NAME": name,
        "ARGUS_SHARED_ROOT": os.path.join(cluster.state_dir, "shared"),
        "ARGUS_CLUSTER_NAME": "argus-ray", "ARGUS_HEAD_IP_FILE": cluster.head_file,
        "ARGUS_RUN_DIR": os.path.join(cluster.state_dir, name),
        "ARGUS_NODE_IP": ip, "ARGUS_TTL_S": opts["ttl_s"], "ARGUS_REFRESH_S": opts["refresh_s"],
        "ARGUS_POLL_S": opts["poll_s"], "ARGUS_WORKER_NUM_GPUS": opts["gpus"],
        "ARGUS_WORKER_NUM_CPUS": opts["cpus"], "ARGUS_WORKER_RESOURCES_KV": "worker_node=100",
        "ARGUS_START_TIMEOUT_S": "60", "ARGUS_UNHEALTHY_S": opts["unhealthy_s"],
        "ARGUS_STOP_TIMEOUT_S": "5",
    }
    if cluster.isolation == "ports":
        env["ARGUS_RAY_TEMP_DIR"] = cluster.ray_temp_root
    else:
        env["ARGUS_RAY_TEMP_DIR"] = os.path.join(cluster.ray_temp_root, name)
    return env


def _make_node(cluster: LocalCluster, name: str, role: str, index: int,
               taken_ports: set[int]) -> LocalNode:
    extra = [f"--object-store-memory={OBJECT_STORE_BYTES}"]
    if cluster.isolation == "ports":
        ip = cluster.options["host_ip"]
        base = free_port_block(PORT_BLOCK, taken_ports)
        taken_ports.update(range(base, base + PORT_BLOCK))
        ports, block_args = port_args(base)
        env = _base_env(cluster, name, role, ip)
        if role == "head":
            env["ARGUS_RAY_PORT"], env["ARGUS_DASHBOARD_PORT"] = (
                str(ports["gcs"]), str(ports["dashboard"]))
        extra += block_args
        env["ARGUS_RAY_EXTRA_ARGS"] = " ".join(extra)
        return LocalNode(name, role, ip, env, port_base=base)
    ip = f"{cluster.subnet}.{index}"
    env = _base_env(cluster, name, role, ip)
    env["ARGUS_RAY_EXTRA_ARGS"] = " ".join(extra)
    return LocalNode(name, role, ip, env, netns=f"ar{cluster.cluster_id}-{name}",
                     veth=f"arv{cluster.cluster_id}{index}")


def _setup_bridge(cluster: LocalCluster) -> None:
    with open(LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        used = _used_subnets()
        free = [n for n in range(1, 255) if n not in used]
        if not free:
            raise LocalError("no free 10.77.<n>.0/24 subnet")
        cluster.subnet = f"10.77.{free[0]}"
        cluster.bridge = f"arbr{cluster.cluster_id}"
        cluster.save()
        _sh("ip", "link", "add", cluster.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{cluster.subnet}.1/24", "dev", cluster.bridge)
        _sh("ip", "link", "set", cluster.bridge, "up")
        allow_bridge_forwarding(cluster.bridge)


def _forward_rule(bridge: str) -> list[str]:
    return ["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]


def allow_bridge_forwarding(bridge: str) -> None:
    """Let packets between the nodes on ``bridge`` through the host's FORWARD chain.

    With br_netfilter loaded, bridged packets go through iptables' FORWARD chain, and a
    Docker engine sets that chain's policy to DROP: without this rule no worker reaches
    the head. The rule names this cluster's bridge only, so removing it on ``down``
    (:func:`drop_bridge_forwarding`) touches nothing anyone else added. No iptables, no
    filtering to get through.
    """
    if shutil.which("iptables") is None:
        return
    rule = _forward_rule(bridge)
    if _sh("iptables", "-w", "-C", *rule, check=False).returncode != 0:
        _sh("iptables", "-w", "-I", *rule)


def drop_bridge_forwarding(bridge: str) -> None:
    if shutil.which("iptables") is None:
        return
    rule = _forward_rule(bridge)
    while _sh("iptables", "-w", "-C", *rule, check=False).returncode == 0:
        if _sh("iptables", "-w", "-D", *rule, check=False).returncode != 0:
            break


def _setup_netns(cluster: LocalCluster, node: LocalNode) -> None:
    assert node.netns and node.veth and cluster.bridge
    peer = node.veth + "p"
    _sh("ip", "netns", "add", node.netns)
    _sh("ip", "link", "add", node.veth, "type", "veth", "peer", "name", peer)
    _sh("ip", "link", "set", peer, "netns", node.netns)
    _sh("ip", "link", "set", node.veth, "master", cluster.bridge)
    _sh("ip", "link", "set", node.veth, "up")
    inns = ("ip", "netns", "exec", node.netns)
    _sh(*inns, "ip", "link", "set", peer, "name", "eth0")
    _sh(*inns, "ip", "addr", "add", f"{node.ip}/24", "dev", "eth0")
    _sh(*inns, "ip", "link", "set", "eth0", "up")
    _sh(*inns, "ip", "link", "set", "lo", "up")
    _sh(*inns, "ip", "route", "add", "default", "via", f"{cluster.subnet}.1")


def start_node(cluster: LocalCluster, node: LocalNode) -> None:
    """Start ``argus-node run`` for ``node`` (in its namespaces for netns mode)."""
    settings = node.settings  # validates the env before anything starts
    os.makedirs(settings.run_dir, exist_ok=True)
    argv = [sys.executable, "-m", "raypool.cli", "run"]
    if node.netns:
        argv = ["ip", "netns", "exec", node.netns, "unshare", "--pid", "--fork",
                "--mount-proc", "--kill-child", *argv]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ARGUS_", "RAY_"))}
    env.update(node.env)
    with open(os.path.join(settings.run_dir, "node.out"), "ab") as out:
        # The node's run dir as working directory, like a container's WORKDIR: job
        # drivers inherit it (verl's Hydra writes outputs/ into its cwd).
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=settings.run_dir)
    node.pid = proc.pid
    node.supervisord_pid = _supervisord_of(proc.pid)
    cluster.save()
    if node.supervisord_pid is None:
        raise LocalError(f"node {node.name}: supervisord did not start; see "
                         f"{settings.run_dir}/node.out")


def wait_for_head(cluster: LocalCluster, timeout_s: float) -> discovery.HeadRecord:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = discovery.read_record(cluster.head_file, "argus-ray").record
        if record is not None:
            try:
                list_nodes(record.gcs_address, timeout_s=2.0)
                return record
            except HealthError:
                pass
        time.sleep(0.5)
    raise LocalError(f"head did not publish a healthy record within {timeout_s:g}s")


def count_workers(gcs_address: str) -> int:
    try:
        return len(alive_workers(list_nodes(gcs_address, timeout_s=2.0)))
    except HealthError:
        return -1


def workers_rejoined(cluster: LocalCluster, names: tuple[str, ...], since: float) -> bool:
    """Every worker of ``cluster`` alive on the head that head.json names now, and each of
    ``names`` registered anew after ``since`` (epoch s): a SIGKILLed raylet stays "alive"
    in the GCS until its health checks fail, so being listed is not enough."""
    record = discovery.read_record(cluster.head_file, "argus-ray").record
    if record is None:
        return False
    try:
        workers = alive_workers(list_nodes(record.gcs_address, timeout_s=2.0))
    except HealthError:
        return False
    ips = {cluster.node(n).ip for n in names}
    fresh = {w.ip for w in workers if w.ip in ips and w.start_time_s >= since}
    expected = sum(node.role == "worker" for node in cluster.nodes)
    return len(workers) == expected and fresh == ips


def wait_for_workers(gcs_address: str, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if count_workers(gcs_address) >= count:
            return
        time.sleep(0.5)
    raise LocalError(f"fewer than {count} workers joined within {timeout_s:g}s")


def up(state_dir: str, workers: int, isolation: str, *, ttl_s: float = 10,
       refresh_s: float = 2, poll_s: float = 1, unhealthy_s: float = 5, gpus: int = 4,
       cpus: int = 16, timeout_s: float = 120) -> LocalCluster:
    state_dir = os.path.abspath(state_dir)
    if os.path.exists(os.path.join(state_dir, STATE_FILE)):
        raise LocalError(f"{state_dir} already holds a local cluster; run `local down` first")
    if isolation == "netns" and (os.geteuid() != 0 or not shutil.which("ip")
                                 or not shutil.which("unshare")):
        raise LocalError("--isolation netns needs root, `ip` and `unshare`")
    os.makedirs(state_dir, exist_ok=True)
    cluster_id = secrets.token_hex(2)
    ray_temp_root = f"/tmp/ar-{secrets.token_hex(3)}"
    os.makedirs(ray_temp_root)
    cluster = LocalCluster(
        state_dir=state_dir, isolation=isolation, cluster_id=cluster_id,
        ray_temp_root=ray_temp_root,
        head_file=os.path.join(state_dir, "shared", "ray", "discovery", "argus-ray",
                               "head.json"),
        options={"ttl_s": f"{ttl_s:g}", "refresh_s": f"{refresh_s:g}", "poll_s": f"{poll_s:g}",
                 "unhealthy_s": f"{unhealthy_s:g}", "gpus": str(gpus), "cpus": str(cpus),
                 "host_ip": detect_node_ip()})
    cluster.save()
    try:
        if isolation == "netns":
            _setup_bridge(cluster)
        taken: set[int] = set()
        specs = [("head", "head")] + [(f"w{i}", "worker") for i in range(1, workers + 1)]
        for index, (name, role) in enumerate(specs, start=2):
            cluster.nodes.append(_make_node(cluster, name, role, index, taken))
        cluster.save()
        for node in cluster.nodes:
            if node.netns:
                _setup_netns(cluster, node)
        start_node(cluster, cluster.nodes[0])
        record = wait_for_head(cluster, timeout_s)
        cluster.gcs_address, cluster.job_server_url = record.gcs_address, record.job_server_url
        cluster.save()
        for joined, node in enumerate(cluster.nodes[1:], start=1):
            start_node(cluster, node)  # one after another (SPEC B2)
            wait_for_workers(cluster.gcs_address, joined, timeout_s)
    except BaseException:
        down(state_dir)
        raise
    return cluster


# --- down --------------------------------------------------------------------------------

def stop_node(node: LocalNode, timeout_s: float = 40.0) -> None:
    for pid in (node.supervisord_pid, node.pid):
        if pid is None:
            continue
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except psutil.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def leftovers(cluster: LocalCluster) -> list[int]:
    pids: list[int] = []
    for node in cluster.nodes:
        tag = node.settings.node_tag
        pids += [p.pid for p in tagged_processes(NODE_TAG_ENV, tag)]
        pids += [p.pid for p in tagged_processes(RAY_TAG_ENV, tag)]
    return sorted(set(pids))


def down(state_dir: str) -> list[str]:
    """Stop and remove everything ``up`` created; returns problems found (empty = clean)."""
    cluster = LocalCluster.load(os.path.abspath(state_dir))
    for node in reversed(cluster.nodes):
        stop_node(node)
    problems = []
    left = leftovers(cluster)
    for pid in left:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    if left:
        problems.append(f"killed leftover tagged processes: {left}")
    if leftovers(cluster):
        problems.append(f"tagged processes survive SIGKILL: {leftovers(cluster)}")
    for node in cluster.nodes:
        if node.netns:
            _sh("ip", "netns", "del", node.netns, check=False)
        if node.veth:
            _sh("ip", "link", "del", node.veth, check=False)
    if cluster.bridge:
        _sh("ip", "link", "del", cluster.bridge, check=False)
        drop_bridge_forwarding(cluster.bridge)
    shutil.rmtree(cluster.ray_temp_root, ignore_errors=True)
    os.unlink(os.path.join(cluster.state_dir, STATE_FILE))
    return problems


# --- status / helpers for fault scripts --------------------------------------------------

def status(state_dir: str) -> dict[str, object]:
    cluster = LocalCluster.load(os.path.abspath(state_dir))
    nodes = {}
    for node in cluster.nodes:
        nodes[node.name] = {"role": node.role, "ip": node.ip, "netns": node.netns,
                            "run_dir": node.env["ARGUS_RUN_DIR"],
                            "supervisord_pid": node.supervisord_pid,
                            "running": node.supervisord_pid is not None
                            and psutil.pid_exists(node.supervisord_pid)}
    record = discovery.read_record(cluster.head_file, "argus-ray").record
    gcs = record.gcs_address if record else cluster.gcs_address
    return {"isolation": cluster.isolation, "job_server_url": cluster.job_server_url,
            "head_file": cluster.head_file,
            "gcs_address": gcs, "alive_workers": count_workers(gcs), "nodes": nodes}


PROCESS_KINDS = {
    "supervisord": (NODE_TAG_ENV, "supervisord"),
    "watchdog": (NODE_TAG_ENV, "watchdog"),
    "publisher": (NODE_TAG_ENV, "head-publisher"),
    "gcs": (RAY_TAG_ENV, "gcs_server"),
    "raylet": (RAY_TAG_ENV, "raylet"),
    "ray": (RAY_TAG_ENV, ""),
}


def node_pids(cluster: LocalCluster, name: str, kind: str) -> list[int]:
    """Host pids of one node's processes of a kind, found by tag (never by name alone)."""
    env_name, needle = PROCESS_KINDS[kind]
    tag = cluster.node(name).settings.node_tag
    pids = []
    for proc in tagged_processes(env_name, tag):
        with contextlib.suppress(psutil.Error):
            if needle in " ".join(proc.cmdline()):
                pids.append(proc.pid)
    return sorted(pids)


def exec_in_node(cluster: LocalCluster, name: str, command: list[str]) -> int:
    node = cluster.node(name)
    if not node.netns or node.supervisord_pid is None:
        raise LocalError("`local exec` needs a running node of an --isolation netns cluster "
                         "(in ports mode a command like `ray stop` would hit every node)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    env.update(node.env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    argv = ["nsenter", "-t", str(node.supervisord_pid), "-p", "-m", "-n", *command]
    return subprocess.run(argv, env=env).returncode


def move_head(state_dir: str, timeout_s: float = 120) -> str:
    """Stop the head and start it again on a new IP (netns) or new ports; returns address."""
    cluster = LocalCluster.load(os.path.abspath(state_dir))
    head = cluster.node("head")
    stop_node(head)
    if cluster.isolation == "netns":
        assert cluster.subnet
        _sh("ip", "netns", "del", head.netns or "", check=False)
        _sh("ip", "link", "del", head.veth or "", check=False)
        used = {int(n.ip.rsplit(".", 1)[1]) for n in cluster.nodes}
        index = max(used) + 1
        moved = _make_node(cluster, "head", "head", index, set())
        moved.netns = f"ar{cluster.cluster_id}-head{index}"
        _setup_netns(cluster, moved)
    else:
        taken = {port for node in cluster.nodes if node.port_base is not None
                 for port in range(node.port_base, node.port_base + PORT_BLOCK)}
        moved = _make_node(cluster, "head", "head", 0, taken)
    cluster.nodes[cluster.nodes.index(head)] = moved
    cluster.save()
    start_node(cluster, moved)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = wait_for_head(cluster, timeout_s)
        if record.head_ip == moved.ip and record.gcs_port == moved.settings.ray_port:
            cluster.gcs_address = record.gcs_address
            cluster.job_server_url = record.job_server_url
            cluster.save()
            return record.gcs_address
        time.sleep(0.5)
    raise LocalError("moved head did not publish its new address in time")


# --- argparse ----------------------------------------------------------------------------

def add_local_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    local = sub.add_parser("local", help="local multi-node launcher (quick start, tests)")
    lsub = local.add_subparsers(dest="local_command", required=True)
    default_dir = os.environ.get("ARGUS_LOCAL_DIR", "/tmp/argus-local")

    def with_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--state-dir", default=default_dir,
                       help="where state, run dirs, logs and head.json live "
                            "(default $ARGUS_LOCAL_DIR or /tmp/argus-local)")
        return p

    p = with_dir(lsub.add_parser("up", help="start a head and N workers; print the job URL"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--isolation", choices=("ports", "netns"), default="ports")
    p.add_argument("--gpus", type=int, default=4, help="fake GPUs per worker")
    p.add_argument("--cpus", type=int, default=16, help="CPUs per worker")
    p.add_argument("--ttl", type=float, default=10.0, help="head.json TTL seconds")
    p.add_argument("--timeout", type=float, default=120.0)
    p.set_defaults(func=_cmd_up)
    with_dir(lsub.add_parser("down", help="stop and remove everything `up` created")
             ).set_defaults(func=_cmd_down)
    p = with_dir(lsub.add_parser("status", help="nodes, addresses, alive workers"))
    p.set_defaults(func=_cmd_status)
    p = with_dir(lsub.add_parser("pids", help="host pids of one node's processes"))
    p.add_argument("node")
    p.add_argument("kind", choices=sorted(PROCESS_KINDS))
    p.set_defaults(func=_cmd_pids)
    p = with_dir(lsub.add_parser("exec", help="run a command inside a node (netns mode)"))
    p.add_argument("node")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_exec)
    p = with_dir(lsub.add_parser("move-head", help="restart the head on a new address"))
    p.set_defaults(func=_cmd_move_head)


def _guard(fn):  # type: ignore[no-untyped-def]
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except LocalError as exc:
            print(f"argus-node local: {exc}", file=sys.stderr)
            return 2
    return wrapped


@_guard
def _cmd_up(args: argparse.Namespace) -> int:
    if args.workers < 0 or args.gpus < 0 or args.cpus < 1:
        raise LocalError("--workers and --gpus must be >= 0, --cpus >= 1")
    cluster = up(args.state_dir, args.workers, args.isolation, ttl_s=args.ttl,
                 gpus=args.gpus, cpus=args.cpus, timeout_s=args.timeout)
    print(cluster.job_server_url)
    return 0


@_guard
def _cmd_down(args: argparse.Namespace) -> int:
    problems = down(args.state_dir)
    for problem in problems:
        print(f"argus-node local down: {problem}", file=sys.stderr)
    return 1 if problems else 0


@_guard
def _cmd_status(args: argparse.Namespace) -> int:
    print(json.dumps(status(args.state_dir), indent=1, sort_keys=True))
    return 0


@_guard
def _cmd_pids(args: argparse.Namespace) -> int:
    pids = node_pids(LocalCluster.load(os.path.abspath(args.state_dir)), args.node, args.kind)
    print("\n".join(map(str, pids)))
    return 0 if pids else 1


@_guard
def _cmd_exec(args: argparse.Namespace) -> int:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise LocalError("no command given")
    return exec_in_node(LocalCluster.load(os.path.abspath(args.state_dir)), args.node, command)


@_guard
def _cmd_move_head(args: argparse.Namespace) -> int:
    print(move_head(args.state_dir))
    return 0
