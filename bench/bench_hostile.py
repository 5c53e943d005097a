"""Hostile input against a running service: the floors the fuzz tier only bounds loosely.

The server is ``tests/fuzz/serve.py``: ``argus-api``'s own wiring and HTTP server (with its
limits, defaults unless given) on a fake cluster, in a process of its own. This driver:

1. sends the hostile corpus (``tests/fuzz/corpus.py``: the YAML bombs, owned overrides,
   overflowing numbers, undecodable Authorization headers, parser errors, oversized
   bodies ...) ``--rounds`` times while a thread polls ``/healthz`` every 10 ms; reports
   the slowest answer of each kind, the server's peak RSS growth, /healthz latency, and
   counts 5xx and crashes;
2. opens ``--slow-clients`` connections that never finish their headers, and reports how
   many were refused at once (connection cap), how many descriptors the server held, and
   when the last one was closed (header timeout);
3. sends a body at one byte every two seconds and reports when the 408 came.

Floors: 0 crashes, 0 x 5xx, every hostile body of at most 1 MiB answered within 100 ms,
at most 64 MB more peak RSS, /healthz p99 within 50 ms while the corpus runs.

    .venv/bin/python bench/bench_hostile.py [--rounds 5] [--slow-clients 1000]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from fuzz.corpus import build  # noqa: E402
from fuzz.harness import HealthProbe, Service, exchange, good_spec, start_service  # noqa: E402

from bench.hostinfo import host_line  # noqa: E402

FLOORS = {"answer_ms": 100.0, "rss_mb": 64.0, "health_p99_ms": 50.0}
MAX_HOSTILE_BODY = 1 << 20


def submit_one(service: Service) -> str:
    body = good_spec(service.shared).encode()
    answer = exchange(service.port, b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\nConnection: "
                      b"close\r\n" + service.auth + b"Content-Type: application/yaml\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert answer.status == 201, answer.raw
    return str(answer.json()["task_id"])  # type: ignore[index]


def run_corpus(service: Service, rounds: int) -> dict:
    cases = build(service.auth, service.shared, submit_one(service))
    worst: dict[str, float] = {}
    statuses: dict[int | None, int] = {}
    rss_before_kb = service.rss_kb()
    with HealthProbe(service) as probe:
        time.sleep(0.3)  # a few /healthz answers before the corpus starts
        for _ in range(rounds):
            for case in cases:
                answer = exchange(service.port, case.request)
                statuses[answer.status] = statuses.get(answer.status, 0) + 1
                if len(case.request) <= MAX_HOSTILE_BODY + 4096:
                    worst[case.name] = max(worst.get(case.name, 0.0), answer.seconds)
    return {
        "cases": len(cases), "requests": len(cases) * rounds, "statuses": statuses,
        "worst": worst, "rss_grown_mb": (service.peak_rss_kb() - rss_before_kb) / 1024,
        "health": probe,
    }


def slow_headers(service: Service, n: int) -> dict:
    baseline = service.open_fds()
    started = time.monotonic()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", service.port), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(s)
    opened_s = time.monotonic() - started
    refused = 0
    max_held = 0
    closed_at: dict[int, float] = {}
    while len(closed_at) < n and time.monotonic() - started < 120:
        max_held = max(max_held, service.open_fds() - baseline)
        for i, s in enumerate(socks):
            if i in closed_at:
                continue
            s.settimeout(0)
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data.startswith((b"HTTP/1.1 503", b"HTTP/1.1 429")):  # the cap; a share
                refused += 1
            closed_at[i] = time.monotonic() - started
        time.sleep(0.1)  # sampling the server's descriptors and our sockets
    for s in socks:
        s.close()
    return {"n": n, "opened_s": opened_s, "refused": refused, "max_held_fds": max_held,
            "all_closed_s": max(closed_at.values()) if len(closed_at) == n else None,
            "left_open": n - len(closed_at)}


def slow_body(service: Service) -> dict:
    sock = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    started = time.monotonic()
    sock.sendall(b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 + service.auth + b"Content-Type: application/yaml\r\n"
                 b"Content-Length: 1000\r\n\r\n")
    answer = b""
    sent = 0
    sock.settimeout(2.0)
    while time.monotonic() - started < 300:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            try:
                sock.sendall(b"x")  # one byte every two seconds
                sent += 1
            except OSError:
                break
            continue
        except ConnectionResetError:
            break  # closed with our unread bytes: a reset after the answer
        if not chunk:
            break
        answer += chunk
    sock.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else None
    return {"status": status, "after_s": time.monotonic() - started, "bytes_sent": sent}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--slow-clients", type=int, default=1000)
    p.add_argument("--header-timeout", type=float, help="v2.api.header_timeout_s")
    p.add_argument("--body-timeout", type=float, help="v2.api.body_timeout_s")
    p.add_argument("--max-connections", type=int, help="v2.api.max_connections")
    args = p.parse_args()
    api = {k: v for k, v in (("header_timeout_s", args.header_timeout),
                             ("body_timeout_s", args.body_timeout),
                             ("max_connections", args.max_connections)) if v is not None}
    root = Path(tempfile.mkdtemp(prefix="argus-bench-hostile-"))
    service = start_service(root, api=api)
    try:
        corpus = run_corpus(service, args.rounds)
        slow = slow_headers(service, args.slow_clients)
        body = slow_body(service)
        alive = service.alive()
        log = service.log()
    finally:
        service.stop()

    print(host_line())
    worst = corpus["worst"]
    slowest = sorted(worst.items(), key=lambda kv: kv[1], reverse=True)
    print(f"hostile corpus: {corpus['cases']} requests x {args.rounds} rounds = "
          f"{corpus['requests']}; answers by status: "
          f"{json.dumps({str(k): v for k, v in sorted(corpus['statuses'].items(), key=str)})}")
    print("slowest answers (each the worst of its rounds):")
    for name, seconds in slowest[:8]:
        print(f"  {seconds * 1000:7.1f} ms  {name}")
    health: HealthProbe = corpus["health"]
    lat = sorted(health.latencies)
    print(f"/healthz during the corpus: {len(lat)} answers, p50 "
          f"{lat[len(lat) // 2] * 1000:.1f} ms, p99 {health.p99() * 1000:.1f} ms, max "
          f"{lat[-1] * 1000:.1f} ms, {len(health.failures)} failures")
    print(f"server peak RSS growth over the corpus: {corpus['rss_grown_mb']:.1f} MB")
    closed = slow["all_closed_s"]
    print(f"\n{slow['n']} connections sending incomplete headers (opened in "
          f"{slow['opened_s']:.1f} s): {slow['refused']} refused at once (503: the connection "
          f"cap; 429: one address's share, half-open ones included), at most "
          f"{slow['max_held_fds']} descriptors held, all closed after "
          f"{'-' if closed is None else f'{closed:.1f}'} s ({slow['left_open']} left open)")
    print(f"a body at 1 byte / 2 s: {body['status']} after {body['after_s']:.1f} s "
          f"({body['bytes_sent']} bytes sent)")

    five_xx = sum(v for k, v in corpus["statuses"].items() if k is None or k >= 500)
    tracebacks = log.count("Traceback")
    checks = [
        ("crashes (server exited)", 0 if alive else 1, "<=", 0),
        ("5xx or no answer", five_xx, "<=", 0),
        ("tracebacks in the server log", tracebacks, "<=", 0),
        ("slowest hostile answer, ms", slowest[0][1] * 1000, "<=", FLOORS["answer_ms"]),
        ("peak RSS growth, MB", corpus["rss_grown_mb"], "<=", FLOORS["rss_mb"]),
        ("/healthz p99 ms", health.p99() * 1000, "<=", FLOORS["health_p99_ms"]),
        ("slow clients left open", slow["left_open"], "<=", 0),
        ("slow body answered 408", 0 if body["status"] == 408 else 1, "<=", 0),
    ]
    ok = True
    print("\nfloor checks:")
    for name, value, op, floor in checks:
        passed = value <= floor
        ok &= passed
        print(f"  {name:<32}{value:>9.1f} {op} {floor:<8g}{'ok' if passed else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
