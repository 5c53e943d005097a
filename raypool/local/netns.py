"""Network plumbing for ``--isolation netns`` (root): a private bridge on a free
``10.77.<n>.0/24`` (the host holds ``.1``, so it reaches the head's dashboard), and per node
a network namespace with a veth into that bridge. Removal is best effort: ``down`` must get
through a half-built cluster."""

from __future__ import annotations

import fcntl
import shutil
import subprocess

from raypool.local.state import LocalCluster, LocalError, LocalNode

LOCK_FILE = "/run/argus-local.lock"  # serialises subnet choice between launchers


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise LocalError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc


def _used_subnets() -> set[int]:
    out = _sh("ip", "-o", "-4", "addr", "show").stdout
    used = set()
    for word in out.split():
        if word.startswith("10.77."):
            used.add(int(word.split(".")[2]))
    return used


def setup_bridge(cluster: LocalCluster) -> None:
    """Pick a free subnet and create the cluster's bridge on it (recorded before it exists,
    so ``down`` removes it even if this fails half-way)."""
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


def setup_netns(cluster: LocalCluster, node: LocalNode) -> None:
    """The node's namespace: ``eth0`` with its IP, ``lo``, a default route via the bridge."""
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


def remove_netns(node: LocalNode) -> None:
    if node.netns:
        _sh("ip", "netns", "del", node.netns, check=False)
    if node.veth:
        _sh("ip", "link", "del", node.veth, check=False)


def remove_bridge(cluster: LocalCluster) -> None:
    if cluster.bridge:
        _sh("ip", "link", "del", cluster.bridge, check=False)
        drop_bridge_forwarding(cluster.bridge)
