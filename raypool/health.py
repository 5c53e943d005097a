"""Health checks against a Ray GCS, in-process.

Measured on this host (Ray 2.60): ``ray health-check --address`` costs ~1.1 s (a Python
interpreter and Ray import per call); an in-process ``GcsClient`` costs ~7 ms to build and
<1 ms per ``check_alive`` / ``get_all_node_info``. But a ``GcsClient`` call towards a
dead GCS blocks ~40 s fetching the cluster id, whatever timeout is passed. So every check
first probes the TCP port (refused/unreachable answers at once), and the RPC itself runs
in a daemon thread with a deadline: a hung call is abandoned and reported unhealthy.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

ALIVE = 0  # GcsNodeInfo.state value for ALIVE


class HealthError(RuntimeError):
    """The GCS did not answer in time, or answered with an error."""


@dataclass(frozen=True)
class NodeView:
    node_id: str
    ip: str
    node_manager_port: int
    alive: bool
    is_head: bool
    resources: dict[str, float]
    start_time_s: float = 0.0
    node_name: str = ""  # `ray start --node-name` (ARGUS_NODE_NAME)
    labels: dict[str, str] = field(default_factory=dict)


def tcp_open(host: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _with_deadline(fn: Callable[[], T], timeout_s: float) -> T:
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except Exception as exc:  # reported to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, name="gcs-rpc", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise HealthError(f"GCS call did not return within {timeout_s:g}s")
    if "error" in box:
        raise HealthError(f"GCS call failed: {box['error']}")
    return box["value"]  # type: ignore[return-value]


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def gcs_alive(address: str, timeout_s: float = 3.0) -> bool:
    """True when the GCS at ``host:port`` answers ``check_alive`` within ``timeout_s``."""
    host, port = _split(address)
    if not tcp_open(host, port, min(1.0, timeout_s)):
        return False

    def call() -> None:
        from ray._raylet import GcsClient

        GcsClient(address=address).check_alive([], timeout=timeout_s)

    try:
        _with_deadline(call, timeout_s)
    except HealthError:
        return False
    return True


def cluster_id(address: str, timeout_s: float = 3.0) -> str:
    """The Ray cluster id the GCS at ``address`` serves (hex); HealthError when silent.

    With the embedded store it is persisted: a restarted GCS serves the same id."""
    host, port = _split(address)
    if not tcp_open(host, port, min(1.0, timeout_s)):
        raise HealthError(f"GCS port {address} is not open")

    def call() -> str:
        from ray._raylet import GcsClient

        return GcsClient(address=address).cluster_id.hex()

    return _with_deadline(call, timeout_s)


def list_nodes(address: str, timeout_s: float = 3.0) -> list[NodeView]:
    """Every node the GCS knows (alive or dead); HealthError when it does not answer."""
    host, port = _split(address)
    if not tcp_open(host, port, min(1.0, timeout_s)):
        raise HealthError(f"GCS port {address} is not open")

    def call() -> list[NodeView]:
        from ray._raylet import GcsClient

        infos = GcsClient(address=address).get_all_node_info(timeout=timeout_s)
        return [
            NodeView(
                node_id=info.node_id.hex(),
                ip=info.node_manager_address,
                node_manager_port=info.node_manager_port,
                alive=info.state == ALIVE,
                is_head=info.is_head_node,
                resources=dict(info.resources_total),
                start_time_s=info.start_time_ms / 1000.0,
                node_name=info.node_name,
                labels=dict(info.labels),
            )
            for info in infos.values()
        ]

    return _with_deadline(call, timeout_s)


def is_registered(nodes: list[NodeView], ip: str, node_manager_port: int | None,
                  started_after: float | None = None) -> bool:
    """Is a node with this IP (and node-manager port, when fixed) alive and not the head?

    ``started_after`` (epoch s) counts only a node started since then: a raylet of this
    host that was SIGKILLed stays "alive" in the GCS until its health checks fail, and must
    not pass for the one a new ``ray start`` is still bringing up."""
    return any(
        n.alive and not n.is_head and n.ip == ip
        and (node_manager_port is None or n.node_manager_port == node_manager_port)
        and (started_after is None or n.start_time_s >= started_after)
        for n in nodes
    )


def alive_workers(nodes: list[NodeView], resource: str = "worker_node") -> list[NodeView]:
    return [n for n in nodes if n.alive and n.resources.get(resource, 0) > 0]


def node_by_name(nodes: list[NodeView], name: str, label: str = "argus.node"
                 ) -> NodeView | None:
    """The node Ray knows under this Argus node name (its ``argus.node`` label, else its
    node name): the alive one started last, else the dead one started last; None if none.
    A restarted raylet is a new Ray node under the same name; the old one stays dead."""
    named = [n for n in nodes if n.labels.get(label, n.node_name) == name]
    if not named:
        return None
    return max(named, key=lambda n: (n.alive, n.start_time_s))
