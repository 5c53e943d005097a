"""The hostile corpus (``corpus.py``) against a running service: 0 crashes, 0 x 5xx, every
error in the JSON shape, each answer fast, memory bounded, /healthz answering throughout;
and slow clients released by the server's timeouts and connection cap."""

from __future__ import annotations

import socket
import time

import pytest

from .conftest import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_CONNECTIONS
from .corpus import Case, build
from .harness import HealthProbe, Service, exchange, percentile

# Generous bounds for a shared CI machine; the floors (100 ms, 64 MB, 50 ms) are measured
# by bench/bench_hostile.py.
ANSWER_BOUND_S = 2.0
MEMORY_BOUND_MB = 64
HEALTH_P99_BOUND_S = 1.0


@pytest.fixture(scope="module")
def corpus(argus: Service, task_id: str) -> list[Case]:
    return build(argus.auth, argus.shared, task_id)


def check(case: Case, answer) -> None:
    assert answer.status is not None, f"{case.name}: closed without an answer"
    assert answer.status < 500, f"{case.name}: {answer.raw[:300]!r}"
    assert answer.status in case.expect, f"{case.name}: {answer.raw[:300]!r}"
    if case.interim_forbidden:
        assert b"100 Continue" not in answer.raw, case.name
    if answer.status >= 400:
        assert b"application/json" in answer.head.lower(), case.name
        error = answer.json()["error"]  # type: ignore[index]
        assert set(error) == {"code", "message", "details"}, case.name


def test_the_corpus_covers_the_review(corpus):
    names = " | ".join(c.name for c in corpus)
    for needle in ("60 KB deep", "alias bomb", "merge-key bomb", "alias in a complex key",
                   "5000 digits", "!!int 'abc'", "!!timestamp", "~transfer_queue", "hydra.run.dir",
                   "PYTHONPATH", "custom_reward_function.path", "data.custom_cls.path",
                   "attempt=9223372036854775808", "cursor seq:92233720368547",
                   "Authorization not UTF-8", "Expect: 100-continue", "HEAD /healthz",
                   "bad chunk", "header line over 8 KB", "bad method", "%EF%BC%91",
                   "%D9%A1%D9%A0", "1_0", "%205%20", "merge key overriding nnodes"):
        assert needle in names, needle


def test_every_hostile_request_gets_a_4xx(argus, corpus):
    failures = []
    for case in corpus:
        answer = exchange(argus.port, case.request)
        try:
            check(case, answer)
            assert answer.seconds <= ANSWER_BOUND_S, f"{case.name}: {answer.seconds:.2f} s"
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, "\n".join(failures)
    assert argus.alive()


def test_the_corpus_costs_bounded_memory_and_health_stays_up(argus, corpus):
    before_kb = argus.rss_kb()
    with HealthProbe(argus) as probe:
        time.sleep(0.2)
        for _ in range(2):
            for case in corpus:
                check(case, exchange(argus.port, case.request))
    grown_mb = (argus.peak_rss_kb() - before_kb) / 1024
    assert grown_mb <= MEMORY_BOUND_MB, f"peak RSS grew by {grown_mb:.0f} MB"
    assert not probe.failures, probe.failures[:5]
    assert len(probe.latencies) >= 20
    assert probe.p99() <= HEALTH_P99_BOUND_S, f"/healthz p99 {probe.p99() * 1000:.0f} ms"
    assert argus.alive()
    log = argus.log()
    assert "Traceback" not in log, log[-3000:]


def _partial_headers(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    return sock


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(0)
    try:
        return sock.recv(65536) is not None and True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_thousand_slow_clients_are_released(argus):
    baseline = argus.open_fds()
    started = time.monotonic()
    socks = [_partial_headers(argus.port) for _ in range(1000)]
    try:
        # those over the cap are answered 503 and closed at once: the service holds at
        # most the cap (a refused one lingers until its answer is flushed)
        deadline = time.monotonic() + HEADER_TIMEOUT_S / 2
        held = argus.open_fds() - baseline
        while time.monotonic() < deadline and held > MAX_CONNECTIONS + 16:
            time.sleep(0.05)
            held = argus.open_fds() - baseline
        assert held <= MAX_CONNECTIONS + 16, f"{held} descriptors held (cap {MAX_CONNECTIONS})"
        deadline = started + HEADER_TIMEOUT_S + 10
        while time.monotonic() < deadline and not all(_closed(s) for s in socks):
            time.sleep(0.1)  # polling sockets the server is expected to close
        assert all(_closed(s) for s in socks), "a slow client is still connected"
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and argus.open_fds() > baseline + 4:
        time.sleep(0.05)
    assert argus.open_fds() <= baseline + 4
    assert argus.get("/healthz", auth=False)[0] == 200


def test_a_body_at_one_byte_every_two_seconds_gets_408(argus):
    sock = socket.create_connection(("127.0.0.1", argus.port), timeout=10)
    started = time.monotonic()
    try:
        sock.sendall(b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     + argus.auth + b"Content-Type: application/yaml\r\n"
                     b"Content-Length: 200\r\n\r\nw")
        answer = b""
        sock.settimeout(0.5)
        while time.monotonic() - started < BODY_TIMEOUT_S + 10:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break  # closed with our unread bytes: a reset after the answer
            except TimeoutError:
                if int(time.monotonic() - started) % 2 == 0:
                    try:
                        sock.sendall(b"o")  # one more byte, every two seconds or so
                    except OSError:
                        break
                continue
            if not chunk:
                break
            answer += chunk
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert time.monotonic() - started <= BODY_TIMEOUT_S + 5


def test_health_latency_is_recorded_for_the_benchmark():
    assert percentile([0.1, 0.2, 0.3], 50) == 0.2
