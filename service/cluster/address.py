"""Where the service finds Ray: fixed addresses from config, or the head's record.

With ``ray.head_json`` set, the service finds the head the way worker nodes do: the head's
publisher keeps a small JSON record on shared storage (head IP, GCS port, job server URL,
a generation that changes on every head start, a sequence number, written-at, TTL) and
readers follow it. That JSON is the contract between the node runtime and the service;
the service reads it here, without importing the node runtime, and takes only what it
needs (unknown fields are ignored, a newer format version is refused).

Freshness, as the node runtime's readers judge it (so the service and the workers agree
on whether there is a head), robust to skewed clocks between head, reader and an NFS
server:

1. By timestamps: the younger of ``written_at`` (the writer's clock) and the file's
   mtime (the file server's clock), on the reader's clock, is at most ``ttl_s``. A
   timestamp from the future counts as age 0.
2. Over time: a ``seq`` that advanced within one generation since the last read means the
   writer is alive now (fresh, whatever the clocks say); the same ``(generation, seq)``
   seen unchanged for longer than ``ttl_s`` on the reader's monotonic clock means the
   writer stopped (stale, even when a writer clock far ahead makes the timestamps young).

A missing, unreadable, malformed or stale record means "Ray unreachable": the locator
raises ``ClusterUnavailable`` with the reason, and tasks wait with it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.cluster.boundary import ClusterUnavailable
from service.config import Settings

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
RECHECK_S = 1.0  # the record is re-read at most this often
_MAX_BYTES = 65536


@dataclass(frozen=True, slots=True)
class RayAddress:
    """The Ray cluster to talk to. ``generation`` is None for addresses from config."""

    job_server_url: str
    gcs_address: str
    generation: str | None = None


@dataclass(frozen=True, slots=True)
class HeadRecord:
    """The fields of head.json the service uses."""

    head_ip: str
    gcs_port: int
    job_server_url: str
    generation: str
    seq: int
    written_at: float
    ttl_s: float
    cluster_name: str = ""

    @property
    def address(self) -> RayAddress:
        host = f"[{self.head_ip}]" if ":" in self.head_ip else self.head_ip
        return RayAddress(self.job_server_url, f"{host}:{self.gcs_port}", self.generation)


_REQUIRED: dict[str, tuple[type, ...]] = {
    "head_ip": (str,), "gcs_port": (int,), "job_server_url": (str,), "generation": (str,),
    "seq": (int,), "written_at": (int, float), "ttl_s": (int, float),
}


def parse_record(text: str) -> HeadRecord:
    """The record in ``text``; ValueError with a short reason when it is not usable."""
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    version = data.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ValueError(f"format version {version!r}, this service reads {FORMAT_VERSION}")
    missing = sorted(name for name in _REQUIRED if name not in data)
    if missing:
        raise ValueError("missing fields: " + ", ".join(missing))
    for name, kinds in _REQUIRED.items():
        if not isinstance(data[name], kinds) or isinstance(data[name], bool):
            raise ValueError(f"field {name} has the wrong type")
    if not data["head_ip"] or not 1 <= data["gcs_port"] <= 65535 or not data["generation"]:
        raise ValueError("bad head address or generation")
    if not data["job_server_url"].startswith(("http://", "https://")):
        raise ValueError(f"job_server_url is not an http(s) URL: {data['job_server_url']!r}")
    name = data.get("cluster_name")
    return HeadRecord(**{n: data[n] for n in _REQUIRED},
                      cluster_name=name if isinstance(name, str) else "")


@dataclass(frozen=True, slots=True)
class Sighting:
    """When this reader first saw a ``(generation, seq)``, on its monotonic clock."""

    key: tuple[str, int]
    since_mono: float


def judge(record: HeadRecord, mtime: float, now: float, mono: float,
          previous: Sighting | None) -> tuple[bool, str, Sighting]:
    """(fresh, reason, sighting to remember) by the freshness rule above."""
    key = (record.generation, record.seq)
    if previous is not None and previous.key == key:
        sighting = previous
        unchanged = mono - previous.since_mono
        if unchanged > record.ttl_s:
            return False, f"no update for {unchanged:.0f}s (ttl {record.ttl_s:g}s)", sighting
    else:
        sighting = Sighting(key, mono)
        if previous is not None and previous.key[0] == key[0] and key[1] > previous.key[1]:
            return True, "updated since last read", sighting
    age = max(0.0, min(now - record.written_at, now - mtime))
    if age > record.ttl_s:
        return False, f"stale: written {age:.0f}s ago (ttl {record.ttl_s:g}s)", sighting
    return True, f"fresh: written {age:.0f}s ago", sighting


def read_file(path: str) -> tuple[str, float]:
    """(text, mtime) of the file; OSError when it cannot be read, or it is a link or not a
    regular file (the head writes it by rename: it never is; a FIFO must not block)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        return f.read(_MAX_BYTES).decode("utf-8", "replace"), st.st_mtime


class HeadLocator:
    """``locate()`` -> the current head's address from head.json, or ClusterUnavailable.

    Thread-safe. The file is read at most every ``recheck_s`` (on the monotonic clock);
    in between the last answer stands. Clocks and the file reader are injectable.
    """

    def __init__(self, path: str, *, recheck_s: float = RECHECK_S,
                 clock: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic,
                 read: Callable[[str], tuple[str, float]] = read_file) -> None:
        self.path = path
        self._recheck_s = recheck_s
        self._clock = clock
        self._mono = mono
        self._read = read
        self._lock = threading.Lock()
        self._sighting: Sighting | None = None
        self._checked: float | None = None  # monotonic time of the last read
        self._answer: RayAddress | ClusterUnavailable = ClusterUnavailable("not read yet")

    def __call__(self) -> RayAddress:
        with self._lock:
            mono = self._mono()
            if self._checked is None or mono - self._checked >= self._recheck_s:
                self._answer = self._look(mono)
                self._checked = mono
            answer = self._answer
        if isinstance(answer, ClusterUnavailable):
            raise ClusterUnavailable(str(answer))
        return answer

    def _look(self, mono: float) -> RayAddress | ClusterUnavailable:
        try:
            text, mtime = self._read(self.path)
            record = parse_record(text)
        except (OSError, ValueError) as exc:
            self._sighting = None
            why = f"cannot read it ({exc.strerror or exc})" if isinstance(exc, OSError) \
                else f"unusable ({exc})"
            if isinstance(exc, FileNotFoundError):
                why = "no such file (no head has published yet)"
            return ClusterUnavailable(f"Ray head record {self.path}: {why}")
        fresh, reason, self._sighting = judge(record, mtime, self._clock(), mono,
                                              self._sighting)
        if not fresh:
            return ClusterUnavailable(
                f"Ray head record {self.path} is stale: {reason.removeprefix('stale: ')}")
        address = record.address
        if address != self._answer:
            log.info("Ray head of cluster %r: generation %s, job server %s, GCS %s (from %s)",
                     record.cluster_name, record.generation, address.job_server_url,
                     address.gcs_address, self.path)
        return address


def address_source(settings: Settings) -> RayAddress | HeadLocator:
    """A locator when ``head_json`` is configured, else the fixed configured addresses."""
    if settings.head_json:
        return HeadLocator(settings.head_json)
    return RayAddress(settings.ray_address, settings.resolved_gcs_address)
