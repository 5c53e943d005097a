"""The admission table: gang fit per node, in-flight reservations, CPUs, driver slot."""

from __future__ import annotations

import pytest

from service.cluster.boundary import ClusterSnapshot, NodeResources
from service.scheduling.admission import (
    Driver,
    FreePool,
    Gang,
    InFlight,
    never_fits_reason,
    unreachable_reason,
)

DRIVER = Driver({"worker_node": 1.0}, num_cpus=1.0)


def node(ip: str, gpus: float = 0, cpus: float = 0, slots: float = 100, node_id: str = ""
         ) -> NodeResources:
    free = {"GPU": gpus, "CPU": cpus, "worker_node": slots}
    return NodeResources(node_id or f"id-{ip}", ip, {k: v for k, v in free.items() if v > 0})


def snap(*nodes: NodeResources, held: dict[str, float] | None = None) -> ClusterSnapshot:
    return ClusterSnapshot(nodes=nodes, held_gpus=held or {})


HEAD = node("10.0.0.1", slots=0)  # the 0-CPU head: nothing free, no worker_node

TABLE = [
    # (case, snapshot, in-flight, gang (nnodes, gpus), fits, reason fragment)
    ("fits on two nodes",
     snap(HEAD, node("10.0.0.2", 4, 16), node("10.0.0.3", 4, 16)), [], (2, 4), True, ""),
    ("short in total",
     snap(HEAD, node("10.0.0.2", 2, 16)), [], (1, 4), False,
     "needs 1x4 GPUs (+12 CPUs per node); free: 10.0.0.1 0 GPU/0 CPU, 10.0.0.2 2 GPU/16 CPU"),
    ("enough in total but split 3+1",
     snap(node("10.0.0.2", 3, 16), node("10.0.0.3", 1, 16)), [], (2, 2), False,
     "needs 2x2 GPUs"),
    ("reserved by an in-flight task that holds nothing yet",
     snap(node("10.0.0.2", 4, 16), node("10.0.0.3", 4, 16)),
     [InFlight("other--a01", Gang(1, 4))], (2, 4), False, "10.0.0.2 0 GPU/4 CPU"),
    ("in-flight task already holds its GPUs",
     snap(node("10.0.0.2", 4, 16), node("10.0.0.3", 4, 16), held={"other--a01": 4}),
     [InFlight("other--a01", Gang(1, 4))], (2, 4), True, ""),
    ("in-flight task holds half of its gang",
     snap(node("10.0.0.2", 4, 16), node("10.0.0.3", 4, 16), held={"other--a01": 4}),
     [InFlight("other--a01", Gang(2, 4))], (2, 4), False, "needs 2x4"),
    ("short of CPUs for verl's bundles",
     snap(node("10.0.0.2", 4, 11), node("10.0.0.3", 4, 16)), [], (2, 4), False,
     "(+12 CPUs per node); free: 10.0.0.2 4 GPU/11 CPU"),
    ("no driver slot anywhere",
     snap(node("10.0.0.2", 4, 16, slots=0), node("10.0.0.3", 4, 16, slots=0)), [], (1, 4),
     False, "no free driver slot (CPU 1, worker_node 1)"),
    ("driver needs a CPU left after the gang",
     snap(node("10.0.0.2", 4, 12)), [], (1, 4), False, "no free driver slot"),
    ("driver shares a gang node when CPUs allow",
     snap(node("10.0.0.2", 4, 13)), [], (1, 4), True, ""),
    ("no alive nodes", snap(), [], (1, 1), False, "free: no alive nodes"),
]


@pytest.mark.parametrize(("snapshot", "in_flight", "shape", "fits", "fragment"),
                         [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
def test_admission_table(snapshot: ClusterSnapshot, in_flight: list[InFlight],
                         shape: tuple[int, int], fits: bool, fragment: str) -> None:
    decision = FreePool.from_snapshot(snapshot, in_flight).decide(Gang(*shape), DRIVER)
    assert decision.fits is fits
    if fits:
        assert len(set(decision.gang_nodes)) == shape[0]
        assert decision.driver_node is not None
        assert decision.reason == ""
    else:
        assert fragment in decision.reason
        assert decision.gang_nodes == ()


def test_driver_goes_where_it_does_not_block_the_gang() -> None:
    # The only node with a driver slot also has the GPUs, and a CPU-only node exists
    # without a slot: the gang must still be placed with the driver next to it.
    pool = FreePool.from_snapshot(snap(node("10.0.0.2", 4, 16), node("10.0.0.3", 4, 16,
                                                                          slots=0)))
    decision = pool.decide(Gang(2, 4), DRIVER)
    assert decision.fits and decision.driver_node == "id-10.0.0.2"


def test_reserve_decrements_within_a_tick() -> None:
    pool = FreePool.from_snapshot(snap(node("10.0.0.2", 8, 32)))
    first = pool.decide(Gang(1, 4), DRIVER)
    assert first.fits
    pool.reserve(Gang(1, 4), DRIVER, first)
    second = pool.decide(Gang(1, 4), DRIVER)
    assert second.fits
    pool.reserve(Gang(1, 4), DRIVER, second)
    third = pool.decide(Gang(1, 1), DRIVER)
    assert not third.fits
    assert "10.0.0.2 0 GPU/6 CPU" in third.reason  # 32 - 2*12 - 2 driver CPUs
    with pytest.raises(ValueError, match="admitted"):
        pool.reserve(Gang(1, 1), DRIVER, third)


def test_best_fit_keeps_big_nodes_whole() -> None:
    pool = FreePool.from_snapshot(snap(node("10.0.0.2", 8, 32), node("10.0.0.3", 2, 8)))
    small = pool.decide(Gang(1, 2), DRIVER)
    assert small.gang_nodes == ("id-10.0.0.3",)


def test_colliding_ips_are_told_apart_by_node_id() -> None:
    pool = FreePool.from_snapshot(snap(node("10.0.0.2", 1, 4, node_id="aaaaaaaa1111"),
                                       node("10.0.0.2", 1, 4, node_id="bbbbbbbb2222")))
    reason = pool.decide(Gang(1, 4), DRIVER).reason
    assert "10.0.0.2/aaaaaaaa 1 GPU/4 CPU" in reason
    assert "10.0.0.2/bbbbbbbb 1 GPU/4 CPU" in reason


def test_fractional_resources_are_rendered_readably() -> None:
    pool = FreePool.from_snapshot(snap(node("10.0.0.2", 0.5, 2.25)))
    assert pool.describe() == "10.0.0.2 0.5 GPU/2.25 CPU"


def test_unreachable_reason() -> None:
    assert unreachable_reason("timeout") == "Ray cluster unreachable: timeout"


def test_capacity_pool_judges_an_idle_cluster() -> None:
    busy = NodeResources("a" * 16, "10.0.0.2", {"CPU": 1.0, "worker_node": 99.0},
                         {"CPU": 16.0, "GPU": 4.0, "worker_node": 100.0})
    capacity = FreePool.from_capacity(snap(busy))
    assert capacity is not None
    assert not FreePool.from_snapshot(snap(busy)).decide(Gang(1, 4), DRIVER).fits
    assert capacity.decide(Gang(1, 4), DRIVER).fits  # waits for room, fits when idle
    assert not capacity.decide(Gang(1, 8), DRIVER).fits  # never, on this cluster
    assert not capacity.decide(Gang(2, 2), DRIVER).fits  # one node cannot be two
    assert never_fits_reason(Gang(1, 8), capacity) == (
        "can never fit this cluster as it is: needs 1x8 GPUs (+24 CPUs per node) and a "
        "driver slot; node capacity: 10.0.0.2 4 GPU/16 CPU")


def test_capacity_unknown_when_a_node_does_not_report_it() -> None:
    known = NodeResources("b" * 16, "10.0.0.3", {}, {"GPU": 4.0})
    assert FreePool.from_capacity(snap(node("10.0.0.2", gpus=4), known)) is None
    assert FreePool.from_capacity(snap()) is None
    empty_head = NodeResources("c" * 16, "10.0.0.1", {}, {})  # known, and nothing in it
    assert FreePool.from_capacity(snap(empty_head, known)) is not None


def _sized(ip: str, free_gpus: float, total_gpus: float) -> NodeResources:
    return NodeResources(f"id-{ip}", ip, {"GPU": free_gpus, "CPU": 3 * free_gpus + 4,
                                          "worker_node": 100.0} if free_gpus else
                         {"CPU": 4.0, "worker_node": 100.0},
                         {"GPU": total_gpus, "CPU": 3 * total_gpus + 4, "worker_node": 100.0})


@pytest.mark.parametrize(("free", "gang", "prefer", "kept"), [
    # the closest to fitting first (most free GPUs); a node too small is never kept
    ({"a": 2, "b": 3, "c": 1}, Gang(1, 4), (), ["b"]),
    ({"a": 2, "b": 3, "c": 1}, Gang(2, 4), (), ["b", "a"]),
    ({"a": 2, "b": 3, "small": 1}, Gang(2, 4), (), ["b", "a"]),
    # preferred nodes (what preemption victims hold) before any other
    ({"a": 2, "b": 3, "c": 1}, Gang(1, 4), ("id-c",), ["c"]),
])
def test_keep_for_withholds_the_nodes_a_gang_will_use(free, gang, prefer, kept) -> None:
    nodes = [_sized(ip, g, 2 if ip == "small" else 4) for ip, g in free.items()]
    pool = FreePool.from_snapshot(snap(*nodes))
    capacity = FreePool.from_capacity(snap(*nodes))
    assert list(pool.keep_for(gang, capacity, prefer=prefer).values()) == kept
    placed = pool.decide(Gang(1, 1), Driver({})).gang_nodes  # backfill: not on kept nodes
    assert not set(placed) & {f"id-{k}" for k in kept}
    # what a task finds without the reservation: everything again
    assert pool.unkept().total_gpus() == sum(free.values())
    assert pool.total_gpus() == sum(g for ip, g in free.items() if ip not in kept)
