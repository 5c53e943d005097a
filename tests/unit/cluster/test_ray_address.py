"""The service's reader of head.json: the contract with the node runtime's writer, tolerant
reads, and the same freshness verdicts as the node runtime's readers."""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace
from pathlib import Path

import pytest

from raypool import discovery, headrecord
from service.cluster.address import (
    HeadLocator,
    RayAddress,
    Sighting,
    address_source,
    judge,
    parse_record,
)
from service.cluster.boundary import ClusterUnavailable
from service.config import Settings

WRITTEN = headrecord.HeadRecord(
    cluster_name="argus-ray", head_ip="10.0.0.2", gcs_port=6390, dashboard_port=8270,
    job_server_url="http://10.0.0.2:8270", generation="g1", seq=3, written_at=1000.0,
    ttl_s=60.0, hostname="head-1", pid=42)


class Clocks:
    """Wall clock and monotonic clock of the reader, moved by the test."""

    def __init__(self, now: float = 1000.0, mono: float = 50.0) -> None:
        self.now = now
        self.mono = mono

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds


def publish(path: Path, record: headrecord.HeadRecord, mtime: float | None = None) -> None:
    """Write as the head's publisher does; ``mtime`` as the file server would stamp it."""
    discovery.write_record(str(path), record)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def locator(path: Path, clocks: Clocks, **kw) -> HeadLocator:
    return HeadLocator(str(path), clock=lambda: clocks.now, mono=lambda: clocks.mono, **kw)


# -- the contract with the writer ---------------------------------------------------------

@pytest.mark.parametrize("head_ip,gcs", [("10.0.0.2", "10.0.0.2:6390"),
                                         ("fd00::2", "[fd00::2]:6390")])
def test_reads_exactly_what_the_node_runtime_writes(tmp_path, head_ip, gcs):
    """The publisher's record, written by the node runtime's own writer, gives the address
    the node runtime's workers join (same GCS address, same job server)."""
    record = replace(WRITTEN, head_ip=head_ip)
    path = tmp_path / "head.json"
    publish(path, record, mtime=1000.0)
    address = locator(path, Clocks())()
    assert address == RayAddress(record.job_server_url, gcs, "g1")
    assert address.gcs_address == record.gcs_address  # what workers pass to `ray start`
    parsed = parse_record(record.to_json())
    assert (parsed.head_ip, parsed.gcs_port, parsed.generation, parsed.seq, parsed.ttl_s,
            parsed.written_at, parsed.cluster_name) == (
        head_ip, 6390, "g1", 3, 60.0, 1000.0, "argus-ray")


def test_every_field_the_reader_needs_is_one_the_writer_writes():
    written = json.loads(WRITTEN.to_json())
    for name in ("head_ip", "gcs_port", "job_server_url", "generation", "seq", "written_at",
                 "ttl_s"):
        partial = {k: v for k, v in written.items() if k != name}
        with pytest.raises(ValueError, match=f"missing fields: {name}"):
            parse_record(json.dumps(partial))


def test_unknown_fields_are_ignored_a_newer_format_is_refused():
    written = json.loads(WRITTEN.to_json())
    assert parse_record(json.dumps({**written, "zone": "b"})).gcs_port == 6390
    with pytest.raises(ValueError, match="format version 2"):
        parse_record(json.dumps({**written, "version": 2}))


@pytest.mark.parametrize("text,reason", [
    (None, "no such file"),
    ("", "not JSON"),
    ('{"head_ip": "10.', "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"head_ip": "10.0.0.2"}', "missing fields"),
    (WRITTEN.to_json().replace('"gcs_port": 6390', '"gcs_port": "6390"'), "wrong type"),
    (WRITTEN.to_json().replace('"gcs_port": 6390', '"gcs_port": true'), "wrong type"),
    (WRITTEN.to_json().replace('"gcs_port": 6390', '"gcs_port": 70000'), "bad head address"),
    (WRITTEN.to_json().replace('"generation": "g1"', '"generation": ""'), "bad head address"),
    (WRITTEN.to_json().replace("http://10.0.0.2:8270", "10.0.0.2:8270"), "not an http(s) URL"),
    ("\xff\xfe garbage", "not JSON"),
])
def test_an_unusable_record_means_unreachable_with_the_reason(tmp_path, text, reason):
    path = tmp_path / "head.json"
    if text is not None:
        path.write_text(text, errors="replace")
    with pytest.raises(ClusterUnavailable, match=r"Ray head record .*head\.json") as err:
        locator(path, Clocks())()
    assert reason in str(err.value)


def test_an_unreadable_path_means_unreachable(tmp_path):
    with pytest.raises(ClusterUnavailable, match="cannot read it"):
        locator(tmp_path, Clocks())()  # a directory


# -- freshness ----------------------------------------------------------------------------

def test_stale_record_means_no_head(tmp_path):
    path = tmp_path / "head.json"
    publish(path, WRITTEN, mtime=1000.0)
    clocks = Clocks(now=1000.0 + 61)
    stale = r"head\.json is stale: written 61s ago \(ttl 60s\)$"
    with pytest.raises(ClusterUnavailable, match=stale):
        locator(path, clocks)()


def test_a_writer_clock_behind_is_rescued_by_the_file_servers_mtime(tmp_path):
    path = tmp_path / "head.json"
    publish(path, replace(WRITTEN, written_at=1000.0 - 3600), mtime=1000.0)
    assert locator(path, Clocks())().generation == "g1"


def test_a_writer_clock_ahead_cannot_keep_a_dead_head_alive(tmp_path):
    path = tmp_path / "head.json"
    publish(path, replace(WRITTEN, written_at=1000.0 + 3600), mtime=1000.0 + 3600)
    clocks = Clocks()
    find = locator(path, clocks)
    assert find().generation == "g1"  # timestamps from the future count as age 0
    clocks.advance(61)  # the record never changed: the writer stopped
    stopped = r"head\.json is stale: no update for 61s \(ttl 60s\)$"
    with pytest.raises(ClusterUnavailable, match=stopped):
        find()


def test_an_advancing_seq_is_fresh_whatever_the_timestamps_say(tmp_path):
    path = tmp_path / "head.json"
    publish(path, WRITTEN, mtime=1000.0)
    clocks = Clocks()
    find = locator(path, clocks)
    find()
    clocks.advance(3600)  # the reader's wall clock jumped; the writer is alive
    publish(path, replace(WRITTEN, seq=4), mtime=1000.0 + 10)
    assert find().generation == "g1"


def test_reads_at_most_once_per_recheck_and_follows_a_new_generation(tmp_path):
    path = tmp_path / "head.json"
    publish(path, WRITTEN, mtime=1000.0)
    reads: list[str] = []

    def read(p: str) -> tuple[str, float]:
        reads.append(p)
        return path.read_text(), path.stat().st_mtime

    clocks = Clocks()
    find = locator(path, clocks, read=read, recheck_s=1.0)
    first = find()
    publish(path, replace(WRITTEN, generation="g2", seq=1, head_ip="10.0.0.9",
                          job_server_url="http://10.0.0.9:8270"), mtime=1000.5)
    clocks.advance(0.5)
    assert find() == first and len(reads) == 1  # within recheck_s: the last answer
    clocks.advance(0.5)
    moved = find()
    assert len(reads) == 2
    assert moved == RayAddress("http://10.0.0.9:8270", "10.0.0.9:6390", "g2")


def test_missing_then_published(tmp_path):
    path = tmp_path / "head.json"
    clocks = Clocks()
    find = locator(path, clocks)
    with pytest.raises(ClusterUnavailable, match="no such file"):
        find()
    publish(path, WRITTEN, mtime=1000.0)
    clocks.advance(1)
    assert find().generation == "g1"


def _as_raypool(sighting: Sighting | None) -> headrecord.Sighting | None:
    return None if sighting is None else headrecord.Sighting(sighting.key, sighting.since_mono)


def test_freshness_verdicts_match_the_node_runtimes_readers():
    """Random sequences of reads (clock skew both ways, seq advancing or not, generation
    changes, gaps longer than the TTL): the service and the workers agree every time."""
    rng = random.Random(20240611)
    kinds: set[str] = set()
    for _ in range(300):
        ours: Sighting | None = None
        theirs: headrecord.Sighting | None = None
        now, mono = 10_000.0, 500.0
        record = replace(WRITTEN, ttl_s=rng.choice([5.0, 60.0]))
        for _ in range(12):
            step = rng.choice([0.5, 3.0, 30.0, 61.0, 200.0])
            now, mono = now + step + rng.choice([0.0, 0.0, -100.0, 100.0]), mono + step
            move = rng.random()
            if move < 0.4:
                record = replace(record, seq=record.seq + 1)
            elif move < 0.5:
                record = replace(record, generation=f"g{rng.randrange(3)}", seq=1)
            record = replace(record, written_at=now + rng.choice([-3600.0, -20.0, 0.0, 3600.0]))
            mtime = now + rng.choice([-3600.0, -2.0, 0.0, 3600.0])
            verdict, theirs = headrecord.judge(record, mtime, now, mono, theirs)
            fresh, reason, ours = judge(parse_record(record.to_json()), mtime, now, mono, ours)
            assert (fresh, reason) == (verdict.fresh, verdict.reason)
            assert _as_raypool(ours) == theirs
            kinds.add(reason.split(" ")[0])
    # every branch of the rule was taken
    assert kinds == {"fresh:", "stale:", "updated", "no"}


# -- where the adapter gets its address ----------------------------------------------------

def test_address_source_fixed_without_head_json_and_a_locator_with_it():
    fixed = address_source(Settings(ray_address="http://10.1.2.3:8265"))
    assert fixed == RayAddress("http://10.1.2.3:8265", "10.1.2.3:6379", None)
    assert address_source(Settings(ray_address="http://h:1", gcs_address="g:2")) == \
        RayAddress("http://h:1", "g:2")
    found = address_source(Settings(head_json="/shared/ray/head.json"))
    assert isinstance(found, HeadLocator) and found.path == "/shared/ray/head.json"
