"""One user cannot take the service from everyone: a hostile user against another's latency.

Processes on loopback: this driver; the server, built by ``service.main``'s own wiring
(``build_service``, default limits) with a FakeCluster; a hostile load process; a probe.

The database holds ``--tasks`` tasks (300k): ``--pending`` (32k) of them waiting in the
queue, the rest finished, each finished one with an ended attempt spread over 90 days (so
"usage over all history" has every one of them to account).

1. **Abuse** (``--duration`` s): user ``mallory`` (a non-admin token, and four console
   sessions signed in with it), from 127.0.0.2, keeps ``--streams`` (500) live streams
   open (a refused one is tried again after a second, as a script would), runs
   ``--lists`` (8) loops of ``GET /api/v2/tasks?limit=500`` and ``--usages`` (4) loops of
   ``GET /api/v2/usage`` over all history (from 127.0.0.4, her second machine); from
   127.0.0.3, ``--half-open`` (600) anonymous connections send half a request and
   reconnect a second after they are closed. The abuser's load process runs at nice 10
   (above the server's): on a real deployment its CPU is another machine's. Meanwhile user
   ``alice``, from 127.0.0.1, calls ``GET /api/v2/me`` (20/s), submits a task (5/s) and
   probes ``/healthz`` (10/s), open loop (latency from the scheduled send time, so a
   stall is not hidden). The same probe runs alone first (``--duration`` / 2 s): the
   baseline.
2. **Flood**: mallory submits JobSpecs padded with YAML comments to 100 KB, 8 at a time,
   until the service answers 429; the database's growth is measured (file + WAL).

**A shared host.** The server, alice's probe and mallory's load stand for three machines.
On a host that other jobs share (a loaded 2-core box), the others' processes decide the
server's latency more than mallory does; ``--server-nice -5`` (root only) runs the server
and the probe at that niceness, so the host's other tenants weigh less than they would
on the service's own machine (mallory's load stays 10 steps below them). The figures say
which was used, with the machine's load average.

Floors: alice's ``/me`` p99 <= 100 ms and submit p99 <= 250 ms under abuse, no
``/healthz`` answer other than 200 for her, and the flood stops at mallory's quota with
429 and ``Retry-After``, the database growing by at most the quota's bytes.

    .venv/bin/python bench/bench_fairness.py [--quick] [--tasks 300000] [--pending 32000]
                                             [--duration 20] [--streams 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

# the server process and its start-up as the API bench has them (bench/ is on the path)
from bench_api import _free_port, _wait_healthy, run_server

from bench.hostinfo import host_line

TOKEN = "bench-fairness-admin-token"
T0 = 1_766_500_000.0
DAY = 86_400.0
# mallory's console (streams) and her API client run on two machines of hers
HOSTILE, HOSTILE_API, PROBE, HALF_OPEN = "127.0.0.2", "127.0.0.4", "127.0.0.1", "127.0.0.3"
FLOORS = {"me_p99_ms": 100.0, "submit_p99_ms": 250.0}
PAD_BYTES = 100_000


def spec_yaml(shared: str, pad: int = 0) -> str:
    comment = "".join(f"# {'x' * 76}\n" for _ in range(pad // 80))
    return (f"{comment}workload: ppo\ncode_path: {shared}/code/verl\n"
            "model_id: Qwen/Qwen2.5-0.5B-Instruct\n"
            f"train_file: {shared}/data/train.parquet\nval_file: {shared}/data/test.parquet\n"
            "nnodes: 1\nn_gpus_per_node: 4\n")


# -- setup --------------------------------------------------------------------------------


def prefill(db_path: str, tasks: int, pending: int) -> dict[str, str]:
    """The database; returns the tokens of mallory and alice."""
    from service.domain.states import TaskState
    from service.domain.users import Role
    from service.store.writer import BulkTask, Store

    others = [f"user{i:02d}" for i in range(20)]
    store = Store(db_path)
    try:
        store.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=T0 - 100 * DAY)
        for name in (*others, "mallory", "alice"):
            store.users.create_user(name, Role.USER, T0 - 100 * DAY)
        span = 90 * DAY
        done = tasks - pending

        def rows():
            for i in range(done):
                start = T0 - span + i * span / done
                owner = "mallory" if i % 10 == 0 else others[i % 20]
                yield BulkTask(task_id=f"mvp2-{owner}-ppo-20251223-{i // 65536:06d}-"
                                       f"{i % 65536:04x}",
                               workload="ppo", state=TaskState.SUCCEEDED, created_at=start,
                               nnodes=1, n_gpus_per_node=4, user=owner,
                               attempt_span=(start, start + 3600.0))
            for i in range(pending):
                owner = others[i % 20]
                yield BulkTask(task_id=f"mvp2-{owner}-grpo-20251224-{i // 65536:06d}-"
                                       f"{i % 65536:04x}",
                               workload="grpo", state=TaskState.QUEUED,
                               created_at=T0 + i * 0.001, nnodes=1, n_gpus_per_node=8,
                               user=owner)

        store.tasks.bulk_load(rows())
        return {name: store.users.create_token(name, "bench", None, T0, max_live=10).secret
                for name in ("mallory", "alice")}
    finally:
        store.close()


# -- the hostile user -----------------------------------------------------------------------


async def _signed_in(base: str, token: str):
    import aiohttp

    session = aiohttp.ClientSession(
        cookie_jar=aiohttp.CookieJar(unsafe=True),
        connector=aiohttp.TCPConnector(limit=0, local_addr=(HOSTILE, 0)))
    async with session.post(f"{base}/ui/signin", data={"token": token, "next": "/ui/queue"},
                            allow_redirects=False) as resp:
        if resp.status != 303:
            raise SystemExit(f"sign-in failed: {resp.status} {await resp.text()}")
    return session


async def _hostile(base: str, token: str, args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    counts: dict[str, int] = {}

    def count(key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    sessions = [await _signed_in(base, token) for _ in range(4)]
    api = aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {token}"},
        connector=aiohttp.TCPConnector(limit=0, local_addr=(HOSTILE_API, 0)),
        timeout=aiohttp.ClientTimeout(total=120))
    end = time.monotonic() + args.duration

    async def stream(k: int) -> None:
        session = sessions[k % len(sessions)]
        while time.monotonic() < end:
            try:
                async with session.get(f"{base}/ui/live") as resp:
                    count(f"stream {resp.status}")
                    if resp.status == 200:
                        with_deadline = max(0.1, end - time.monotonic())
                        try:
                            async with asyncio.timeout(with_deadline):
                                async for _ in resp.content:
                                    pass
                        except TimeoutError:
                            return
                        continue
            except aiohttp.ClientError:
                count("stream error")
            await asyncio.sleep(1.0)

    async def loop(path: str, name: str) -> None:
        while time.monotonic() < end:
            started = time.monotonic()
            try:
                async with api.get(f"{base}{path}") as resp:
                    await resp.read()
                    count(f"{name} {resp.status}")
            except (aiohttp.ClientError, TimeoutError):
                count(f"{name} error")
            counts[f"{name} s"] = counts.get(f"{name} s", 0) + int(
                (time.monotonic() - started) * 1000)

    async def half_open() -> None:
        while time.monotonic() < end:
            try:
                reader, writer = await asyncio.open_connection(
                    base.split("//")[1].split(":")[0], int(base.rsplit(":", 1)[1]),
                    local_addr=(HALF_OPEN, 0))
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
                answer = await reader.read(64)
                count("half-open refused" if answer.startswith(b"HTTP/1.1 4") else
                      "half-open closed")
                writer.close()
            except OSError:
                count("half-open error")
            await asyncio.sleep(1.0)  # reconnect (the refusal says Retry-After: 1)

    jobs = [stream(k) for k in range(args.streams)]
    jobs += [loop("/api/v2/tasks?limit=500", "list") for _ in range(args.lists)]
    jobs += [loop("/api/v2/usage?from=0", "usage") for _ in range(args.usages)]
    jobs += [half_open() for _ in range(args.half_open)]
    print("started", flush=True)
    await asyncio.gather(*jobs)
    for s in (*sessions, api):
        await s.close()
    return counts


# -- the probe (another user) -----------------------------------------------------------------


async def _probe(base: str, token: str, shared: str, duration: float) -> dict[str, Any]:
    import aiohttp

    headers = {"Authorization": f"Bearer {token}"}
    lat: dict[str, list[float]] = {"me": [], "submit": [], "healthz": []}
    bad: dict[str, dict[int, int]] = {k: {} for k in lat}
    body = spec_yaml(shared)
    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, local_addr=(PROBE, 0)),
            timeout=aiohttp.ClientTimeout(total=60)) as session:
        start = time.perf_counter() + 0.5

        async def paced(name: str, rate: float, send) -> None:
            n = 0
            tasks = []
            while (scheduled := start + n / rate) < start + duration:
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(name, scheduled, send)))
                n += 1
            await asyncio.gather(*tasks)

        async def one(name: str, scheduled: float, send) -> None:
            try:
                async with send() as resp:
                    await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            lat[name].append(time.perf_counter() - scheduled)
            ok = 201 if name == "submit" else 200
            if status != ok:
                bad[name][status] = bad[name].get(status, 0) + 1

        await asyncio.gather(
            paced("me", 20.0, lambda: session.get(f"{base}/api/v2/me", headers=headers)),
            paced("submit", 5.0, lambda: session.post(
                f"{base}/api/v2/tasks", data=body,
                headers={**headers, "Content-Type": "application/yaml"})),
            paced("healthz", 10.0, lambda: session.get(f"{base}/healthz")),
        )
    out: dict[str, Any] = {}
    for name, values in lat.items():
        values.sort()
        out[name] = {"n": len(values), "not_ok": bad[name],
                     "p50_ms": values[len(values) // 2] * 1000,
                     "p99_ms": values[min(len(values) - 1, int(0.99 * len(values)))] * 1000,
                     "max_ms": values[-1] * 1000}
    return out


# -- the flood --------------------------------------------------------------------------------


async def _flood(base: str, token: str, shared: str, db_files: list[Path]) -> dict[str, Any]:
    import aiohttp

    def size() -> int:
        return sum(p.stat().st_size for p in db_files if p.exists())

    body = spec_yaml(shared, pad=PAD_BYTES)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    before = size()
    accepted = 0
    refusal: dict[str, Any] | None = None
    started = time.perf_counter()
    async with aiohttp.ClientSession(headers=headers) as session:
        async def one() -> None:
            nonlocal accepted, refusal
            while refusal is None:
                async with session.post(f"{base}/api/v2/tasks", data=body) as resp:
                    if resp.status == 201:
                        accepted += 1
                    elif resp.status == 429:
                        refusal = {"retry_after": resp.headers.get("Retry-After"),
                                   **(await resp.json())["error"]}
                    else:
                        raise SystemExit(f"flood: {resp.status} {await resp.text()}")

        await asyncio.gather(*(one() for _ in range(8)))
    return {"accepted": accepted, "seconds": time.perf_counter() - started,
            "grew_bytes": size() - before, "body_bytes": len(body.encode()),
            "refusal": refusal}


# -- driver -----------------------------------------------------------------------------------


def _child(role: str, base: str, token: str, args: argparse.Namespace, shared: str
           ) -> subprocess.Popen:
    # the abuser's load runs niced: on a real deployment it is another machine's CPU, and
    # here it must not take the server's and the probe's cores away
    nice = ["nice", "-n", str(args.server_nice + 10 if role == "hostile" else
                              args.server_nice)]
    cmd = [*nice, sys.executable, __file__, role, "--base", base, "--token", token,
           "--shared", shared,
           "--duration", str(args.duration), "--streams", str(args.streams),
           "--lists", str(args.lists), "--usages", str(args.usages),
           "--half-open", str(args.half_open)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout: float) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"load process failed: {err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def _print_probe(title: str, probe: dict[str, Any]) -> None:
    print(f"{title}:")
    for name, r in probe.items():
        print(f"  {name:<8} n={r['n']:<5} p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms"
              f"  max {r['max_ms']:7.1f} ms  not ok: {r['not_ok'] or 0}")


def drive(args: argparse.Namespace) -> int:
    import psutil

    root = Path(tempfile.mkdtemp(prefix="argus-bench-fairness-"))
    shared = root / "shared"
    db = shared / "common" / "db" / "mvp_v2.sqlite3"
    db.parent.mkdir(parents=True)
    t = time.perf_counter()
    tokens = prefill(str(db), args.tasks, args.pending)
    print(f"{args.tasks} tasks ({args.pending} waiting, the rest finished over 90 days) "
          f"loaded in {time.perf_counter() - t:.1f}s")
    config = root / "config.yaml"
    config.write_text(f"ray: {{shared_root: {shared}}}\nv2:\n  scheduler: {{tick_s: 1}}\n")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = root / "server.log"
    with open(log_path, "w") as log_file:
        server = subprocess.Popen(
            ["nice", "-n", str(args.server_nice), sys.executable, __file__, "serve",
             "--config", str(config), "--port", str(port)],
            stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(
                Path(__file__).resolve().parent.parent)})
    try:
        _wait_healthy(base, server, timeout=60.0)
        proc = psutil.Process(server.pid)
        baseline_args = argparse.Namespace(**{**vars(args), "duration": args.duration / 2})
        baseline = _finish(_child("probe", base, tokens["alice"], baseline_args, str(shared)),
                           args.duration + 120)
        hostile = _child("hostile", base, tokens["mallory"], args, str(shared))
        assert hostile.stdout is not None
        if hostile.stdout.readline().strip() != "started":
            raise SystemExit(f"hostile load failed: {hostile.communicate()[1][-2000:]}")
        time.sleep(2.0)  # let the streams and loops get going
        cpu_before = proc.cpu_times()
        probe_args = argparse.Namespace(**{**vars(args), "duration": args.duration - 4})
        probe = _finish(_child("probe", base, tokens["alice"], probe_args, str(shared)),
                        args.duration + 120)
        cpu_after = proc.cpu_times()
        abuse = _finish(hostile, args.duration + 180)
        flood = asyncio.run(_flood(base, tokens["mallory"], str(shared),
                                   [db, Path(f"{db}-wal")]))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    busy = ((cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system))
    print(f"server log {log_path}; machine load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs; server and probe at nice {args.server_nice}, the "
          f"abuser at nice {args.server_nice + 10}\n")
    _print_probe("alice alone (baseline)", baseline)
    _print_probe(f"alice while mallory abuses ({args.duration - 4:g} s)", probe)
    print(f"  server CPU during it: {busy / (args.duration - 4) * 100:.0f}% of one core")
    print("mallory's requests (status: count; '<name> s': total ms spent):")
    for key in sorted(abuse):
        print(f"  {key:<24}{abuse[key]:>8}")
    ref = flood["refusal"] or {}
    print(f"flood: {flood['accepted']} submits of {flood['body_bytes']} B accepted in "
          f"{flood['seconds']:.1f}s, then {ref.get('code')} (Retry-After "
          f"{ref.get('retry_after')}): {ref.get('message')}")
    print(f"  database grew by {flood['grew_bytes'] / 2**20:.1f} MiB")

    from service.policy.quotas import Limits

    quota = Limits()
    healthz_bad = sum(probe["healthz"]["not_ok"].values())
    checks = [
        ("alice /me p99 ms", probe["me"]["p99_ms"], "<=", FLOORS["me_p99_ms"]),
        ("alice submit p99 ms", probe["submit"]["p99_ms"], "<=", FLOORS["submit_p99_ms"]),
        ("alice /healthz not 200", healthz_bad, "<=", 0),
        ("alice errors (me, submit)", sum(probe["me"]["not_ok"].values())
         + sum(probe["submit"]["not_ok"].values()), "<=", 0),
        ("flood stopped with 429", 0 if ref.get("code") == "quota_exceeded" else 1, "<=", 0),
        # the JobSpec bytes the quota counts, plus SQLite's pages and the events: 10%
        ("flood DB growth MiB", flood["grew_bytes"] / 2**20, "<=",
         quota.max_spec_bytes_per_day / 2**20 * 1.1),
    ]
    ok = True
    print("\nfloor checks:")
    for name, value, op, floor in checks:
        passed = value >= floor if op == ">=" else value <= floor
        ok &= passed
        print(f"  {name:<28}{value:>9.1f} {op} {floor:<8g}{'ok' if passed else 'MISSED'}")
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role")
    s = sub.add_parser("serve")
    s.add_argument("--config", required=True)
    s.add_argument("--port", type=int, required=True)
    for role in ("hostile", "probe"):  # the hostile one runs at nice 10 (see drive)
        c = sub.add_parser(role)
        c.add_argument("--base", required=True)
        c.add_argument("--token", required=True)
        c.add_argument("--shared", required=True)
    for q in (p, *sub.choices.values()):
        q.add_argument("--duration", type=float, default=20.0)
        q.add_argument("--streams", type=int, default=500)
        q.add_argument("--lists", type=int, default=8)
        q.add_argument("--usages", type=int, default=4)
        q.add_argument("--half-open", type=int, default=600)
    p.add_argument("--server-nice", type=int, default=0,
                   help="niceness of the server and the probe (negative: root only); the "
                        "abuser runs 10 above it")
    p.add_argument("--tasks", type=int, default=300_000)
    p.add_argument("--pending", type=int, default=32_000)
    p.add_argument("--quick", action="store_true",
                   help="50k tasks (8k waiting), 12 s of abuse: a short run on a small host")
    args = p.parse_args()
    if args.role == "serve":
        run_server(args.config, args.port)
        return 0
    if args.role == "hostile":
        print(json.dumps(asyncio.run(_hostile(args.base, args.token, args))))
        return 0
    if args.role == "probe":
        print(json.dumps(asyncio.run(_probe(args.base, args.token, args.shared,
                                            args.duration))))
        return 0
    if args.quick:
        args.tasks, args.pending, args.duration = 50_000, 8_000, 12.0
    print(host_line(), flush=True)
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
