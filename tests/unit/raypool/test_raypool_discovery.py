"""head.json: atomic writes under concurrent readers, tolerant reads, freshness and skew."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace

import pytest

from raypool.discovery import read_record, write_record
from raypool.headrecord import HeadRecord, Sighting, judge, parse_record, timestamp_age

REC = HeadRecord(cluster_name="argus-ray", head_ip="10.0.0.2", gcs_port=6379,
                 dashboard_port=8265, job_server_url="http://10.0.0.2:8265",
                 generation="g1", seq=1, written_at=1000.0, ttl_s=60.0, hostname="h", pid=7)


def test_round_trip(tmp_path):
    path = str(tmp_path / "d" / "head.json")
    write_record(path, REC)
    result = read_record(path, "argus-ray")
    assert result.record == REC
    assert result.mtime > 0
    assert REC.gcs_address == "10.0.0.2:6379"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["head.json"]


@pytest.mark.parametrize("content,reason", [
    (None, "no head.json"),
    ("", "not JSON"),
    ('{"cluster_name": "argus-ray", "head_ip": "10.', "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"cluster_name": "argus-ray"}', "missing fields"),
    (REC.to_json().replace('"gcs_port": 6379', '"gcs_port": "6379"'), "wrong type"),
    (REC.to_json().replace('"gcs_port": 6379', '"gcs_port": 0'), "bad head address"),
    (REC.to_json().replace('"argus-ray"', '"other"'), "cluster 'other'"),
    ("\xff\xfe garbage", "not JSON"),
])
def test_unusable_files_give_none_with_reason(tmp_path, content, reason):
    path = tmp_path / "head.json"
    if content is not None:
        path.write_text(content, errors="replace")
    result = read_record(str(path), "argus-ray")
    assert result.record is None
    assert reason in result.reason


def test_readers_never_see_a_partial_record(tmp_path):
    path = str(tmp_path / "head.json")
    write_record(path, REC)
    stop = threading.Event()
    padded = replace(REC, hostname="x" * 20000)  # large enough to need several writes

    def writer() -> None:
        seq = 1
        while not stop.is_set():
            seq += 1
            write_record(path, replace(padded if seq % 2 else REC, seq=seq))

    thread = threading.Thread(target=writer)
    thread.start()
    seen = set()
    try:
        for _ in range(3000):
            result = read_record(path, "argus-ray")
            assert result.record is not None, result.reason
            seen.add(result.record.seq)
    finally:
        stop.set()
        thread.join()
    assert len(seen) > 1  # the reader really raced the writer
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "head.json"]
    assert leftovers == []


def test_parse_record_accepts_int_timestamps():
    text = REC.to_json().replace('"written_at": 1000.0', '"written_at": 1000')
    assert parse_record(text, "argus-ray").written_at == 1000


# --- freshness rule ----------------------------------------------------------------------

def test_fresh_and_stale_by_timestamps():
    fresh, _ = judge(REC, mtime=1000.0, now=1059.0, mono=0.0, previous=None)
    stale, _ = judge(REC, mtime=1000.0, now=1061.0, mono=0.0, previous=None)
    assert fresh.fresh and not stale.fresh
    assert "stale" in stale.reason


def test_writer_clock_behind_is_rescued_by_mtime():
    # writer's clock 300 s slow: written_at looks old, the server's mtime is recent
    verdict, _ = judge(REC, mtime=1290.0, now=1300.0, mono=0.0, previous=None)
    assert verdict.fresh


def test_server_clock_behind_is_rescued_by_written_at():
    verdict, _ = judge(replace(REC, written_at=1290.0), mtime=990.0, now=1300.0, mono=0.0,
                       previous=None)
    assert verdict.fresh


def test_future_timestamps_count_as_age_zero():
    assert timestamp_age(replace(REC, written_at=5000.0), 5000.0, 1000.0) == 0.0


def test_writer_clock_far_ahead_goes_stale_when_updates_stop():
    future = replace(REC, written_at=10_000.0)
    first, seen = judge(future, mtime=10_000.0, now=1000.0, mono=100.0, previous=None)
    assert first.fresh
    later, seen2 = judge(future, mtime=10_000.0, now=1070.0, mono=170.0, previous=seen)
    assert not later.fresh
    assert "no update" in later.reason
    assert seen2 == seen


def test_advancing_seq_is_fresh_even_if_reader_clock_is_far_ahead():
    _, seen = judge(REC, mtime=1000.0, now=9000.0, mono=10.0, previous=None)
    verdict, seen2 = judge(replace(REC, seq=2), mtime=1000.0, now=9010.0, mono=20.0,
                           previous=seen)
    assert verdict.fresh
    assert seen2 == Sighting(("g1", 2), 20.0)


def test_new_generation_is_judged_by_timestamps():
    _, seen = judge(REC, mtime=1000.0, now=1001.0, mono=0.0, previous=None)
    old_new_gen = replace(REC, generation="g2", seq=1, written_at=500.0)
    verdict, seen2 = judge(old_new_gen, mtime=500.0, now=1002.0, mono=1.0, previous=seen)
    assert not verdict.fresh
    assert seen2.key == ("g2", 1)


def test_identity_is_the_cluster_id_else_the_generation():
    assert REC.identity == "g1" != replace(REC, generation="g2").identity  # no cluster id
    stored = replace(REC, cluster_id="c0ffee")
    assert stored.identity == replace(stored, generation="g2", head_ip="10.0.0.9").identity
    assert stored.identity != replace(stored, cluster_id="beef").identity


def test_record_with_cluster_id_round_trips_and_old_records_parse():
    stored = replace(REC, cluster_id="c0ffee")
    assert parse_record(stored.to_json(), REC.cluster_name) == stored
    data = json.loads(REC.to_json())
    del data["cluster_id"]  # written before the field existed
    assert parse_record(json.dumps(data), REC.cluster_name).cluster_id == ""


def test_write_is_visible_with_fsynced_rename(tmp_path, monkeypatch):
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd)))
    write_record(str(tmp_path / "head.json"), REC)
    assert len(calls) == 2  # the file, then the directory
