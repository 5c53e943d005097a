"""The leader's view of the cluster, shared with the standbys (issue 54).

What the scheduler saw last (``observed.Observed``: the nodes and their free resources as
admission used them, the nodes' health reports, the fair shares, the waiting tasks' start
estimates) is the leader's memory. With several instances on one PostgreSQL database a
standby has no scheduler, so before this it answered those empty: a start ``estimate`` of
null, no nodes' free GPUs, no fair shares. Behind a load balancer every other page view
then lost them.

The leader publishes its view after a tick (``ViewPublisher.after_tick``, on the scheduler
thread, so the write is fenced by the lease's epoch: a deposed leader publishes nothing):
at most every ``PUBLISH_EVERY_S``, and only when it changed or ``REFRESH_S`` went by (the
tick's time says how fresh it is). A standby reads it every second, as it polls the lease
(``ViewFollower.follow``), only when a newer one was published, into its own ``Observed``.
So what a standby answers is at most about two seconds behind the leader's tick; the
``observed_at`` of ``GET /api/v2/nodes`` is the published tick's time (an unchanged view is
published again only every ``REFRESH_S``: that time may lag so much while what it says is
current). On SQLite there is one instance and nothing is published.

Its size grows with the start estimates: with 10,000 estimated tasks the JSON is 620 KB,
23 ms to write on the leader (once a second at most, on the scheduler's thread) and 34 ms
to read on a standby (only a newer one), one host on 2026-12-06.

The view is JSON (``view_json``/``view_of``), never pickle: a row of a shared database is
data, not code. A view that does not parse (another version's) is ignored and logged once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from service.cluster.boundary import ClusterSnapshot, NodeResources
from service.domain.lease import LEADER, LeaseRow, PublishedView
from service.domain.reasons import Planned
from service.engine.observed import Observed, Seen
from service.policy.nodehealth import HealthReport
from service.scheduling.fairshare import Share
from service.store.core import Deposed
from service.store.db import log_failure

log = logging.getLogger(__name__)

VERSION = 1
PUBLISH_EVERY_S = 1.0  # the leader publishes at most this often
REFRESH_S = 5.0  # and at least this often while it ticks, changed or not


class ViewStore(Protocol):
    """The lease store's view rows (``store.lease``)."""

    def publish_view(self, name: str, view: PublishedView) -> None: ...

    def view_since(self, name: str, at: float) -> PublishedView | None: ...


def view_json(seen: Seen, health: Mapping[str, HealthReport]) -> str:
    """``seen`` and the health reports as JSON, but for the tick's time (``at``: a column
    of its own, so a view unchanged but for its time compares equal)."""
    snap = seen.snapshot
    doc: dict[str, Any] = {
        "version": VERSION,
        "unreachable": seen.unreachable,
        "snapshot": None if snap is None else {
            "nodes": [[n.node_id, n.node_ip, dict(n.free),
                       None if n.total is None else dict(n.total), n.name]
                      for n in snap.nodes],
            "held_gpus": dict(snap.held_gpus),
            "pending_pg_since": dict(snap.pending_pg_since),
            "held_on": {sid: dict(on) for sid, on in snap.held_on.items()}},
        "shares": [[user, s.charge, s.share, s.weight] for user, s in seen.shares.items()],
        "estimates": {task: [p.bound, p.expected] for task, p in seen.estimates.items()},
        "health": [[r.node, r.healthy, r.reason, r.checked_at, r.interval_s]
                   for r in health.values()],
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def view_of(text: str, at: float) -> tuple[Seen, dict[str, HealthReport]]:
    """The ``Seen`` and health reports ``view_json`` wrote (``ValueError``, ``KeyError``,
    ``TypeError``: not such a view)."""
    doc = json.loads(text)
    if doc["version"] != VERSION:
        raise ValueError(f"view version {doc['version']}, this code reads {VERSION}")
    snap = doc["snapshot"]
    snapshot = None if snap is None else ClusterSnapshot(
        nodes=tuple(NodeResources(node_id, ip, free, total, name)
                    for node_id, ip, free, total, name in snap["nodes"]),
        held_gpus=snap["held_gpus"], pending_pg_since=snap["pending_pg_since"],
        held_on=snap["held_on"])
    seen = Seen(at, snapshot, doc["unreachable"],
                MappingProxyType({user: Share(charge, share, weight)
                                  for user, charge, share, weight in doc["shares"]}),
                MappingProxyType({task: Planned(bound, expected)
                                  for task, (bound, expected) in doc["estimates"].items()}))
    health = {node: HealthReport(node, healthy, reason, checked_at, interval_s)
              for node, healthy, reason, checked_at, interval_s in doc["health"]}
    return seen, health


class ViewPublisher:
    """The leader's side: its ``Observed`` to the database after a tick (see the module
    docstring). ``lease()`` is the lease this instance holds (None: not leading)."""

    def __init__(self, views: ViewStore, observed: Observed,
                 lease: Callable[[], LeaseRow | None]) -> None:
        self._views = views
        self._observed = observed
        self._lease = lease
        self._published_at = float("-inf")  # the tick time of the last publish
        self._published = ""  # and its JSON

    def after_tick(self, now: float) -> None:
        """Publish the view if it is time (never raises: a view missed is the next
        tick's to publish)."""
        seen, lease = self._observed.last, self._lease()
        if seen is None or lease is None or now - self._published_at < PUBLISH_EVERY_S:
            return
        text = view_json(seen, self._observed.health)
        if text == self._published and now - self._published_at < REFRESH_S:
            return
        try:
            self._views.publish_view(LEADER, PublishedView(lease.holder.holder, lease.epoch,
                                                           seen.at, text))
        except Deposed:
            raise  # another instance leads: the loop's end, as for any of its writes
        except Exception as exc:
            log_failure(log, "publishing the leader's view", exc)
            return
        self._published_at, self._published = now, text


class ViewFollower:
    """A standby's side: the leader's published view into this instance's ``Observed``."""

    def __init__(self, views: ViewStore, observed: Observed) -> None:
        self._views = views
        self._observed = observed
        self._at = float("-inf")  # the tick time of the view adopted last
        self._unreadable: str | None = None

    def follow(self) -> bool:
        """Adopt the published view if a newer one is there; whether one was adopted."""
        row = self._views.view_since(LEADER, self._at)
        if row is None:
            return False
        try:
            seen, health = view_of(row.view_json, row.at)
        except (ValueError, KeyError, TypeError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            if why != self._unreadable:
                log.warning("the leader's view (from %s, epoch %d) is not one this code "
                            "reads: %s", row.holder, row.epoch, why)
                self._unreadable = why
            self._at = row.at
            return False
        self._observed.adopt(seen, health)
        self._at = row.at
        return True
