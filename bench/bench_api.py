"""HTTP API throughput and latency against a 100k-task SQLite database.

Three processes on loopback: this driver; the server, built by ``service.main``'s own
wiring (``build_service``: Store, scheduler loop, metrics, app, access log on) with a
FakeCluster instead of Ray; and a load generator (aiohttp client). The server and the
generator share the machine's cores.

Each endpoint is measured twice, ``--duration`` seconds each:

* saturated: ``--clients`` (50) connections send back to back -> the throughput (req/s);
  latency here is mostly queueing (Little's law: 50 in flight / throughput);
* paced: the same 50 connections send at the floor's rate in total (open loop, fixed
  schedule, latency counted from the scheduled send time so a stall is not hidden) ->
  p50/p99 at that load.

One more row mixes the two kinds of request: GET one task, paced at ``--probe-rate``
(200/s) from ``--probe-clients`` (10) connections, while ``--clients`` (50) other
connections submit flat out, each from its own load process. It shows whether a read
waits behind the writes (the store's lock, the event loop). The probe starts once the
submitters report they are warm and stops a second before they do, so it only sees the
mixed load.

Durability of POST: the store runs SQLite in WAL mode with ``v2.sqlite.synchronous``
(``--synchronous``; default ``NORMAL``, the service's default): an accepted task is
committed to the WAL before the 201. Both modes keep it through a kill -9 of the service;
``FULL`` also syncs the WAL to the disk at every commit, so it survives an OS crash or
power loss too, where ``NORMAL`` may lose the last commits.

The host line (``bench/hostinfo.py``: host, date, a calibration loop's CPU time, the load)
is printed before the run and the calibration again after it: a figure is compared with
one from the same host or beside its calibration, and a run whose two calibrations differ
by more than 20 % ran on a host that changed under it.

    .venv/bin/python bench/bench_api.py [--duration 8] [--clients 50] [--tasks 100000]
                                        [--probe-rate 200] [--probe-clients 10]
                                        [--synchronous FULL|NORMAL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench.hostinfo import calibration_ms, host_line

TOKEN = "bench-token"
T0 = 1_766_500_000.0
FLOORS = {"get_rps": 2000.0, "get_p99_ms": 10.0, "post_rps": 500.0, "post_p99_ms": 25.0,
          "rss_mb": 150.0}
FINISHED = ("SUCCEEDED", "FAILED", "CANCELED")


def spec_yaml(shared: str) -> str:
    return (
        f"workload: ppo\ncode_path: {shared}/code/verl\nmodel_id: Qwen/Qwen2.5-0.5B-Instruct\n"
        f"train_file: {shared}/data/train.parquet\nval_file: {shared}/data/test.parquet\n"
        "nnodes: 1\nn_gpus_per_node: 4\ntotal_training_steps: 10\n"
    )


# -- setup --------------------------------------------------------------------------------


def prefill(db_path: str, n: int, runnable: int) -> str:
    """100k tasks (``runnable`` of them QUEUED, the rest finished); returns one task id."""
    from service.domain.states import TaskState
    from service.store.writer import BulkTask, Store

    rng = random.Random(3)
    store = Store(db_path)
    try:
        queued = set(rng.sample(range(n), runnable))
        store.tasks.bulk_load(
            BulkTask(task_id=f"mvp2-ppo-20251223-{i // 65536:06d}-{i % 65536:04x}",
                     workload="ppo", nnodes=1, n_gpus_per_node=4, created_at=T0 + i * 0.01,
                     state=TaskState.QUEUED if i in queued else TaskState(rng.choice(FINISHED)))
            for i in range(n)
        )
        middle = sorted(queued)[runnable // 2]  # a queued task: its view counts its position
        return f"mvp2-ppo-20251223-{middle // 65536:06d}-{middle % 65536:04x}"
    finally:
        store.close()


def run_server(config: str, port: int) -> None:
    """The server process: production wiring, FakeCluster with one too-small node."""
    import logging

    from service.cluster.fake import FakeCluster
    from service.config_load import load_settings
    from service.main import LOG_FORMAT, build_service, serve
    from service.web.http_server import ServerLimits

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    settings = load_settings(config)
    cluster = FakeCluster()
    cluster.add_node("w1", gpus=2)  # no 4-GPU task ever fits: the queue only grows
    app = build_service(settings, TOKEN, cluster)
    serve(app, "127.0.0.1", port, ServerLimits.from_settings(settings))  # as argus-api


# -- load generator -------------------------------------------------------------------------


async def _load(url: str, method: str, body: bytes | None, clients: int, duration: float,
                rate: float | None) -> dict[str, Any]:
    import aiohttp

    headers = {"Authorization": f"Bearer {TOKEN}"}
    if body is not None:
        headers["Content-Type"] = "application/yaml"
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        async def one(scheduled: float) -> None:
            nonlocal errors
            async with session.request(method, url, data=body) as resp:
                await resp.read()
                if resp.status >= 300:
                    errors += 1
            latencies.append(time.perf_counter() - scheduled)

        for _ in range(min(clients, 20)):  # warm the connections up
            await one(time.perf_counter())
        latencies.clear()
        print("warm", flush=True)  # the driver may start other load on this signal
        start = time.perf_counter()
        end = start + duration

        async def worker(k: int) -> None:
            n = 0
            while True:
                if rate is None:
                    scheduled = time.perf_counter()
                else:  # worker k owns every clients-th slot of a fixed global schedule
                    scheduled = start + (k + n * clients) / rate
                    delay = scheduled - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if scheduled >= end:
                    return
                await one(scheduled)
                n += 1

        await asyncio.gather(*(worker(k) for k in range(clients)))
        elapsed = time.perf_counter() - start
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"requests": len(latencies), "errors": errors, "rps": len(latencies) / elapsed,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "mean_ms": statistics.fmean(latencies) * 1000}


def load_main(args: argparse.Namespace) -> None:
    body = args.body.encode() if args.body else None
    result = asyncio.run(_load(args.url, args.method, body, args.clients, args.duration,
                               args.rate))
    print(json.dumps(result))


# -- driver -----------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(base: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("server did not become healthy in time")


def _load_cmd(url: str, method: str, clients: int, duration: float, rate: float | None,
              body: str | None = None) -> list[str]:
    cmd = [sys.executable, __file__, "load", "--url", url, "--method", method,
           "--clients", str(clients), "--duration", str(duration)]
    if rate is not None:
        cmd += ["--rate", str(rate)]
    if body is not None:
        cmd += ["--body", body]
    return cmd


def _result(out: str) -> dict[str, Any]:
    return json.loads(out.splitlines()[-1])


def _run_load(url: str, method: str, args: argparse.Namespace, rate: float | None,
              body: str | None = None) -> dict[str, Any]:
    cmd = _load_cmd(url, method, args.clients, args.duration, rate, body)
    return _result(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def _run_mixed(get_url: str, post_url: str, body: str,
               args: argparse.Namespace) -> dict[str, Any]:
    """GET probe (paced) inside a window of POSTs from ``args.clients`` flat-out clients."""
    writers = subprocess.Popen(
        _load_cmd(post_url, "POST", args.clients, args.duration, None, body),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert writers.stdout is not None
        if writers.stdout.readline().strip() != "warm":  # blocks until warm-up is over
            raise SystemExit(f"POST load failed to start: {writers.communicate()[1]}")
        probe_cmd = _load_cmd(get_url, "GET", args.probe_clients,
                              max(1.0, args.duration - 1.0), args.probe_rate)
        probe = _result(
            subprocess.run(probe_cmd, check=True, capture_output=True, text=True).stdout
        )
        out, err = writers.communicate(timeout=args.duration + 60)
    finally:
        if writers.poll() is None:
            writers.kill()
    if writers.returncode != 0:
        raise SystemExit(f"POST load failed: {err}")
    probe["writers"] = _result(out)
    return probe


def drive(args: argparse.Namespace) -> int:
    import psutil

    print(host_line(), flush=True)
    root = Path(tempfile.mkdtemp(prefix="argus-bench-api-"))
    shared = root / "shared"
    db = str(shared / "common" / "db" / "mvp_v2.sqlite3")
    t = time.perf_counter()
    task_id = prefill(db, args.tasks, args.runnable)
    print(f"prefilled {args.tasks} tasks ({args.runnable} queued) in "
          f"{time.perf_counter() - t:.1f}s; GET target {task_id}")
    config = root / "config.yaml"
    # the load comes from one address, as from a reverse proxy, where the per-address
    # limits are set to 0 (docs/security.md): else 50 connections opened at once meet the
    # 16 half-open allowed, and the refused ones count as errors
    config.write_text(f"ray: {{shared_root: {shared}}}\nv2:\n  scheduler: {{tick_s: 1}}\n"
                      f"  sqlite: {{synchronous: {args.synchronous}}}\n"
                      "  api: {max_half_open_per_address: 0, max_connections_per_address: 0}\n")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = root / "server.log"
    with open(log_path, "w") as log_file:
        server = subprocess.Popen(
            [sys.executable, __file__, "serve", "--config", str(config), "--port", str(port)],
            stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(
                Path(__file__).resolve().parent.parent)},
        )
    try:
        _wait_healthy(base, server)
        get_url = f"{base}/api/v2/tasks/{task_id}"
        post_url = f"{base}/api/v2/tasks"
        body = spec_yaml(str(shared))
        proc = psutil.Process(server.pid)
        runs = {
            "GET saturated": (get_url, "GET", None, None),
            "GET paced": (get_url, "GET", FLOORS["get_rps"], None),
            "POST saturated": (post_url, "POST", None, body),
            "POST paced": (post_url, "POST", FLOORS["post_rps"], body),
        }
        results = {}
        for name, (url, method, rate, data) in runs.items():
            before = proc.cpu_times()
            results[name] = _run_load(url, method, args, rate, data)
            after = proc.cpu_times()
            cpu = (after.user - before.user) + (after.system - before.system)
            # includes warm-up requests and the scheduler thread: an upper bound
            results[name]["cpu_us"] = cpu / max(1, results[name]["requests"]) * 1e6
        mixed = _run_mixed(get_url, post_url, body, args)
        rss_mb = proc.memory_info().rss / 2**20
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    print(f"\n{args.clients} clients, {args.duration:g}s per row, server log {log_path}\n")
    print(f"{'run':<16}{'requests':>10}{'errors':>8}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'server CPU us/req':>19}")
    for name, r in results.items():
        print(f"{name:<16}{r['requests']:>10}{r['errors']:>8}{r['rps']:>10.0f}"
              f"{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['cpu_us']:>19.0f}")
    writers = mixed["writers"]
    print(f"{'GET during POSTs':<16}{mixed['requests']:>10}{mixed['errors']:>8}"
          f"{mixed['rps']:>10.0f}{mixed['p50_ms']:>9.2f}{mixed['p99_ms']:>9.2f}"
          f"{'':>19}")
    print(f"  (GET paced at {args.probe_rate:g}/s from {args.probe_clients} clients while "
          f"{args.clients} clients submit flat out: {writers['rps']:.0f} POST/s, "
          f"p99 {writers['p99_ms']:.1f} ms, {writers['errors']} errors)")
    print(f"machine load average after the run: {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs (other work on the host skews latency)")
    print(f"server RSS after the run: {rss_mb:.0f} MB")
    print(f"calibration after the run: {calibration_ms():.0f} ms (before: the host line above)")
    checks = [
        ("GET req/s (saturated)", results["GET saturated"]["rps"], ">=", FLOORS["get_rps"]),
        ("GET p99 ms (paced)", results["GET paced"]["p99_ms"], "<=", FLOORS["get_p99_ms"]),
        ("POST req/s (saturated)", results["POST saturated"]["rps"], ">=", FLOORS["post_rps"]),
        ("POST p99 ms (paced)", results["POST paced"]["p99_ms"], "<=", FLOORS["post_p99_ms"]),
        ("server RSS MB", rss_mb, "<=", FLOORS["rss_mb"]),
    ]
    ok = all(r["errors"] == 0 for r in (*results.values(), mixed, mixed["writers"]))
    print("\nfloor checks:")
    for name, value, op, floor in checks:
        passed = value >= floor if op == ">=" else value <= floor
        ok &= passed
        print(f"  {name:<24}{value:>9.1f} {op} {floor:<8g}{'ok' if passed else 'MISSED'}")
    print(f"POST durability: SQLite WAL, synchronous={args.synchronous} (survives kill -9"
          + ("; and power loss)" if args.synchronous == "FULL" else "; not power loss)"))
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role")
    s = sub.add_parser("serve")
    s.add_argument("--config", required=True)
    s.add_argument("--port", type=int, required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--url", required=True)
    ld.add_argument("--method", required=True)
    ld.add_argument("--clients", type=int, required=True)
    ld.add_argument("--duration", type=float, required=True)
    ld.add_argument("--rate", type=float)
    ld.add_argument("--body")
    for q in (p,):
        q.add_argument("--duration", type=float, default=8.0)
        q.add_argument("--clients", type=int, default=50)
        q.add_argument("--tasks", type=int, default=100_000)
        q.add_argument("--runnable", type=int, default=1_000)
        q.add_argument("--probe-rate", type=float, default=200.0)
        q.add_argument("--probe-clients", type=int, default=10)
        q.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="NORMAL")
    args = p.parse_args()
    if args.role == "serve":
        run_server(args.config, args.port)
        return 0
    if args.role == "load":
        load_main(args)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
