"""Webhook deliveries from a real ``argus-api`` (``tests/fuzz/serve.py``: the production
wiring on a fake cluster) to a receiver on loopback that verifies every signature with
the independent ``standardwebhooks`` package.

* latency: a burst of ``--events`` task.canceled events; for each, the time from the
  state change (the event's own timestamp, committed with its outbox row) to the
  receiver. Floor: p95 <= 2 s.
* kill -9: the same burst, the service killed with SIGKILL after half of it (deliveries
  in flight, the receiver answering in 20 ms) and started again on the same database.
  Floor: 0 events lost (duplicates are allowed and counted).

    .venv/bin/python bench/bench_webhooks.py [--events 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from support.webhook_burst import burst  # noqa: E402

from bench.hostinfo import host_line  # noqa: E402

FLOORS = {"p95_s": 2.0, "lost": 0}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=200)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        calm = burst(Path(tmp) / "latency", events=args.events)
        killed = burst(Path(tmp) / "kill", events=args.events, kill_after=args.events // 2,
                       receiver_delay_s=0.02)
    print(host_line())
    latencies = [a.latency_s for a in calm.arrivals]
    p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
    ok_latency = p95 <= FLOORS["p95_s"] and not calm.lost
    ok_kill = len(killed.lost) <= FLOORS["lost"] and not killed.refused
    print(f"latency  events={len(calm.expected)} delivered={len(calm.received)} "
          f"p50={p50 * 1000:.0f} ms p95={p95 * 1000:.0f} ms max={max(latencies) * 1000:.0f} ms "
          f"(floor p95 <= {FLOORS['p95_s']:g} s) {'OK' if ok_latency else 'FAIL'}")
    print(f"kill -9  events={len(killed.expected)} received={len(killed.received)} "
          f"lost={len(killed.lost)} duplicates={killed.deliveries - len(killed.received)} "
          f"bad signatures={len(killed.refused)} (floor lost = {FLOORS['lost']}) "
          f"{'OK' if ok_kill else 'FAIL'}")
    return 0 if ok_latency and ok_kill else 1


if __name__ == "__main__":
    raise SystemExit(main())
