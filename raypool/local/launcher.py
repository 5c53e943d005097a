"""``argus-node local``: one head and N workers on this host, each a real ``argus-node run``
(supervisord + watchdogs, the image's code path) with its own run dir, log dir and env.

Isolation modes:

* ``ports``: nodes side by side on the host IP, each with its own block of Ray ports
  (:mod:`raypool.local.ports`), one shared Ray temp dir (separate temp dirs break
  ``get_job_logs``), started one after another (Ray nodes on one host must not start at
  once). Works next to other Ray clusters on the host. ``ray stop`` cannot be aimed at
  one node in this mode. Each node runs in a PID namespace of its own where the host
  allows it (root, or unprivileged user namespaces): a job driver finds its raylet by
  scanning the processes it can see and, when it sees several, prefers the head's — with
  every node visible a driver on a worker would register with the head's raylet and its
  actors would die with the head. Distinct IPs do not help: the driver does not filter
  by its own address.
* ``netns`` (root): one network namespace per node, a veth into a private bridge
  (:mod:`raypool.local.netns`), each node run under ``unshare --pid --fork --mount-proc``
  so supervisord is PID 1 of its node (orphans are re-parented to it, as in a container)
  and ``ray stop`` inside one node only sees that node. Ray temp dirs are distinct per node
  (each node is its own "host").

Everything the launcher creates is written to ``<state dir>/local.json``
(:mod:`raypool.local.state`); ``down`` undoes exactly that and checks that no process
carrying a node tag is left. The command line is in :mod:`raypool.local.cli`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import psutil

from raypool import discovery
from raypool.config import DEFAULT_CLUSTER_NAME, NAME_FORM, detect_node_ip, is_valid_name
from raypool.deadline import Deadline, Sleep, poll
from raypool.gcsstore import wipe
from raypool.headrecord import HeadRecord
from raypool.health import HealthError, alive_workers, list_nodes
from raypool.local.netns import remove_bridge, remove_netns, setup_bridge, setup_netns
from raypool.local.ports import PORT_BLOCK, free_port_block, port_args
from raypool.local.state import STATE_FILE, LocalCluster, LocalError, LocalNode
from raypool.procs import NODE_TAG_ENV, RAY_TAG_ENV, tagged_processes

OBJECT_STORE_BYTES = 256 * 1024 * 1024
POLL_S = 0.5
HEALTH_TIMEOUT_S = 2.0
SUPERVISORD_START_S = 10.0  # the launcher's child becomes or forks supervisord by then
KILL_REAP_S = 5.0           # the end of a stop, kept for reaping what is SIGKILLed
STOP_TIMEOUT_S = 40.0 + KILL_REAP_S  # a node's supervisord stops its programs in order


# --- nodes -------------------------------------------------------------------------------

def _base_env(cluster: LocalCluster, name: str, role: str, ip: str) -> dict[str, str]:
    opts = cluster.options
    env = {
        "ARGUS_ROLE": role, "ARGUS_NODE_NAME": name,
        "ARGUS_SHARED_ROOT": os.path.join(cluster.state_dir, "shared"),
        "ARGUS_CLUSTER_NAME": cluster.cluster_name, "ARGUS_HEAD_IP_FILE": cluster.head_file,
        "ARGUS_RUN_DIR": os.path.join(cluster.state_dir, name),
        "ARGUS_NODE_IP": ip, "ARGUS_TTL_S": opts["ttl_s"], "ARGUS_REFRESH_S": opts["refresh_s"],
        "ARGUS_POLL_S": opts["poll_s"], "ARGUS_WORKER_NUM_GPUS": opts["gpus"],
        "ARGUS_WORKER_NUM_CPUS": opts["cpus"], "ARGUS_WORKER_RESOURCES_KV": "worker_node=100",
        "ARGUS_START_TIMEOUT_S": "60", "ARGUS_UNHEALTHY_S": opts["unhealthy_s"],
        "ARGUS_STOP_TIMEOUT_S": "5",
        # fake GPUs: the health checks run against the stand-in nvidia-smi, where a test
        # plants a fault in <run dir>/standin-gpu-faults.json
        "ARGUS_FAKE_GPUS": "standin",
    }
    if cluster.isolation == "ports":
        env["ARGUS_RAY_TEMP_DIR"] = cluster.ray_temp_root
    else:
        env["ARGUS_RAY_TEMP_DIR"] = os.path.join(cluster.ray_temp_root, name)
    return env


def _make_node(cluster: LocalCluster, name: str, role: str, index: int,
               taken_ports: set[int]) -> LocalNode:
    """Plan one node: ``index`` is its host number in the subnet (netns); in ports mode a
    free port block outside ``taken_ports`` is chosen and added to it."""
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
    if not 2 <= index <= 254:
        raise LocalError(f"no host address left in {cluster.subnet}.0/24 for node {name}")
    ip = f"{cluster.subnet}.{index}"
    env = _base_env(cluster, name, role, ip)
    env["ARGUS_RAY_EXTRA_ARGS"] = " ".join(extra)
    return LocalNode(name, role, ip, env, netns=f"ar{cluster.cluster_id}-{name}",
                     veth=f"arv{cluster.cluster_id}{index}")


def _supervisord_of(pid: int, deadline: Deadline, sleep: Sleep) -> int | None:
    """The supervisord the launcher's child became or forked (netns: unshare's child);
    None when the child exits first or the deadline passes."""
    while True:
        try:
            proc = psutil.Process(pid)
            for candidate in [proc, *proc.children(recursive=True)]:
                if "supervisord" in " ".join(candidate.cmdline()):
                    return candidate.pid
        except psutil.Error:
            return None
        if deadline.passed():
            return None
        sleep(deadline.left(cap=0.1))


UNSHARE_PID = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
UNSHARE_USER = ("--user", "--map-root-user")


def pid_namespace_mode(is_root: bool, probe: Callable[[list[str]], bool]) -> str:
    """How ports-mode nodes get their own PID namespace: ``root`` (plain unshare),
    ``user`` (through a user namespace, when the host allows it unprivileged), or ``""``
    (not possible: drivers may then register with the head's raylet)."""
    if not shutil.which("unshare"):
        return ""
    if is_root:
        return "root"
    user = [UNSHARE_PID[0], *UNSHARE_USER, *UNSHARE_PID[1:], "true"]
    return "user" if probe(user) else ""


def _probe(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def launch_argv(cluster: LocalCluster, node: LocalNode, argv: list[str]) -> list[str]:
    """``argv`` wrapped for the node's isolation: its network namespace and PID namespace
    (netns), or its PID namespace alone (ports, when the host allows it)."""
    if node.netns:
        return ["ip", "netns", "exec", node.netns, *UNSHARE_PID, *argv]
    mode = cluster.options.get("pid_ns", "")
    if mode == "root":
        return [*UNSHARE_PID, *argv]
    if mode == "user":
        return [UNSHARE_PID[0], *UNSHARE_USER, *UNSHARE_PID[1:], *argv]
    return argv


def start_node(cluster: LocalCluster, node: LocalNode, deadline: Deadline | None = None,
               sleep: Sleep = time.sleep) -> None:
    """Start ``argus-node run`` for ``node`` (in its namespaces for netns mode); fail unless
    its supervisord is up by ``deadline`` (default: :data:`SUPERVISORD_START_S`)."""
    deadline = deadline or Deadline.after(SUPERVISORD_START_S)
    settings = node.settings
    os.makedirs(settings.run_dir, exist_ok=True)
    argv = launch_argv(cluster, node, [sys.executable, "-m", "raypool.cli", "run"])
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
    node.supervisord_pid = _supervisord_of(proc.pid, deadline, sleep)
    cluster.save()
    if node.supervisord_pid is None:
        raise LocalError(f"node {node.name}: supervisord did not start; see "
                         f"{settings.run_dir}/node.out")


# --- health ------------------------------------------------------------------------------

def healthy_record(cluster: LocalCluster, timeout_s: float = HEALTH_TIMEOUT_S
                   ) -> HeadRecord | None:
    """The record head.json holds now, if the GCS it names answers within ``timeout_s``."""
    record = discovery.read_record(cluster.head_file, cluster.cluster_name).record
    if record is None:
        return None
    try:
        list_nodes(record.gcs_address, timeout_s=timeout_s)
    except HealthError:
        return None
    return record


def wait_for_head(cluster: LocalCluster, deadline: Deadline,
                  accept: Callable[[HeadRecord], bool] | None = None,
                  sleep: Sleep = time.sleep) -> HeadRecord:
    """Poll until head.json names a head that answers (and that ``accept`` takes)."""
    def check() -> HeadRecord | None:
        record = healthy_record(cluster, deadline.left(cap=HEALTH_TIMEOUT_S))
        return record if record is not None and (accept is None or accept(record)) else None

    record = poll(check, deadline, POLL_S, sleep)
    if record is None:
        where = " at its new address" if accept else ""
        raise LocalError(f"the head did not publish a healthy record{where} "
                         f"within {deadline.length_s:g}s")
    return record


def count_workers(gcs_address: str) -> int:
    try:
        return len(alive_workers(list_nodes(gcs_address, timeout_s=HEALTH_TIMEOUT_S)))
    except HealthError:
        return -1


def workers_rejoined(cluster: LocalCluster, names: tuple[str, ...], since: float) -> bool:
    """Every worker of ``cluster`` alive on the head that head.json names now, and each of
    ``names`` registered anew after ``since`` (epoch s): a SIGKILLed raylet stays "alive"
    in the GCS until its health checks fail, so being listed is not enough."""
    record = discovery.read_record(cluster.head_file, cluster.cluster_name).record
    if record is None:
        return False
    try:
        workers = alive_workers(list_nodes(record.gcs_address, timeout_s=HEALTH_TIMEOUT_S))
    except HealthError:
        return False
    ips = {cluster.node(n).ip for n in names}
    fresh = {w.ip for w in workers if w.ip in ips and w.start_time_s >= since}
    expected = sum(node.role == "worker" for node in cluster.nodes)
    return len(workers) == expected and fresh == ips


def wait_for_workers(gcs_address: str, count: int, deadline: Deadline,
                     sleep: Sleep = time.sleep) -> None:
    def check() -> int | None:
        alive = count_workers(gcs_address)
        return alive if alive >= count else None

    if poll(check, deadline, POLL_S, sleep) is None:
        raise LocalError(f"fewer than {count} workers joined within {deadline.length_s:g}s")


# --- up ----------------------------------------------------------------------------------

def up(state_dir: str, workers: int, isolation: str, *,
       cluster_name: str = DEFAULT_CLUSTER_NAME, ttl_s: float = 10, refresh_s: float = 2,
       poll_s: float = 1, unhealthy_s: float = 5, gpus: int = 4, cpus: int = 16,
       timeout_s: float = 120) -> LocalCluster:
    """Start a head and ``workers`` workers. ``timeout_s`` bounds each step: the head
    publishing a healthy record, then each worker joining."""
    state_dir = os.path.abspath(state_dir)
    if os.path.exists(os.path.join(state_dir, STATE_FILE)):
        raise LocalError(f"{state_dir} already holds a local cluster; run `local down` first")
    if not is_valid_name(cluster_name):
        raise LocalError(f"cluster name {cluster_name!r}: expected {NAME_FORM}")
    if isolation == "netns" and (os.geteuid() != 0 or not shutil.which("ip")
                                 or not shutil.which("unshare")):
        raise LocalError("--isolation netns needs root, `ip` and `unshare`")
    os.makedirs(state_dir, exist_ok=True)
    cluster_id = secrets.token_hex(2)
    ray_temp_root = f"/tmp/ar-{secrets.token_hex(3)}"
    os.makedirs(ray_temp_root)
    cluster = LocalCluster(
        state_dir=state_dir, isolation=isolation, cluster_id=cluster_id,
        ray_temp_root=ray_temp_root, cluster_name=cluster_name,
        head_file=os.path.join(state_dir, "shared", "ray", "discovery", cluster_name,
                               "head.json"),
        options={"ttl_s": f"{ttl_s:g}", "refresh_s": f"{refresh_s:g}", "poll_s": f"{poll_s:g}",
                 "unhealthy_s": f"{unhealthy_s:g}", "gpus": str(gpus), "cpus": str(cpus),
                 "host_ip": detect_node_ip(),
                 "pid_ns": "" if isolation == "netns" else pid_namespace_mode(
                     os.geteuid() == 0, _probe)})
    cluster.save()
    try:
        if isolation == "netns":
            setup_bridge(cluster)
        taken: set[int] = set()
        specs = [("head", "head")] + [(f"w{i}", "worker") for i in range(1, workers + 1)]
        for index, (name, role) in enumerate(specs, start=2):
            cluster.nodes.append(_make_node(cluster, name, role, index, taken))
        cluster.save()
        for node in cluster.nodes:
            if node.netns:
                setup_netns(cluster, node)
        # `up` makes a new cluster: a GCS store left by an earlier one in this state dir
        # would bring back its dead nodes and jobs.
        wipe(cluster.nodes[0].settings)
        start_node(cluster, cluster.nodes[0])
        record = wait_for_head(cluster, Deadline.after(timeout_s))
        cluster.gcs_address, cluster.job_server_url = record.gcs_address, record.job_server_url
        cluster.save()
        for joined, node in enumerate(cluster.nodes[1:], start=1):
            # one after another: Ray nodes on one host must not start at the same time
            start_node(cluster, node)
            wait_for_workers(cluster.gcs_address, joined, Deadline.after(timeout_s))
    except BaseException:
        down(state_dir)
        raise
    return cluster


# --- down --------------------------------------------------------------------------------

def _exited(proc: psutil.Process, deadline: Deadline) -> bool:
    """Whether ``proc`` is gone or a zombie by ``deadline`` (a zombie is reaped when it is
    ours). The launcher's child (``unshare``, which forked supervisord) is a child of the
    process that ran ``up``: stopped from another process (``local move-head``, the fault
    scripts) it stays a zombie that only its parent can reap, and ``Process.wait`` would
    take it for alive until the deadline (a head move waited out the whole 45 s)."""
    def dead() -> bool | None:
        try:
            return True if proc.status() == psutil.STATUS_ZOMBIE else None
        except psutil.NoSuchProcess:
            return True

    if poll(dead, deadline, 0.05) is None:
        return False
    with contextlib.suppress(psutil.Error):
        proc.wait(0)  # reaps our own child; another's zombie stays for its parent
    return True


def stop_node(node: LocalNode, deadline: Deadline | None = None) -> None:
    """SIGTERM the node's supervisord (it stops its programs in order), then the process
    the launcher started; what has not exited :data:`KILL_REAP_S` before ``deadline``
    (default: :data:`STOP_TIMEOUT_S` from now) is SIGKILLed. Returns by the deadline."""
    deadline = deadline or Deadline.after(STOP_TIMEOUT_S)
    for pid in (node.supervisord_pid, node.pid):
        if pid is None:
            continue
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGTERM)
            if not _exited(proc, deadline.capped(max(0.0, deadline.left() - KILL_REAP_S))):
                proc.kill()
                _exited(proc, deadline)


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
        remove_netns(node)
    remove_bridge(cluster)
    shutil.rmtree(cluster.ray_temp_root, ignore_errors=True)
    os.unlink(cluster.state_file)
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
    record = discovery.read_record(cluster.head_file, cluster.cluster_name).record
    gcs = record.gcs_address if record else cluster.gcs_address
    return {"isolation": cluster.isolation, "cluster_name": cluster.cluster_name,
            "pid_namespaces": cluster.isolation == "netns" or bool(cluster.options.get("pid_ns")),
            "job_server_url": cluster.job_server_url, "head_file": cluster.head_file,
            "gcs_address": gcs, "alive_workers": count_workers(gcs), "nodes": nodes}


PROCESS_KINDS = {
    "supervisord": (NODE_TAG_ENV, "supervisord"),
    "watchdog": (NODE_TAG_ENV, "watchdog"),
    "publisher": (NODE_TAG_ENV, "head-publisher"),
    "health": (NODE_TAG_ENV, "node-health"),
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


def wipe_head_store(state_dir: str, timeout_s: float = 120) -> str:
    """A new cluster in place: stop the head, wipe its GCS store, start it again; returns
    the new cluster id once head.json names a healthy head with it. One deadline bounds
    the whole (stop, start, the wait for the record)."""
    deadline = Deadline.after(timeout_s)
    cluster = LocalCluster.load(os.path.abspath(state_dir))
    head = cluster.node("head")
    before = discovery.read_record(cluster.head_file, cluster.cluster_name).record
    old_id = before.cluster_id if before is not None else ""
    stop_node(head, deadline.capped(STOP_TIMEOUT_S))
    wipe(head.settings)
    start_node(cluster, head, deadline.capped(SUPERVISORD_START_S))
    record = wait_for_head(cluster, deadline,
                           lambda r: bool(r.cluster_id) and r.cluster_id != old_id)
    return record.cluster_id


def move_head(state_dir: str, timeout_s: float = 120, *,
              clock: Callable[[], float] = time.monotonic, sleep: Sleep = time.sleep) -> str:
    """Stop the head and start it again on a new IP (netns) or new ports; returns its GCS
    address. One deadline, ``timeout_s`` from the call, bounds the whole move: the stop,
    supervisord's start and the wait for head.json to name the new address."""
    deadline = Deadline.after(timeout_s, clock)
    cluster = LocalCluster.load(os.path.abspath(state_dir))
    head = cluster.node("head")
    stop_node(head, deadline.capped(STOP_TIMEOUT_S))
    if cluster.isolation == "netns":
        remove_netns(head)
        index = max(int(n.ip.rsplit(".", 1)[1]) for n in cluster.nodes) + 1
        moved = _make_node(cluster, "head", "head", index, set())
        moved.netns = f"ar{cluster.cluster_id}-head{index}"
        setup_netns(cluster, moved)
    else:
        taken = {port for node in cluster.nodes if node.port_base is not None
                 for port in range(node.port_base, node.port_base + PORT_BLOCK)}
        moved = _make_node(cluster, "head", "head", 0, taken)
    cluster.nodes[cluster.nodes.index(head)] = moved
    cluster.save()
    start_node(cluster, moved, deadline.capped(SUPERVISORD_START_S), sleep)
    want = (moved.ip, moved.settings.ray_port)
    record = wait_for_head(cluster, deadline, lambda r: (r.head_ip, r.gcs_port) == want, sleep)
    cluster.gcs_address = record.gcs_address
    cluster.job_server_url = record.job_server_url
    cluster.save()
    return record.gcs_address
