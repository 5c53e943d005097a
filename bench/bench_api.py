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

``--compare REV`` runs the same load against two servers in one run: one from a ``git
worktree`` of REV (a commit, a branch; or a directory holding another checkout), one from
this checkout, each with its own database prefilled by its own code. Every row runs
``--rounds`` (2) times per server, alternating which goes first (REV, this, this, REV, ...)
so that a drift of the host weighs on both alike; it prints both rows and the ratio this /
REV of throughput and of server CPU a request, and the event loop thread's share of that CPU.
``--engine postgresql`` runs the server on PostgreSQL instead (``v2.store.url``), a
throwaway server started for the run (``tests/support/postgres.py``) with PostgreSQL's own
durability defaults (``fsync`` and ``synchronous_commit`` on: an accepted task is on the
disk before the 201), reached over TCP on loopback with a password, as a user's
(``--pg-socket``: its Unix socket; ``--pg-synchronous-commit off``: the server's setting,
an operator's choice, about SQLite's ``NORMAL``). SQLite runs at ``--synchronous``: compare
``FULL`` with PostgreSQL's default for the same durability. ``--engine both`` runs a
SQLite server and a PostgreSQL one side by side in one run, alternating as ``--compare``
does (``--rounds``), and prints the ratio PostgreSQL / SQLite of each row and, as its last
line, the engine's floors:
``engine: POST 0.45x (floor 0.5) MISSED, GET 0.80x (floor 0.7) ok``.
``--rows`` runs some of the rows only (the mixed row runs with all of them); ``--profile
DIR`` runs each server under cProfile in every thread (the event loop, the store's lanes,
the scheduler), timed by thread CPU time, and writes ``DIR/LABEL.prof``: compare the two
revisions function by function with ``pstats`` (the profiler makes every figure dearer).

    .venv/bin/python bench/bench_api.py [--duration 8] [--clients 50] [--tasks 100000]
                                        [--probe-rate 200] [--probe-clients 10]
                                        [--synchronous FULL|NORMAL]
                                        [--rows ROW,...] [--profile DIR]
                                        [--compare REV [--rounds 2]]
                                        [--engine sqlite|postgresql|both [--pg-socket]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench.hostinfo import calibration_ms, host_line

TOKEN = "bench-token"
PROFILE_ENV = "ARGUS_BENCH_PROFILE"  # the serve role: cProfile every thread, stats to this path
T0 = 1_766_500_000.0
FLOORS = {"get_rps": 2000.0, "get_p99_ms": 10.0, "post_rps": 500.0, "post_p99_ms": 25.0,
          "rss_mb": 150.0}
FLOOR_CHECKS = (  # (check, row, its figure, op, FLOORS key)
    ("GET req/s (saturated)", "GET saturated", "rps", ">=", "get_rps"),
    ("GET p99 ms (paced)", "GET paced", "p99_ms", "<=", "get_p99_ms"),
    ("POST req/s (saturated)", "POST saturated", "rps", ">=", "post_rps"),
    ("POST p99 ms (paced)", "POST paced", "p99_ms", "<=", "post_p99_ms"),
)
FINISHED = ("SUCCEEDED", "FAILED", "CANCELED")
ENGINES = ("sqlite", "postgresql", "both")
# --engine both: PostgreSQL's throughput at least this share of SQLite's (issue 54)
ENGINE_FLOORS = (("POST", "POST saturated", 0.5), ("GET", "GET saturated", 0.7))


def spec_yaml(shared: str) -> str:
    return (
        f"workload: ppo\ncode_path: {shared}/code/verl\nmodel_id: Qwen/Qwen2.5-0.5B-Instruct\n"
        f"train_file: {shared}/data/train.parquet\nval_file: {shared}/data/test.parquet\n"
        "nnodes: 1\nn_gpus_per_node: 4\ntotal_training_steps: 10\n"
    )


# -- setup --------------------------------------------------------------------------------


def _use_code(code: str | None) -> None:
    """Import the service from ``code`` (another checkout) rather than this one."""
    if code:
        sys.path.insert(0, code)


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
    dump = _profile_threads(os.environ[PROFILE_ENV]) if os.environ.get(PROFILE_ENV) else None
    app = build_service(settings, TOKEN, cluster)
    serve(app, "127.0.0.1", port, ServerLimits.from_settings(settings))  # as argus-api
    if dump is not None:
        dump()


def _profile_threads(path: str) -> Callable[[], None]:
    """cProfile, timed by each thread's CPU time, in every thread of this process from now
    on (the event loop, the store's and work lanes, the scheduler); the returned function
    writes their stats as one to ``path`` (read it with ``pstats``). Compare functions by
    their calls and the Python functions' own time: what a call that blocks (a lock, a
    query that lets the GIL go) is charged is not its CPU time."""
    import cProfile
    import pstats
    import threading

    profiles = [cProfile.Profile(time.thread_time)]
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)  # CPU, not waits for the GIL
        profiles.append(profile)
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()

    threading.Thread.run = profiled  # type: ignore[method-assign]
    profiles[0].enable()

    def dump() -> None:
        profiles[0].disable()
        pstats.Stats(*profiles).dump_stats(path)

    return dump


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


def _wait_healthy(base: str, proc: subprocess.Popen, timeout: float = 180.0) -> None:
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


ROWS = ("GET saturated", "GET paced", "POST saturated", "POST paced")


class Side:
    """One server under load: its code (None: this checkout), database, config and process."""

    def __init__(self, label: str, code: str | None, args: argparse.Namespace,
                 store_url: str | None = None) -> None:
        self.label = Path(label).name if code and Path(label).is_dir() else label
        self.code = code
        self.root = Path(tempfile.mkdtemp(prefix="argus-bench-api-"))
        shared = self.root / "shared"
        db = store_url or str(shared / "common" / "db" / "mvp_v2.sqlite3")
        t = time.perf_counter()
        cmd = [sys.executable, __file__, "prefill", "--db", db, "--tasks", str(args.tasks),
               "--runnable", str(args.runnable)] + (["--code", code] if code else [])
        self.task_id = subprocess.run(cmd, check=True, capture_output=True,
                                      text=True).stdout.split()[-1]
        print(f"prefilled {args.tasks} tasks ({args.runnable} queued) in "
              f"{time.perf_counter() - t:.1f}s; GET target {self.task_id}"
              + (f" ({label}: {code})" if code else ""))
        config = self.root / "config.yaml"
        # the load comes from one address, as from a reverse proxy, where the per-address
        # limits are set to 0 (docs/security.md): else 50 connections opened at once meet
        # the 16 half-open allowed, and the refused ones count as errors
        config.write_text(f"ray: {{shared_root: {shared}}}\nv2:\n  scheduler: {{tick_s: 1}}\n"
                          f"  sqlite: {{synchronous: {args.synchronous}}}\n"
                          + (f"  store: {{url: '{store_url}'}}\n" if store_url else "") +
                          "  api: {max_half_open_per_address: 0, "
                          "max_connections_per_address: 0}\n")
        port = _free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = self.root / "server.log"
        here = str(Path(__file__).resolve().parent.parent)
        self.profile = (str(Path(args.profile).resolve() / f"{self.label.replace('/', '_')}.prof")
                        if args.profile else None)
        profile_env = {PROFILE_ENV: self.profile} if self.profile else {}
        with open(self.log_path, "w") as log_file:
            self.server = subprocess.Popen(
                [sys.executable, __file__, "serve", "--config", str(config), "--port",
                 str(port)] + (["--code", code] if code else []),
                stdout=log_file, stderr=subprocess.STDOUT, cwd=code or here,
                env={**os.environ, "PYTHONPATH": code or here, **profile_env},
            )
        self.get_url = f"{self.base}/api/v2/tasks/{self.task_id}"
        self.post_url = f"{self.base}/api/v2/tasks"
        self.body = spec_yaml(str(shared))

    def start(self) -> None:
        import psutil

        _wait_healthy(self.base, self.server)
        self.proc = psutil.Process(self.server.pid)

    def cpu(self) -> tuple[float, float]:
        """The server's CPU seconds so far: all threads, and its main (event loop) thread."""
        times = self.proc.cpu_times()
        loop = next((t.user_time + t.system_time for t in self.proc.threads()
                     if t.id == self.proc.pid), 0.0)
        return times.user + times.system, loop

    def run(self, name: str, args: argparse.Namespace) -> dict[str, Any]:
        method = name.split()[0]
        url, body = (self.get_url, None) if method == "GET" else (self.post_url, self.body)
        rate = None if name.endswith("saturated") else FLOORS[f"{method.lower()}_rps"]
        before = self.cpu()
        result = _run_load(url, method, args, rate, body)
        after = self.cpu()
        # includes warm-up requests and the scheduler thread: an upper bound
        result["cpu_s"] = after[0] - before[0]
        result["loop_s"] = after[1] - before[1]
        result["cpu_us"] = result["cpu_s"] / max(1, result["requests"]) * 1e6
        return result

    def stop(self) -> None:
        self.server.send_signal(signal.SIGTERM)
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()


def alternation(rounds: int) -> list[tuple[int, int]]:
    """The order of the two servers (0: REV, 1: this checkout) in each round: ABBA..., so
    that a drift of the host over the run weighs on both alike."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    return [(0, 1) if r % 2 == 0 else (1, 0) for r in range(rounds)]


def merge(results: list[dict[str, Any]], duration: float) -> dict[str, Any]:
    """Rounds of one row on one server as one: requests, errors and CPU summed, throughput
    over the time loaded, percentiles the median of the rounds'."""
    requests = sum(r["requests"] for r in results)
    cpu_s = sum(r["cpu_s"] for r in results)
    return {"requests": requests, "errors": sum(r["errors"] for r in results),
            "rps": requests / (duration * len(results)),
            "p50_ms": statistics.median(r["p50_ms"] for r in results),
            "p99_ms": statistics.median(r["p99_ms"] for r in results),
            "cpu_us": cpu_s / max(1, requests) * 1e6,
            "loop_us": sum(r["loop_s"] for r in results) / max(1, requests) * 1e6}


def ratio(new: float, old: float) -> str:
    """``new / old`` as ``1.23x`` (``-`` when old is 0)."""
    return f"{new / old:.2f}x" if old else "-"


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[str]:
    """A checkout of ``rev``: the directory itself if it is one, else a detached git
    worktree made for the block and removed after it."""
    if Path(rev).is_dir():
        yield str(Path(rev).resolve())
        return
    here = Path(__file__).resolve().parent.parent
    path = tempfile.mkdtemp(prefix=f"argus-bench-api-{rev.replace('/', '_')}-")
    subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", "-f", path, rev],
                   check=True, capture_output=True, text=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", path],
                       check=False)


def _header(label: str = "") -> None:
    print(f"{'run':<16}{label}{'requests':>10}{'errors':>8}{'req/s':>10}{'p50 ms':>9}"
          f"{'p99 ms':>9}{'server CPU us/req':>19}" + ("  loop us/req" if label else ""))


def _row(name: str, r: dict[str, Any], label: str = "") -> str:
    line = (f"{name:<16}{label}{r['requests']:>10}{r['errors']:>8}{r['rps']:>10.0f}"
            f"{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['cpu_us']:>19.0f}")
    return line + (f"{r['loop_us']:>13.0f}" if label else "")


def _mixed_lines(mixed: dict[str, Any], args: argparse.Namespace, label: str = "") -> None:
    writers = mixed["writers"]
    print(f"{'GET during POSTs':<16}{label}{mixed['requests']:>10}{mixed['errors']:>8}"
          f"{mixed['rps']:>10.0f}{mixed['p50_ms']:>9.2f}{mixed['p99_ms']:>9.2f}"
          f"{'':>19}")
    print(f"  (GET paced at {args.probe_rate:g}/s from {args.probe_clients} clients while "
          f"{args.clients} clients submit flat out: {writers['rps']:.0f} POST/s, "
          f"p99 {writers['p99_ms']:.1f} ms, {writers['errors']} errors)")


def _alternate(sides: list[Side], args: argparse.Namespace
               ) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]], list[float]]:
    """Every row on both ``sides``, ``args.rounds`` times each, alternating which goes first
    (``alternation``); then the mixed row on each (with every row). Returns the merged rows,
    the mixed rows and each server's RSS (MB); the servers are stopped."""
    try:
        for side in sides:
            side.start()
        runs: dict[str, list[list[dict[str, Any]]]] = {n: [[], []] for n in args.rows}
        for name in args.rows:
            for order in alternation(args.rounds):
                for k in order:
                    runs[name][k].append(sides[k].run(name, args))
        mixed = ([_run_mixed(s.get_url, s.post_url, s.body, args) for s in sides]
                 if len(args.rows) == len(ROWS) else [])
        rss_mb = [s.proc.memory_info().rss / 2**20 for s in sides]
    finally:
        for side in sides:
            side.stop()
    merged = {n: [merge(runs[n][k], args.duration) for k in (0, 1)] for n in args.rows}
    return merged, mixed, rss_mb


def _side_by_side(sides: list[Side], merged: dict[str, list[dict[str, Any]]],
                  mixed: list[dict[str, Any]], rss_mb: list[float],
                  args: argparse.Namespace) -> int:
    """Both servers' rows, each row's ratio second / first, the mixed rows and the
    host after the run; 0 when no request failed."""
    width = max(len(s.label) for s in sides) + 2
    labels = [f" {s.label:<{width}}" for s in sides]
    _header(" " * (width + 1))
    for name in args.rows:
        for k in (0, 1):
            print(_row(name, merged[name][k], labels[k]))
        old, new = merged[name]
        print(f"{'':<16} {sides[1].label}/{sides[0].label}: req/s "
              f"{ratio(new['rps'], old['rps'])}, server CPU a request "
              f"{ratio(new['cpu_us'], old['cpu_us'])}, of which the event loop thread "
              f"{ratio(new['loop_us'], old['loop_us'])}")
    for k, m in enumerate(mixed):
        _mixed_lines(m, args, labels[k])
    print(f"machine load average after the run: {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs (other work on the host skews latency)")
    print("server RSS after the run: " + ", ".join(
        f"{s.label} {mb:.0f} MB" for s, mb in zip(sides, rss_mb, strict=True)))
    print(f"calibration after the run: {calibration_ms():.0f} ms (before: the host line above)")
    for side in sides:
        if side.profile:
            print(f"profile of {side.label}'s server, every thread: {side.profile}")
    errors = sum(r["errors"] for rows in merged.values() for r in rows)
    errors += sum(m["errors"] + m["writers"]["errors"] for m in mixed)
    return 0 if errors == 0 else 1


def compare(args: argparse.Namespace) -> int:
    """The same load against REV's server and this checkout's, alternating (see the module
    docstring)."""
    print(host_line(), flush=True)
    with checkout(args.compare) as code:
        sides = [Side(args.compare, code, args), Side("this", None, args)]
        merged, mixed, rss_mb = _alternate(sides, args)
    print(f"\n{args.clients} clients, {args.duration:g}s per row and round, {args.rounds} "
          f"rounds alternating ({args.compare} = {code}), server logs "
          f"{', '.join(str(s.log_path) for s in sides)}\n")
    return _side_by_side(sides, merged, mixed, rss_mb, args)


def engine_verdict(merged: dict[str, list[dict[str, Any]]]) -> tuple[str, bool]:
    """``engine: POST 0.45x (floor 0.5) MISSED, GET 0.80x (floor 0.7) ok`` from the merged rows
    (SQLite first, PostgreSQL second) and whether every floor measured holds."""
    parts, ok = [], True
    for what, row, floor in ENGINE_FLOORS:
        if row in merged:
            sqlite, postgres = merged[row]
            share = postgres["rps"] / sqlite["rps"] if sqlite["rps"] else 0.0
            ok &= share >= floor
            parts.append(f"{what} {share:.2f}x (floor {floor:.1f}) "
                         f"{'ok' if share >= floor else 'MISSED'}")
    return "engine: " + (", ".join(parts) or "no saturated row run"), ok


@contextlib.contextmanager
def postgres_server(args: argparse.Namespace) -> Iterator[Callable[[], str]]:
    """A throwaway PostgreSQL server with its own durability defaults for the run; yields
    a function that makes a fresh database with the store's schema (its URL)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.postgres import PgServer, binaries  # the test tier's throwaway server

    bindir = binaries()
    if bindir is None:
        raise SystemExit("--engine postgresql needs PostgreSQL's binaries (Debian package "
                         "postgresql: scripts/bootstrap.sh installs it)")
    commit = args.pg_synchronous_commit
    server = PgServer(bindir, durable=True, settings={"synchronous_commit": commit}).start()
    try:
        yield ((lambda: server.socket_url(server.store_database())) if args.pg_socket
               else server.store_database)
        print(f"PostgreSQL {bindir.parent.name}: fsync on, synchronous_commit {commit}"
              + (" (its defaults)" if commit == "on" else " (an operator's choice: a crash "
                 "of the database server may lose the last commits)")
              + f", over {'its Unix socket' if args.pg_socket else 'TCP on loopback'}")
    finally:
        server.stop()


def engines(args: argparse.Namespace) -> int:
    """A SQLite server and a PostgreSQL one under the same load, alternating (see the
    module docstring); the last line is the engine's floors."""
    print(host_line(), flush=True)
    with postgres_server(args) as database:
        sides = [Side("sqlite", None, args), Side("postgresql", None, args, database())]
        merged, mixed, rss_mb = _alternate(sides, args)
    print(f"\n{args.clients} clients, {args.duration:g}s per row and round, {args.rounds} "
          f"rounds alternating the engines, server logs "
          f"{', '.join(str(s.log_path) for s in sides)}\n")
    code = _side_by_side(sides, merged, mixed, rss_mb, args)
    print(f"durability: SQLite WAL, synchronous={args.synchronous}; PostgreSQL "
          f"synchronous_commit={args.pg_synchronous_commit}")
    line, ok = engine_verdict(merged)
    print(line)
    return code if ok else 1


def drive(args: argparse.Namespace) -> int:
    print(host_line(), flush=True)
    with contextlib.ExitStack() as stack:
        url = (stack.enter_context(postgres_server(args))()
               if args.engine == "postgresql" else None)
        side = Side("this", None, args, url)
        try:
            side.start()
            results = {name: side.run(name, args) for name in args.rows}
            mixed = (_run_mixed(side.get_url, side.post_url, side.body, args)
                     if len(args.rows) == len(ROWS) else None)
            rss_mb = side.proc.memory_info().rss / 2**20
        finally:
            side.stop()
    print(f"\n{args.clients} clients, {args.duration:g}s per row, server log {side.log_path}\n")
    _header()
    for name, r in results.items():
        print(_row(name, r))
    if mixed is not None:
        _mixed_lines(mixed, args)
    print(f"machine load average after the run: {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs (other work on the host skews latency)")
    print(f"server RSS after the run: {rss_mb:.0f} MB")
    print(f"calibration after the run: {calibration_ms():.0f} ms (before: the host line above)")
    checks = [(check, results[row][key], op, FLOORS[floor])
              for check, row, key, op, floor in FLOOR_CHECKS if row in results]
    checks.append(("server RSS MB", rss_mb, "<=", FLOORS["rss_mb"]))
    loaded = [*results.values(), *((mixed, mixed["writers"]) if mixed else ())]
    ok = all(r["errors"] == 0 for r in loaded)
    print("\nfloor checks:")
    for name, value, op, floor in checks:
        passed = value >= floor if op == ">=" else value <= floor
        ok &= passed
        print(f"  {name:<24}{value:>9.1f} {op} {floor:<8g}{'ok' if passed else 'MISSED'}")
    if args.engine == "postgresql":
        print(f"POST durability: PostgreSQL, synchronous_commit {args.pg_synchronous_commit}"
              + (" (survives kill -9 and power loss)" if args.pg_synchronous_commit == "on"
                 else " (survives kill -9 of the service, not of the database server)"))
    else:
        print(f"POST durability: SQLite WAL, synchronous={args.synchronous} (survives "
              "kill -9" + ("; and power loss)" if args.synchronous == "FULL"
                           else "; not power loss)"))
    return 0 if ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role")
    s = sub.add_parser("serve")
    s.add_argument("--config", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--code")
    f = sub.add_parser("prefill")
    f.add_argument("--db", required=True)
    f.add_argument("--tasks", type=int, required=True)
    f.add_argument("--runnable", type=int, required=True)
    f.add_argument("--code")
    ld = sub.add_parser("load")
    ld.add_argument("--url", required=True)
    ld.add_argument("--method", required=True)
    ld.add_argument("--clients", type=int, required=True)
    ld.add_argument("--duration", type=float, required=True)
    ld.add_argument("--rate", type=float)
    ld.add_argument("--body")
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--runnable", type=int, default=1_000)
    p.add_argument("--probe-rate", type=float, default=200.0)
    p.add_argument("--probe-clients", type=int, default=10)
    p.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="NORMAL")
    p.add_argument("--compare", metavar="REV",
                   help="also run REV's server (a git revision, or another checkout's "
                        "directory), alternating with this checkout's")
    p.add_argument("--rows", default=",".join(ROWS),
                   help="the rows to run, comma-separated (all: the mixed row too)")
    p.add_argument("--profile", metavar="DIR",
                   help="cProfile every thread of each server; stats to DIR/LABEL.prof")
    p.add_argument("--rounds", type=int, default=2,
                   help="with --compare or --engine both: runs of each row per server, "
                        "alternating (2)")
    p.add_argument("--engine", choices=ENGINES, default="sqlite",
                   help="the store's engine (sqlite); postgresql: a throwaway server; "
                        "both: the two side by side, alternating")
    p.add_argument("--pg-socket", action="store_true",
                   help="reach PostgreSQL through its Unix socket (default: TCP)")
    p.add_argument("--pg-synchronous-commit", choices=("on", "off"), default="on",
                   help="the PostgreSQL server's synchronous_commit (on: its default)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = sorted(set(rows) - set(ROWS))
    if unknown or not rows:
        p.error(f"--rows: unknown {unknown}, known {', '.join(ROWS)}")
    args.rows = [r for r in ROWS if r in rows]
    if args.role is None and args.rounds != 2 and not args.compare and args.engine != "both":
        p.error("--rounds needs --compare or --engine both")
    if args.compare and args.engine != "sqlite":
        p.error("--compare runs on SQLite: leave --engine out")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role == "serve":
        _use_code(args.code)
        run_server(args.config, args.port)
        return 0
    if args.role == "prefill":
        _use_code(args.code)
        print(prefill(args.db, args.tasks, args.runnable))
        return 0
    if args.role == "load":
        load_main(args)
        return 0
    if args.compare:
        return compare(args)
    return engines(args) if args.engine == "both" else drive(args)


if __name__ == "__main__":
    sys.exit(main())
