"""Gang admission against one cluster snapshot (pure policy, no I/O).

verl only checks the cluster's *total* free GPUs and then waits forever when its
per-node placement groups cannot be placed, so Argus admits a task only when:

* ``nnodes`` distinct nodes each have ``n_gpus_per_node`` GPUs and
  ``n_gpus_per_node * cpus_per_gpu`` CPUs free (verl's bundle is ``{"CPU": 3, "GPU": 1}``
  per GPU, packed per node), and
* one node (possibly a gang node) still has the driver's ``entrypoint_resources``
  (``worker_node``) and ``entrypoint_num_cpus`` free after the gang is placed.

"Free" is the snapshot minus what in-flight attempts (submitted by Argus, GPUs not yet
held) still need: those needs are first placed virtually with the same per-node rule,
so two tasks never count on the same GPUs. ``FreePool`` is built once per tick and
``reserve`` is called for every task admitted in that tick.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from service.cluster.boundary import ClusterSnapshot
from service.domain.reasons import NeverFits, NoRoom, Reason, Unreachable, WaitKind
from service.domain.resources import CPU, GPU, Driver


@dataclass(frozen=True, slots=True)
class Gang:
    """What a task's trainer needs: ``nnodes`` nodes with ``gpus_per_node`` GPUs each."""

    nnodes: int
    gpus_per_node: int
    cpus_per_gpu: float = 3.0

    @property
    def cpus_per_node(self) -> float:
        return self.gpus_per_node * self.cpus_per_gpu

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.gpus_per_node


@dataclass(frozen=True, slots=True)
class InFlight:
    """An attempt Argus submitted whose gang is not (fully) placed yet."""

    submission_id: str
    gang: Gang


@dataclass(frozen=True, slots=True)
class Decision:
    fits: bool
    why: Reason | None = None  # why it does not fit (None: it fits)
    gang_nodes: tuple[str, ...] = ()
    driver_node: str | None = None

    @property
    def reason(self) -> str:
        return "" if self.why is None else self.why.text


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}".rstrip("0")


@dataclass
class _Node:
    node_id: str
    label: str
    free: dict[str, float] = field(default_factory=dict)

    def has(self, needs: Mapping[str, float]) -> bool:
        return all(self.free.get(k, 0.0) >= v for k, v in needs.items())

    def take(self, needs: Mapping[str, float]) -> None:
        for k, v in needs.items():
            self.free[k] = self.free.get(k, 0.0) - v


class FreePool:
    """Free resources per node, as admission sees them during one tick."""

    def __init__(self, nodes: list[_Node]) -> None:
        self._nodes = nodes
        self._by_id = {n.node_id: n for n in nodes}
        self._kept: dict[str, dict[str, float]] = {}  # node id -> its free, withheld

    @classmethod
    def from_snapshot(cls, snapshot: ClusterSnapshot, in_flight: Iterable[InFlight] = ()
                      ) -> FreePool:
        ips = [n.node_ip for n in snapshot.nodes]
        nodes = [
            _Node(
                n.node_id,
                n.node_ip if ips.count(n.node_ip) == 1 else f"{n.node_ip}/{n.node_id[:8]}",
                {k: float(v) for k, v in n.free.items()},
            )
            for n in snapshot.nodes
        ]
        pool = cls(nodes)
        for job in in_flight:
            pool._hold_remaining(job, snapshot.held_gpus.get(job.submission_id, 0.0))
        return pool

    @classmethod
    def from_capacity(cls, snapshot: ClusterSnapshot) -> FreePool | None:
        """The cluster as if nothing ran on it (each node's total); None when a node's
        capacity is unknown. A gang this pool refuses can never fit the cluster as it is."""
        totals = [n.total for n in snapshot.nodes]
        if not totals or any(t is None for t in totals):
            return None
        pool = cls.from_snapshot(snapshot)
        for node, total in zip(pool._nodes, totals, strict=True):
            node.free = {k: float(v) for k, v in (total or {}).items()}
        return pool

    def _hold_remaining(self, job: InFlight, held_gpus: float) -> None:
        """Virtually place what ``job`` still needs but does not hold (greedy, best fit).

        Parts that do not fit anywhere are dropped: that job waits on Ray regardless
        (the hung-attempt watch deals with it), and there is nothing to reserve.
        """
        g = job.gang
        remaining = g.total_gpus - held_gpus
        while remaining > 1e-9:
            gpus = min(float(g.gpus_per_node), remaining)
            need = {GPU: gpus, CPU: gpus * g.cpus_per_gpu}
            node = self._best_fit(need)
            if node is not None:
                node.take(need)
            remaining -= gpus

    def _best_fit(self, need: Mapping[str, float]) -> _Node | None:
        """The node that fits ``need`` with the fewest GPUs to spare (less fragmentation)."""
        fits = [n for n in self._nodes if n.has(need)]
        if not fits:
            return None
        return min(fits, key=lambda n: (n.free.get(GPU, 0.0), n.free.get(CPU, 0.0)))

    def _gang_nodes(self, gang: Gang) -> list[_Node] | None:
        need = {GPU: float(gang.gpus_per_node), CPU: gang.cpus_per_node}
        fits = sorted(
            (n for n in self._nodes if n.has(need)),
            key=lambda n: (n.free.get(GPU, 0.0), n.free.get(CPU, 0.0)),
        )
        return fits[: gang.nnodes] if len(fits) >= gang.nnodes else None

    def decide(self, gang: Gang, driver: Driver) -> Decision:
        """Whether ``gang`` plus its driver fit now, and where (or why not)."""
        drv = driver.needs()
        if self._gang_nodes(gang) is None:
            return Decision(False, Reason(WaitKind.RESOURCES,
                                          NoRoom(self._gang_text(gang), self.describe())))
        # Try each node that could host the driver (fewest spare GPUs first, so the
        # driver prefers CPU-only or busy nodes); it may share a gang node.
        for host in sorted(self._nodes, key=lambda n: n.free.get(GPU, 0.0)):
            if not host.has(drv):
                continue
            saved = dict(host.free)
            host.take(drv)
            chosen = self._gang_nodes(gang)
            host.free = saved
            if chosen is not None:
                return Decision(True, None, tuple(n.node_id for n in chosen), host.node_id)
        what = ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(drv.items()))
        return Decision(False, Reason(WaitKind.RESOURCES,
                                      NoRoom(self._gang_text(gang), self.describe(), what)))

    def copy(self) -> FreePool:
        """An independent pool with the same free resources (for what-if questions)."""
        pool = FreePool([_Node(n.node_id, n.label, dict(n.free)) for n in self._nodes])
        pool._kept = {k: dict(v) for k, v in self._kept.items()}
        return pool

    def without(self, node_ids: Collection[str]) -> FreePool:
        """A copy with nothing free on ``node_ids`` (what a task that must not take
        them finds)."""
        pool = self.copy()
        for node_id in node_ids:
            node = pool._by_id.get(node_id)
            if node is not None:
                node.free = {}
        return pool

    def keep_for(self, gang: Gang, capacity: FreePool | None,
                 prefer: Collection[str] = ()) -> dict[str, str]:
        """Withhold ``gang.nnodes`` nodes for a gang that waits (the starvation guard's
        reservation): nodes its gang fits when idle (``capacity``), those in ``prefer``
        first (say, what preemption victims hold), then the closest to fitting now (most
        free GPUs). Their free resources leave the pool for the rest of the tick, so no
        later task lands there and the gang starts as soon as they drain; the other
        nodes stay open for backfill. Returns ``{node id: label}`` of the nodes kept.

        Callers keep the same nodes tick after tick (``prefer``): a reservation that
        followed the freest nodes would move whenever a job ended elsewhere, and the
        nodes it left would fill up again before they drained."""
        need = {GPU: float(gang.gpus_per_node), CPU: gang.cpus_per_node}
        fits_idle = {n.node_id for n in capacity._nodes if n.has(need)} \
            if capacity is not None else {n.node_id for n in self._nodes}
        open_nodes = [n for n in self._nodes
                      if n.node_id not in self._kept and n.node_id in fits_idle]
        open_nodes.sort(key=lambda n: (n.node_id not in prefer, -n.free.get(GPU, 0.0),
                                       n.node_id))
        kept = open_nodes[: gang.nnodes]
        for node in kept:
            self._kept[node.node_id] = node.free
            node.free = {}
        return {n.node_id: n.label for n in kept}

    def decide_with_kept(self, gang: Gang, driver: Driver) -> Decision:
        """``decide`` on the pool with the kept nodes' free resources in (a task that
        surely ends before those nodes drain may use them: see ``Scheduler``)."""
        return self.unkept().decide(gang, driver)

    def restore_kept(self) -> None:
        """Give the kept nodes their free resources back (the gang they were kept for
        is being placed)."""
        for node_id, free in self._kept.items():
            self._by_id[node_id].free = free
        self._kept = {}

    def unkept(self) -> FreePool:
        """The pool with the kept nodes' free resources given back (what a task would
        find if no gang were waiting for them)."""
        pool = self.copy()
        for node_id, free in pool._kept.items():
            pool._by_id[node_id].free = free
        pool._kept = {}
        return pool

    def release(self, node_id: str, resources: Mapping[str, float]) -> None:
        """Give ``resources`` back on ``node_id`` (a job that stops); unknown nodes are
        ignored (the node left: nothing to count on there)."""
        node = self._by_id.get(node_id)
        if node is not None:
            # a kept node stays kept: what it gets back is for the gang it is kept for
            free = self._kept.get(node_id, node.free)
            for k, v in resources.items():
                free[k] = free.get(k, 0.0) + v

    def total_gpus(self) -> float:
        return sum(max(n.free.get(GPU, 0.0), 0.0) for n in self._nodes)

    def reserve(self, gang: Gang, driver: Driver, decision: Decision) -> None:
        """Take an admitted task's resources out of the pool for the rest of the tick."""
        if not decision.fits or decision.driver_node is None:
            raise ValueError("only an admitted decision can be reserved")
        need = {GPU: float(gang.gpus_per_node), CPU: gang.cpus_per_node}
        for node_id in decision.gang_nodes:
            self._take(node_id, need)
        self._take(decision.driver_node, driver.needs())

    def _take(self, node_id: str, need: Mapping[str, float]) -> None:
        """Take ``need`` on ``node_id``, from what it keeps when it is kept (a decision
        of ``decide_with_kept``); the kept resources go back with ``restore_kept``."""
        kept = self._kept.get(node_id)
        if kept is None:
            self._by_id[node_id].take(need)
            return
        for k, v in need.items():
            kept[k] = kept.get(k, 0.0) - v

    @staticmethod
    def _gang_text(gang: Gang) -> str:
        cpus = _fmt(gang.cpus_per_node)
        return f"{gang.nnodes}x{gang.gpus_per_node} GPUs (+{cpus} CPUs per node)"

    def free_by_node(self) -> dict[str, tuple[float, float]]:
        """``{node id: (GPUs, CPUs) free}`` as the pool counts them now (kept nodes: 0)."""
        return {n.node_id: (n.free.get(GPU, 0.0), n.free.get(CPU, 0.0)) for n in self._nodes}

    def fitting_nodes(self, gang: Gang) -> list[str]:
        """The nodes that have one node's share of ``gang`` free."""
        need = {GPU: float(gang.gpus_per_node), CPU: gang.cpus_per_node}
        return [n.node_id for n in self._nodes if n.has(need)]

    def labels(self, node_ids: Iterable[str]) -> str:
        """``10.0.0.1, 10.0.0.2``: how reasons name nodes."""
        return ", ".join(self._by_id[n].label if n in self._by_id else n for n in node_ids)

    def describe(self) -> str:
        """Free GPUs/CPUs per node, e.g. ``10.0.0.1 4 GPU/16 CPU, 10.0.0.2 2 GPU/6 CPU``."""
        if not self._nodes:
            return "no alive nodes"
        return ", ".join(
            f"{n.label} {_fmt(max(n.free.get(GPU, 0.0), 0.0))} GPU/"
            f"{_fmt(max(n.free.get(CPU, 0.0), 0.0))} CPU"
            for n in self._nodes
        )


def never_fits(gang: Gang, capacity: FreePool) -> Reason:
    """Why a gang waits that even an idle cluster could not take (nodes may still join)."""
    return Reason(WaitKind.NEVER_FITS, NeverFits(FreePool._gang_text(gang),
                                                 capacity.describe()))


def never_fits_reason(gang: Gang, capacity: FreePool) -> str:
    return never_fits(gang, capacity).text


def unreachable(error: object) -> Reason:
    return Reason(WaitKind.CLUSTER_UNREACHABLE, Unreachable(str(error)))


def unreachable_reason(error: object) -> str:
    return unreachable(error).text
