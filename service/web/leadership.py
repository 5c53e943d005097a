"""Which instance leads (issue 54): ``/readyz``'s ``instance``, the console's cluster
page and ``/metrics``' leader families, from this instance's ``LeaseKeeper``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from service.domain.lease import Instance, LeaseRow


class LeaseHolder(Protocol):
    """This instance's database lease (``engine.lease_keeper.LeaseKeeper``)."""

    @property
    def me(self) -> Instance: ...

    @property
    def lease(self) -> LeaseRow | None: ...

    @property
    def seen(self) -> LeaseRow | None: ...

    @property
    def lost(self) -> str | None: ...

    @property
    def leading(self) -> bool: ...


def role_of(keeper: LeaseHolder | None) -> str:
    """``leader`` or ``standby``; an app without a lease (tests) runs its scheduler: it
    leads."""
    return "standby" if keeper is not None and not keeper.leading else "leader"


def leadership(keeper: LeaseHolder) -> dict[str, Any]:
    """Which instance answers, whether it leads, and who leads since when (``/readyz``'s
    ``instance``, the console's cluster page)."""
    row = keeper.seen
    leader = None if row is None else {
        "holder": row.holder.holder, "address": row.holder.address,
        "since": row.acquired_at, "epoch": row.epoch, "renewed_at": row.renewed_at}
    return {"holder": keeper.me.holder, "address": keeper.me.address,
            "role": role_of(keeper), "leader": leader}


class LeaseCollector(Collector):
    """This instance's role at scrape time: whether it leads, who leads since when."""

    def __init__(self, keeper: LeaseHolder) -> None:
        self._keeper = keeper

    def collect(self) -> Iterator[GaugeMetricFamily]:
        me, row = self._keeper.me, self._keeper.seen
        family = GaugeMetricFamily(
            "argus_instance_leader",
            "1 while this instance leads (holds the database lease), 0 on a standby.",
            labels=["instance", "address"])
        family.add_metric([me.holder, me.address], 1.0 if self._keeper.leading else 0.0)
        yield family
        if row is None:
            return
        yield GaugeMetricFamily("argus_leader_since_seconds",
                                "When the leading instance took the database lease (epoch s).",
                                value=row.acquired_at)
        yield GaugeMetricFamily("argus_leader_epoch",
                                "The database lease's epoch (+1 at every change of holder).",
                                value=float(row.epoch))
