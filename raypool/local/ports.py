"""Port blocks for ``--isolation ports``: nodes side by side on one IP, each with its own
block of consecutive Ray ports."""

from __future__ import annotations

import secrets
import socket

from raypool.local.state import LocalError

PORT_BLOCK = 48  # per node: 8 service ports + 40 worker ports
PORT_RANGE = (20000, 40000)


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
    low, high = PORT_RANGE
    for _ in range(200):
        base = low + secrets.randbelow(high - low - size)
        if not taken & set(range(base, base + size)) and _port_block_free(base, size):
            return base
    raise LocalError(f"no free block of ports found in {low}-{high}")


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
