"""Disk full under a running service: how it answers, and how soon it is back.

The server (``tests/fuzz/serve.py``: ``argus-api``'s wiring and server on a fake cluster)
keeps its database and shared root on a tmpfs of ``--size`` MB that this script mounts
(root only). A client submits tasks at ``--rate`` per second throughout and a thread
polls ``/healthz`` every 50 ms. Two rounds:

1. **full, then all space back**: a ballast file fills the tmpfs; submissions get 503
   ``storage_unavailable`` and ``/healthz`` says ``degraded``; the ballast is deleted.
   Recovery = from the delete to the later of the first 201 and ``/healthz`` ``ok``.
2. **full, then a little space back** (``--partial-kb``, the WAL-regrowth case): the
   disk is filled again and only part of the ballast is given back. Reported: how many
   submissions were accepted before the disk was full again. Without the store's
   recovery checkpoints the WAL, not yet at its checkpoint size, grows into that space
   frame by frame and the disk is full again after a handful.

Floor: recovery within 5 s of the space coming back.

    sudo .venv/bin/python bench/bench_storage.py [--size 16] [--rate 50] [--partial-kb 256]
"""

from __future__ import annotations

import argparse
import errno
import http.client
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from fuzz.harness import Service, good_spec, start_service  # noqa: E402

from bench.hostinfo import host_line  # noqa: E402

FLOOR_RECOVERY_S = 5.0


class Timeline:
    """Submissions and health answers, each with the time it came (monotonic)."""

    def __init__(self, service: Service, rate: float) -> None:
        self.service = service
        self.rate = rate
        self.submits: list[tuple[float, int]] = []
        self.health: list[tuple[float, str, str | None]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._submit, daemon=True),
                         threading.Thread(target=self._poll, daemon=True)]

    def __enter__(self) -> Timeline:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _submit(self) -> None:
        body = good_spec(self.service.shared)
        headers = {"Authorization": f"Bearer {self.service.token}",
                   "Content-Type": "application/yaml"}
        conn = http.client.HTTPConnection("127.0.0.1", self.service.port, timeout=30)
        while not self._stop.is_set():
            try:
                conn.request("POST", "/api/v2/tasks", body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                self.submits.append((time.monotonic(), resp.status))
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.service.port, timeout=30)
                self.submits.append((time.monotonic(), 0))
            self._stop.wait(1 / self.rate)

    def _poll(self) -> None:
        import json

        while not self._stop.is_set():
            try:
                _, body = self.service.get("/healthz", auth=False)
                doc = json.loads(body)
                self.health.append((time.monotonic(), doc["status"], doc.get("reason")))
            except (OSError, ValueError):
                self.health.append((time.monotonic(), "no answer", None))
            self._stop.wait(0.05)

    def first_submit(self, status: int, after: float) -> float | None:
        return next((t for t, s in self.submits if t >= after and s == status), None)

    def first_health(self, status: str, after: float) -> float | None:
        return next((t for t, s, _ in self.health if t >= after and s == status), None)

    def wait_for(self, predicate, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.02)  # the timeline threads fill it
        return False


def fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 16, 512):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=16, help="tmpfs size, MB")
    p.add_argument("--rate", type=float, default=50.0, help="submissions per second")
    p.add_argument("--partial-kb", type=int, default=256)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("bench_storage: mounting a tmpfs needs root (sudo)", file=sys.stderr)
        return 2
    mnt = Path(tempfile.mkdtemp(prefix="argus-bench-storage-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.size}m", "tmpfs", str(mnt)],
                   check=True)
    service = None
    try:
        service = start_service(mnt / "argus")
        ballast = mnt / "ballast"
        with Timeline(service, args.rate) as tl:
            time.sleep(2.0)  # submissions flowing
            # round 1: full, then everything back
            full_at = time.monotonic()
            fill(ballast)
            degraded = tl.wait_for(lambda: tl.first_health("degraded", full_at) is not None
                                   and tl.first_submit(503, full_at) is not None, 30)
            time.sleep(3.0)  # the service stays full for a while
            freed_at = time.monotonic()
            ballast.unlink()
            back = tl.wait_for(lambda: tl.first_health("ok", freed_at) is not None
                               and tl.first_submit(201, freed_at) is not None, 30)
            first_201 = tl.first_submit(201, freed_at)
            first_ok = tl.first_health("ok", freed_at)
            time.sleep(2.0)
            reason = next((r for _, s, r in tl.health if s == "degraded"), None)
            in_full = [s for t, s in tl.submits if full_at <= t < freed_at]
            # round 2: full again, a little space back
            full2_at = time.monotonic()
            fill(ballast)
            tl.wait_for(lambda: tl.first_submit(503, full2_at) is not None, 30)
            time.sleep(1.0)
            partial_at = time.monotonic()
            os.truncate(ballast, max(0, ballast.stat().st_size - args.partial_kb * 1024))
            tl.wait_for(lambda: tl.first_submit(503, partial_at + 0.5) is not None, 20)
            refull = tl.first_submit(503, partial_at + 0.5)
            accepted_partial = sum(1 for t, s in tl.submits
                                   if partial_at <= t <= (refull or time.monotonic())
                                   and s == 201)
            ballast.unlink()
            time.sleep(2.0)
        alive = service.alive()
        health_after = service.get("/healthz", auth=False)[1].decode()
        log = service.log()
    finally:
        if service is not None:
            service.stop()
        subprocess.run(["umount", "-l", str(mnt)], check=False)

    recovery = None
    if first_201 is not None and first_ok is not None:
        recovery = max(first_201, first_ok) - freed_at
    codes = {s: in_full.count(s) for s in sorted(set(in_full))}
    print(host_line())
    print(f"tmpfs {args.size} MB, {args.rate:g} submissions/s")
    print(f"round 1: disk full -> 503 storage_unavailable and /healthz degraded: "
          f"{'yes' if degraded else 'NO'} (reason: {reason!r}); answers while full: {codes}")
    print(f"         space back -> first 201 after "
          f"{'-' if first_201 is None else f'{first_201 - freed_at:.2f}'} s, /healthz ok after "
          f"{'-' if first_ok is None else f'{first_ok - freed_at:.2f}'} s")
    print(f"round 2: {args.partial_kb} KB back on a full disk -> {accepted_partial} submissions "
          f"accepted before it was full again")
    print(f"after both rounds: /healthz {health_after}")
    tracebacks = log.count("Traceback")
    checks = [
        ("recovery s", recovery if recovery is not None else float("inf"), FLOOR_RECOVERY_S),
        ("server alive (0 = yes)", 0 if alive else 1, 0),
        ("tracebacks in the server log", tracebacks, 0),
        ("5xx other than 503 while full", sum(v for k, v in codes.items()
                                              if k >= 500 and k != 503), 0),
    ]
    ok = bool(degraded and back)
    print("\nfloor checks:")
    for name, value, floor in checks:
        passed = value <= floor
        ok &= passed
        print(f"  {name:<32}{value:>9.2f} <= {floor:<8g}{'ok' if passed else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
