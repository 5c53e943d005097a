"""The service's lease (issue 54): which instance holds the database, and whether another
may take it over. Pure.

An instance takes the ``leader`` lease at start and renews it every third of its TTL. On
SQLite a second instance on the same database is refused while the lease is live, with a
line that names the holder; on PostgreSQL it starts as a standby (it serves the API) and
takes the lease over once it is free: the leader election of ``engine.lease_keeper``.
A lease is free to take when it has expired, or when its holder ran on
this host and its pid is gone (a crash or a ``kill -9`` on this host: the supervisor's
restart takes over at once instead of waiting out the TTL).
"""

from __future__ import annotations

from dataclasses import dataclass

LEADER = "leader"


@dataclass(frozen=True, slots=True)
class Instance:
    """One running service: ``holder`` is unique per process start."""

    holder: str
    host: str
    pid: int
    address: str


@dataclass(frozen=True, slots=True)
class LeaseRow:
    name: str
    holder: Instance
    epoch: int
    acquired_at: float
    renewed_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class PublishedView:
    """The leader's view of the cluster as its last publish left it
    (``engine.shared_view``): who wrote it, in which term, of which tick."""

    holder: str
    epoch: int
    at: float
    view_json: str


@dataclass(frozen=True, slots=True)
class Fence:
    """The term of one leader: the singletons' writes commit only while the lease row
    still names this holder at this epoch (``store.core.WriteCore.fence_thread``)."""

    holder: str
    epoch: int


def fence_of(row: LeaseRow) -> Fence:
    return Fence(row.holder.holder, row.epoch)


def free_to_take(row: LeaseRow | None, me: Instance, now: float,
                 holder_alive: bool | None) -> bool:
    """Whether ``me`` may take the lease ``row`` now. ``holder_alive``: whether the
    holder's pid runs on this host (None: the holder is on another host, unknown)."""
    if row is None or row.holder.holder == me.holder or row.expires_at <= now:
        return True
    return row.holder.host == me.host and holder_alive is False


def held_by(row: LeaseRow, now: float) -> str:
    """A line naming the holder of a live lease, for the refused instance."""
    return (f"instance {row.holder.holder} (pid {row.holder.pid} on {row.holder.host}, "
            f"serving {row.holder.address}) holds it since "
            f"{now - row.acquired_at:.0f} s, renewed {now - row.renewed_at:.1f} s ago; "
            f"stop that instance, or wait {max(0.0, row.expires_at - now):.0f} s for its "
            "lease to expire if it is gone")
