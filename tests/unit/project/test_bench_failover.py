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
    assert bf.missed_floors(fast, 0, 0, "", seen, 3) == ["3 requests given up after their retries"]


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


def test_the_leader_modes_floors() -> None:
    """leader: <= 15 s each round and <= 10 s median; pg-restart: <= 5 s after it is back."""
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    rounds = [bf.Round(0.1, 9.0), bf.Round(0.1, 12.0), bf.Round(0.1, 11.0)]
    assert bf.missed_floors([*rounds[:2], bf.Round(0.1, 4.0)], 0, 0, "", seen, 0,
                            "leader") == []
    assert bf.missed_floors(rounds, 0, 0, "", seen, 0, "leader") == [
        "median admitting 11.0 s > 10 s"]
    assert bf.missed_floors([bf.Round(0.1, 16.0)], 0, 0, "", seen, 0, "leader")[0].startswith(
        "round 1: admitting 16.0 s > 15 s")
    assert bf.missed_floors([bf.Round(0.1, 6.0)], 0, 0, "", seen, 0, "pg-restart") == [
        "round 1: admitting 6.0 s > 5 s"]


def test_the_proxy_takes_a_connection_to_an_instance_that_accepts() -> None:
    """One address for two instances: a dead one refuses, so the next connection lands on
    the other; with none left the client's connection is closed (it retries)."""
    import socket
    import threading

    from bench.failover_leader import Proxy

    def echo_server(tag: bytes) -> socket.socket:
        server = socket.create_server(("127.0.0.1", 0))

        def serve() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                conn.recv(16)
                conn.sendall(tag)
                conn.close()

        threading.Thread(target=serve, daemon=True).start()
        return server

    a, b = echo_server(b"A"), echo_server(b"B")
    proxy = Proxy([a.getsockname()[1], b.getsockname()[1]])

    def ask() -> bytes:
        """What came back; b"" when the proxy closed the connection (unread bytes make
        that a reset)."""
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as conn:
            try:
                conn.sendall(b"hi")
                return conn.recv(16)
            except ConnectionResetError:
                return b""

    try:
        assert {ask(), ask()} == {b"A", b"B"}  # in turn
        for dead in (a, b):  # shut down: the blocked accept() ends, the port refuses
            dead.shutdown(socket.SHUT_RDWR)
            dead.close()
            if dead is a:
                assert [ask() for _ in range(3)] == [b"B"] * 3
        assert ask() == b""
    finally:
        proxy.close()
