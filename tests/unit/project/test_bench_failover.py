"""The failover bench's verdict (bench/bench_failover.py): how it names the errors a client
saw, which floors a run missed, and its last line. Nothing is benchmarked here."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo: bench.*

from argus_client.errors import ArgusConnectionError, ServerError, error_for
from bench import bench_failover as bf


def test_a_failover_may_cost_connection_errors_and_503s_with_retry_after_only() -> None:
    assert bf.classify(ArgusConnectionError("refused")) == bf.CONNECTION
    assert bf.classify(ServerError(503, "unavailable", "restarting", None, 1.0)) == \
        bf.UNAVAILABLE
    assert bf.classify(ServerError(503, "unavailable", "no Retry-After")).startswith(
        "unexpected: ServerError 503")
    assert bf.classify(error_for(500, "internal", "boom")).startswith("unexpected:")
    assert bf.classify(error_for(404, "not_found", "no such task")).startswith(
        "unexpected: NotFound 404")
    assert bf.classify(RuntimeError("GET t answered another task")).startswith("unexpected:")


def test_every_floor_is_checked() -> None:
    fast = [bf.Round(2.5, 3.0), bf.Round(2.6, 3.4)]
    seen = collections.Counter({("read", bf.CONNECTION): 9, ("submit", bf.UNAVAILABLE): 2})
    assert bf.missed_floors(fast, 0, 0, "", seen, 0) == []
    slow = [bf.Round(2.5, 3.0), bf.Round(9.0, 10.5)]
    assert bf.missed_floors(slow, 0, 0, "", seen, 0) == ["round 2: admitting 10.5 s > 10 s"]
    never = [bf.Round(None, None, note="not admitting within 90 s")]
    assert len(bf.missed_floors(never, 0, 0, "", seen, 0)) == 2
    assert bf.missed_floors(fast, 1, 0, "", seen, 0) == ["1 accepted tasks lost"]
    assert bf.missed_floors(fast, 0, 2, "", seen, 0) == ["2 submitted twice"]
    assert bf.missed_floors(fast, 0, 0, "attempts [1, 2]", seen, 0) == [
        "the stand-in: attempts [1, 2]"]
    odd = seen + collections.Counter({("read", "unexpected: ServerError 500 boom"): 1})
    assert bf.missed_floors(fast, 0, 0, "", odd, 0) == ["1 unexpected client errors"]
    assert bf.missed_floors(fast, 0, 0, "", seen, 3) == ["3 submits given up by the SDK"]


def test_the_last_line_is_kill_to_the_next_admission() -> None:
    rounds = [bf.Round(2.0, 3.0), bf.Round(2.0, 5.0), bf.Round(2.0, 4.0)]
    assert bf.summary(rounds, 0, 0) == \
        "failover: median 4.0 s, worst 5.0 s, lost 0, submitted twice 0"
    assert bf.summary([*rounds, bf.Round(2.0, None)], 1, 2) == \
        "failover: median inf s, worst inf s, lost 1, submitted twice 2"


def test_arguments() -> None:
    args = bf.parse_args([])
    assert (args.mode, args.rounds, args.check) == ("sqlite-supervised", 5, False)
    assert args.submit_rate > 0 and args.read_rate > 0
    with pytest.raises(SystemExit):
        bf.parse_args(["--mode", "other"])
    with pytest.raises(SystemExit):
        bf.parse_args(["--rounds", "0"])
