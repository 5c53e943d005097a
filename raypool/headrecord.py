"""The head record (what head.json holds) and the rule that says whether it is fresh.
Pure: parsing and judging only; :mod:`raypool.discovery` reads and writes the file.

A record names the head (address, job server URL) and a ``generation`` that changes on
every head start, with a ``seq`` the publisher bumps on every rewrite. ``cluster_id`` is
the Ray cluster's own id, read from the GCS: with the embedded GCS store it survives a head
restart (same cluster, new generation), so workers keep their raylets; a head on a fresh
store has a new one (a new cluster: workers rejoin). Records written before the field
existed have none; their identity is the generation.

Freshness rule (robust to clock skew between head, reader and an NFS server):

1. A record carries ``written_at`` (the writer's clock) and the file has an ``mtime`` (the
   file server's clock on NFS). By timestamps the record is fresh when the *younger* of
   the two ages, measured on the reader's clock, is at most ``ttl_s``: a writer whose
   clock lags is rescued by the server's mtime and vice versa. A timestamp from the
   future counts as age 0.
2. A reader that watches the file over time (the worker watchdog) also remembers when it
   first saw the current ``(generation, seq)`` on its own monotonic clock. A ``seq`` that
   advanced within one generation since the last read means the writer is alive right
   now: fresh, whatever the clocks say (a new generation is judged by rule 1). An unchanged key
   for longer than ``ttl_s`` means the writer stopped: stale, even if a writer clock far
   in the future makes the timestamps look young.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import MISSING, asdict, dataclass, fields

FORMAT_VERSION = 1


@dataclass(frozen=True)
class HeadRecord:
    cluster_name: str
    head_ip: str
    gcs_port: int
    dashboard_port: int
    job_server_url: str
    generation: str
    seq: int
    written_at: float
    ttl_s: float
    hostname: str
    pid: int
    cluster_id: str = ""
    version: int = FORMAT_VERSION

    @property
    def gcs_address(self) -> str:
        host = f"[{self.head_ip}]" if ":" in self.head_ip else self.head_ip
        return f"{host}:{self.gcs_port}"

    @property
    def identity(self) -> str:
        """The Ray cluster this record names: a worker joined to another one starts over."""
        return self.cluster_id or self.generation

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"


def new_generation() -> str:
    return uuid.uuid4().hex


def parse_record(text: str, cluster_name: str) -> HeadRecord:
    """Parse and check a record; ValueError with a short reason when it is not usable."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    names = {f.name: f.type for f in fields(HeadRecord)}
    optional = {f.name for f in fields(HeadRecord) if f.default is not MISSING}
    missing = sorted(n for n in names if n not in data and n not in optional)
    if missing:
        raise ValueError("missing fields: " + ", ".join(missing))
    kinds = {"str": (str,), "int": (int,), "float": (int, float)}
    for name, type_name in names.items():
        if name in data and (not isinstance(data[name], kinds[type_name])
                             or isinstance(data[name], bool)):
            raise ValueError(f"field {name} has the wrong type")
    if data["cluster_name"] != cluster_name:
        raise ValueError(f"record is for cluster {data['cluster_name']!r}, not {cluster_name!r}")
    if not 1 <= data["gcs_port"] <= 65535 or not data["head_ip"] or not data["generation"]:
        raise ValueError("bad head address or generation")
    return HeadRecord(**{n: data[n] for n in names if n in data})


@dataclass(frozen=True)
class Sighting:
    """When a reader first saw a given (generation, seq), on its monotonic clock."""

    key: tuple[str, int]
    since_mono: float


@dataclass(frozen=True)
class Verdict:
    fresh: bool
    reason: str


def timestamp_age(record: HeadRecord, mtime: float, now: float) -> float:
    """Age by rule 1: the younger of written_at and mtime, never negative."""
    return max(0.0, min(now - record.written_at, now - mtime))


def judge(record: HeadRecord, mtime: float, now: float, mono: float,
          previous: Sighting | None) -> tuple[Verdict, Sighting]:
    """Apply the freshness rule; returns the verdict and the sighting to remember."""
    key = (record.generation, record.seq)
    if previous is not None and previous.key == key:
        sighting = previous
        unchanged = mono - previous.since_mono
        if unchanged > record.ttl_s:
            return Verdict(False, f"no update for {unchanged:.0f}s (ttl {record.ttl_s:g}s)"), \
                sighting
    else:
        sighting = Sighting(key, mono)
        if previous is not None and previous.key[0] == key[0] and key[1] > previous.key[1]:
            return Verdict(True, "updated since last read"), sighting
    age = timestamp_age(record, mtime, now)
    if age > record.ttl_s:
        return Verdict(False, f"stale: written {age:.0f}s ago (ttl {record.ttl_s:g}s)"), sighting
    return Verdict(True, f"fresh: written {age:.0f}s ago"), sighting
