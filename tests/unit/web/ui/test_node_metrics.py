"""The nodes' Prometheus families (issue 55), by node name: state (0/1 per state, with its
source), alive, health from the scheduler's last health read, GPUs, and the node events
counted by kind and source from zero; one store read per scrape."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.cluster.fake import FakeCluster
from service.config import SchedulerSettings, Settings
from service.domain.nodes import NodeEventKind, NodeSource
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler
from service.store.writer import Store
from service.web.metrics import MeteredScheduler, ServiceMetrics

T0 = 1_766_000_000.0


class World:
    def __init__(self, root: Path) -> None:
        self.head_json = root / "shared" / "ray" / "discovery" / "argus" / "head.json"
        (self.head_json.parent / "nodes").mkdir(parents=True)
        settings = Settings(shared_root=str(root / "shared"), head_json=str(self.head_json),
                            scheduler=SchedulerSettings(node_health_every_s=1.0))
        self.store = Store(str(root / "db.sqlite3"))
        self.cluster = FakeCluster(clock=T0)
        self.metrics = ServiceMetrics(self.store.tasks.counts_by_state, users=self.store,
                                      queue=self.store.console, nodes=self.store.nodes)
        self.scheduler = MeteredScheduler(
            Scheduler(self.store, self.cluster, settings, Artifacts(str(root / "shared"))),
            self.metrics)
        self.now = T0

    def tick(self) -> None:
        self.now += 2
        self.cluster.clock = self.now
        self.scheduler.tick(self.now)

    def report(self, name: str, healthy: bool, reason: str = "ok") -> None:
        (self.head_json.parent / "nodes" / f"{name}.health.json").write_text(json.dumps({
            "version": 1, "node": name, "healthy": healthy, "reason": reason,
            "checked_at": self.now + 1, "interval_s": 30}))

    def samples(self, family: str) -> dict[tuple[tuple[str, str], ...], float]:
        text = self.metrics.render().decode()
        return {tuple(sorted(s.labels.items())): s.value
                for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == family}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.store.close()


def _state(world: World) -> dict[tuple[str, str], tuple[float, str]]:
    return {(dict(k)["node"], dict(k)["state"]): (v, dict(k)["source"])
            for k, v in world.samples("argus_node_state").items()}


def test_state_per_node_name_with_its_source(world: World) -> None:
    world.cluster.add_node("id-aaaa", gpus=8, name="gpu-07")
    world.cluster.add_node("id-bbbb", gpus=4, name="gpu-08")
    world.store.nodes.cordon("gone", NodeSource.HEALTH, None, T0, "xid 79")  # Ray lost it
    world.tick()
    world.store.nodes.cordon("gpu-07", NodeSource.OPERATOR, "root", T0, "fan")
    got = _state(world)
    assert got == {
        ("gpu-07", "schedulable"): (0.0, "operator"), ("gpu-07", "cordoned"): (1.0, "operator"),
        ("gpu-07", "drained"): (0.0, "operator"),
        ("gpu-08", "schedulable"): (1.0, ""), ("gpu-08", "cordoned"): (0.0, ""),
        ("gpu-08", "drained"): (0.0, ""),
        ("gone", "schedulable"): (0.0, "health"), ("gone", "cordoned"): (1.0, "health"),
        ("gone", "drained"): (0.0, "health")}
    assert {dict(k)["node"]: v for k, v in world.samples("argus_node_alive").items()} == {
        "gpu-07": 1.0, "gpu-08": 1.0, "gone": 0.0}
    world.store.nodes.drain("gpu-07", "root", T0 + 1, "swap")
    assert _state(world)[("gpu-07", "drained")] == (1.0, "operator")
    gpus = {(dict(k)["node"], dict(k)["kind"]): v
            for k, v in world.samples("argus_node_gpus").items()}
    assert gpus == {("gpu-07", "total"): 8.0, ("gpu-07", "free"): 8.0,
                    ("gpu-08", "total"): 4.0, ("gpu-08", "free"): 4.0}
    free = world.samples("argus_node_gpus_free")  # the older families: by name too
    assert {dict(k)["node"]: dict(k)["node_id"] for k in free} == {
        "gpu-07": "id-aaaa", "gpu-08": "id-bbbb"}


def test_health_from_the_schedulers_last_read(world: World) -> None:
    for node in ("w1", "w2", "w3"):
        world.cluster.add_node(node, gpus=4)
    world.tick()
    assert world.samples("argus_node_health") == {}  # no reports: no series
    world.report("w1", True)
    world.report("w2", False, "ecc: 2 uncorrectable")
    (world.head_json.parent / "nodes" / "w3.health.json").write_text("{not json")
    world.tick()
    health = {dict(k)["node"]: v for k, v in world.samples("argus_node_health").items()}
    assert health == {"w1": 1.0, "w2": 0.0}  # w3's file is ignored: no series
    # the same tick's health read cordoned w2 (source health)
    assert _state(world)[("w2", "cordoned")] == (1.0, "health")
    events = world.samples("argus_node_events_total")
    assert events[(("kind", "NODE_CORDONED"), ("source", "health"))] == 1.0


def test_events_by_kind_and_source_every_pair_from_zero(world: World) -> None:
    events = world.samples("argus_node_events_total")
    assert len(events) == len(NodeEventKind) * len(NodeSource)
    assert set(events.values()) == {0.0}
    world.store.nodes.cordon("w1", NodeSource.QUARANTINE, None, T0, "3 CUDA errors")
    world.store.nodes.resume("w1", None, "root", T0 + 1, "replaced")
    world.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0 + 2, "again")
    events = world.samples("argus_node_events_total")
    assert {k: v for k, v in events.items() if v} == {
        (("kind", "NODE_CORDONED"), ("source", "quarantine")): 1.0,
        (("kind", "NODE_RESUMED"), ("source", "operator")): 1.0,
        (("kind", "NODE_CORDONED"), ("source", "operator")): 1.0}


def test_one_store_read_per_scrape_however_many_nodes(world: World,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(50):
        world.cluster.add_node(f"w{i:02d}", gpus=4)
        world.store.nodes.cordon(f"w{i:02d}", NodeSource.OPERATOR, "root", T0, "rack move")
    world.tick()
    reads: list[int] = []
    real = world.store.nodes.observed
    monkeypatch.setattr(world.store.nodes, "observed",
                        lambda after=0: (reads.append(after), real(after))[1])
    for name in ("states", "state", "events", "latest_events"):
        monkeypatch.setattr(world.store.nodes, name,
                            lambda *a, _n=name: pytest.fail(f"/metrics called nodes.{_n}"))
    assert len(world.samples("argus_node_state")) == 50 * 3
    assert reads == [0]  # the first scrape counts every event
    world.store.nodes.resume("w00", None, "root", T0 + 1, "")
    events = world.samples("argus_node_events_total")
    assert reads == [0, 50]  # the next one only those after the last it counted
    assert events[(("kind", "NODE_CORDONED"), ("source", "operator"))] == 50.0
    assert events[(("kind", "NODE_RESUMED"), ("source", "operator"))] == 1.0


def test_promtool_accepts_the_node_families(world: World) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    world.cluster.add_node("w1", gpus=4)
    world.report("w1", False, "nvidia-smi sees 3 of 4 GPUs")
    world.tick()
    done = subprocess.run([promtool, "check", "metrics"], input=world.metrics.render(),
                          capture_output=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
