"""What ``argus-node local`` created, as kept in ``<state dir>/local.json``: every node with
its environment, namespace, veth, port block and pids, so ``down`` undoes exactly that."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from raypool.atomicfile import write_atomic
from raypool.config import DEFAULT_CLUSTER_NAME, NodeSettings, SettingsError, load_node_settings

STATE_FILE = "local.json"


class LocalError(RuntimeError):
    """The launcher cannot do what was asked; the message says why."""


@dataclass
class LocalNode:
    """One node; ``env`` (its ARGUS_* variables) is fixed at construction and parsed then,
    once: a node with invalid settings cannot exist."""

    name: str
    role: str
    ip: str
    env: dict[str, str]
    netns: str | None = None
    veth: str | None = None
    port_base: int | None = None     # ports mode: first port of this node's block
    pid: int | None = None           # the process the launcher started
    supervisord_pid: int | None = None

    def __post_init__(self) -> None:
        try:
            self._settings = load_node_settings(self.env)
        except SettingsError as exc:
            raise LocalError(f"node {self.name}: {exc}") from None

    @property
    def settings(self) -> NodeSettings:
        return self._settings


@dataclass
class LocalCluster:
    state_dir: str
    isolation: str
    cluster_id: str
    ray_temp_root: str
    head_file: str
    cluster_name: str = DEFAULT_CLUSTER_NAME
    gcs_address: str = ""
    job_server_url: str = ""
    bridge: str | None = None
    subnet: str | None = None        # "10.77.<n>"
    nodes: list[LocalNode] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)

    @property
    def state_file(self) -> str:
        return os.path.join(self.state_dir, STATE_FILE)

    def save(self) -> None:
        write_atomic(self.state_file, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, state_dir: str) -> LocalCluster:
        path = os.path.join(state_dir, STATE_FILE)
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            raise LocalError(f"no local cluster state at {path}") from None
        except (OSError, ValueError) as exc:
            raise LocalError(f"cannot read {path}: {exc}") from None
        data["nodes"] = [LocalNode(**n) for n in data["nodes"]]
        return cls(**data)

    def node(self, name: str) -> LocalNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise LocalError(f"no node {name!r}; nodes: {', '.join(n.name for n in self.nodes)}")
