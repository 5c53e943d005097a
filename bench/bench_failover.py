"""Failover: what a ``kill -9`` of the service costs the users of the queue (issue 54).

    sudo .venv/bin/python bench/bench_failover.py [--rounds 5] [--check]

``--mode sqlite-supervised`` (the only mode today): one ``argus-api`` on SQLite under the
supervisord that ``scripts/20_start_api.sh --local`` gives it, in a quick start of the
bench's own (``scripts/quickstart.sh`` with its own ``ARGUS_QUICKSTART_DIR`` and port, torn
down with ``quickstart.sh down`` at the end; needs root and ``unshare``, and "up" runs
``scripts/bootstrap.sh``, which syncs this checkout's ``.venv``: run the bench from a copy
of the repository with a ``.venv`` of its own where others share that one).

Under way the whole time:
- a stand-in run (examples/standin-verl, 1 GPU, a step a second) long enough to train
  through every round: it must end SUCCEEDED on attempt 1 with every step logged once
  (0 training lost: the restarted service took its attempt over, no second driver);
- client load through the SDK as a user makes it: ``--submit-rate`` submits a second
  (``ArgusClient.submit``, with its Idempotency-Key and its own retries through connection
  errors and 503s; each submit's key is also a label of the task, so two tasks of one key
  are found) and ``--read-rate`` reads a second (GET of a task the load had submitted). The
  load's tasks are 1x8-GPU gangs that never fit the quick start's 4-GPU nodes: accepted and
  kept waiting (``can never fit``), so the 2-core host runs no Ray job for them.

Each round SIGKILLs the service process (the pid supervisord reports) and measures
kill -> ``/healthz`` answers, and kill -> the next admission: a probe task (1 GPU, one
step, priority 100 so the waiting load does not hide it) submitted through the SDK right
after the kill, its retries polled every 0.2 s instead of the SDK's backoff (the figure is
the service's, not the client's pause), reaching SUBMITTED (Ray accepted its attempt).
Across the run: accepted tasks lost (an id the SDK returned that is not there at the end),
tasks submitted twice (two tasks for one key; a Ray job beyond one per task and attempt,
by the ``argus_task_id``/``argus_attempt`` metadata of Ray's job list; a second attempt of
the stand-in or of a probe), and every error a client saw by kind: a connection error, a
503 with ``Retry-After``, or anything else (a failure).

``--mode leader`` (issue 54 item 3; ``bench/failover_leader.py``): two instances on one
PostgreSQL behind one address (the quick start's, supervised, and a second one on another
port in a UTS namespace of its own: another host to the lease); each round kills the
leader, measuring the same figures with the other instance taking the scheduler over.
The issue's load for it: ``--rounds 10 --submit-rate 20 --read-rate 200``; floors
<= 10 s median and <= 15 s worst.

``--mode rolling`` (issue 54 item 6): the same pair; each round restarts one instance
cleanly (SIGTERM, then started again: a rolling upgrade's step), B then A then B...;
floors: 0 lost, 0 twice, no submit given up, only connection errors and 503s.

``--mode pg-restart``: the same pair; each round stops the PostgreSQL server for
``--outage`` seconds (a fast shutdown: every connection dropped) and starts it again;
the figures are measured from the server being back; floors: admitting <= 5 s after it,
0 lost, 0 twice, only connection errors and 503s with ``Retry-After`` (no 500).

The last line is ``failover: median X s, worst Y s, lost N, submitted twice N`` (X, Y:
kill -> the next admission). ``--check`` exits 1 when a floor of the issue for the mode is
missed: answering and admitting <= 10 s after each kill, 0 lost, 0 twice, the stand-in on
attempt 1 with no step lost or repeated, no unexpected client error, no submit given up.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import copy
import json
import os
import random
import re
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.hostinfo
sys.path.insert(0, str(ROOT / "clients" / "python"))  # argus_client
sys.path.insert(0, str(ROOT / "tests"))  # support.quickstart, support.postgres

import yaml  # noqa: E402
from support.quickstart import QuickStartRun, usable  # noqa: E402

from argus_client import ArgusClient  # noqa: E402
from argus_client.errors import ApiError, ArgusConnectionError, NotFound  # noqa: E402
from argus_client.retry import retrying  # noqa: E402
from bench import failover_leader  # noqa: E402
from bench.hostinfo import host_line  # noqa: E402

MODES = ("sqlite-supervised", "leader", "rolling", "pg-restart")
PG_BACK_S = 5.0  # issue 54: PostgreSQL restarted under load -> admitting again
FLOOR_S = 10.0  # issue 54, the service alone on SQLite: kill -9 -> answering and admitting
LEADER_MEDIAN_S, LEADER_WORST_S = 10.0, 15.0  # issue 54, the leader killed
ADMITTED = ("SUBMITTED", "RUNNING", "SUCCEEDED")
ENDED = ("SUCCEEDED", "FAILED", "CANCELED")
READ_PATIENCE_S = 30.0  # a reading client's retries (the SDK's wait and logs: 300 s)
NEVER_FITS_GPUS = 8  # the quick start's workers have 4 GPUs each
CONNECTION = "connection error"
UNAVAILABLE = "503 with Retry-After"


def classify(exc: BaseException) -> str:
    """The kind of an error a client saw: the two a failover may cost, else what it was."""
    if isinstance(exc, ArgusConnectionError):
        return CONNECTION
    if isinstance(exc, ApiError) and exc.status == 503 and exc.retry_after_s is not None:
        return UNAVAILABLE
    status = getattr(exc, "status", "")
    return f"unexpected: {type(exc).__name__} {status} {str(exc)[:80]}".replace("  ", " ")


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str,
             every_s: float = 0.25) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(every_s)
    raise TimeoutError(f"not within {timeout_s:g} s: {what}")


class QuickStart(QuickStartRun):
    """A quick start of the bench's own (``tests/support/quickstart.py``), and what the
    bench reads of it."""

    def __init__(self) -> None:
        super().__init__(prefix="argus-failover-")
        self.job_url = ""

    def up(self, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        done = super().up(timeout_s)
        self.job_url = json.loads((self.state / "local.json").read_text())["job_server_url"]
        return done

    def down(self, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        done = super().down(timeout_s)
        if done.returncode != 0:
            print("quickstart.sh down failed:\n" + done.stdout[-2000:] + done.stderr[-2000:])
        return done

    def spec(self, *, steps: int, gpus: int, labels: dict[str, str],
             priority: int | None = None) -> dict[str, Any]:
        """The quick start's demo JobSpec, resized: ``steps`` a second apart on ``gpus``."""
        spec = yaml.safe_load((self.state / "examples" / "demo-ppo.yaml").read_text())
        spec.update(total_training_steps=steps, n_gpus_per_node=gpus, labels=labels)
        spec["overrides"] = [re.sub(r"duration_s=[0-9]*", f"duration_s={steps}", o)
                             for o in spec.get("overrides", [])]
        if priority is not None:
            spec["priority"] = priority
        return spec

    def ray_jobs(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.job_url + "/api/jobs/", timeout=30) as response:
            return json.loads(response.read())


@dataclass
class Load:
    """Client load through the SDK: submits and reads on thread pools, paced."""

    client: ArgusClient
    submit_rate: float
    read_rate: float
    run_id: str
    spec: dict[str, Any]
    accepted: dict[str, str] = field(default_factory=dict)  # idempotency key -> task id
    errors: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    given_up: int = 0
    reads_ok: int = 0
    reads_given_up: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def saw(self, source: str, exc: BaseException) -> None:
        with self.lock:
            self.errors[(source, classify(exc))] += 1

    def submit_one(self) -> None:
        key = secrets.token_hex(12)
        spec = copy.deepcopy(self.spec)
        spec["labels"] = {"bench": self.run_id, "key": key}
        try:
            task_id = self.client.submit(spec, idempotency_key=key,
                                         on_retry=lambda exc, _s: self.saw("submit", exc)).task_id
        except Exception as exc:  # the SDK gave up, or a non-retried error
            self.saw("submit", exc)
            with self.lock:
                self.given_up += 1
            return
        with self.lock:
            self.accepted[key] = task_id

    def read_one(self) -> None:
        """One read, retried as a client that retries (the SDK's backoff, 30 s of
        patience): each failure seen is counted, and a read given up at the end."""
        with self.lock:
            ids = list(self.accepted.values())

        def read() -> None:
            if not ids:
                self.client.me()
                return
            task_id = random.choice(ids)
            if self.client.get(task_id).task_id != task_id:
                raise RuntimeError(f"GET {task_id} answered another task")

        try:
            retrying(read, deadline=time.monotonic() + READ_PATIENCE_S, clock=time.monotonic,
                     sleep=time.sleep, on_retry=lambda exc, _s: self.saw("read", exc),
                     first=0.2, cap=2.0)
        except Exception as exc:
            self.saw("read", exc)
            with self.lock:
                self.reads_given_up += 1
            return
        with self.lock:
            self.reads_ok += 1

    def pace(self, rate: float, work: Callable[[], None], workers: int) -> None:
        if rate <= 0:
            return
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            due = time.monotonic()
            while not self.stop.is_set():
                pool.submit(work)
                due += 1.0 / rate
                self.stop.wait(max(0.0, due - time.monotonic()))

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.pace, args=(self.submit_rate, self.submit_one,
                                                            32), daemon=True),
                   threading.Thread(target=self.pace, args=(self.read_rate, self.read_one, 8),
                                    daemon=True)]
        for thread in threads:
            thread.start()
        return threads


@dataclass
class Round:
    answering_s: float | None = None
    admitting_s: float | None = None
    probe: str = ""
    note: str = ""


def state_of(client: ArgusClient, task_id: str) -> str:
    try:
        return client.get(task_id).state
    except Exception:
        return "unreachable"


@dataclass
class Target:
    """What a round kills: ``kill()`` ('' or why not), ``answers()`` (the clients'
    address answers), ``after()`` (a note once the round is over)."""

    kill: Callable[[], str]
    answers: Callable[[], bool]
    after: Callable[[], str]


def supervised_target(qs: QuickStart) -> Target:
    """The quick start's one service: its pid must change (its supervisor restarted it)."""
    killed: list[int] = []

    def kill() -> str:
        pid = qs.service_pid()
        if pid is None:
            return "supervisord names no service pid"
        killed.append(pid)
        os.kill(pid, signal.SIGKILL)
        return ""

    return Target(kill, qs.answers,
                  lambda: "the pid did not change" if qs.service_pid() in killed[-1:] else "")


def kill_round(qs: QuickStart, target: Target, reader: ArgusClient, prober: ArgusClient,
               load: Load, run_id: str, timeout_s: float) -> Round:
    """Kill the target; kill -> its address answers, kill -> a probe submitted after the
    kill is admitted (SUBMITTED or on)."""
    result = Round()
    submitted: dict[str, str] = {}
    result.note = target.kill()
    killed = time.monotonic()  # a kill returns at once; a database's outage once it is over
    if result.note:
        return result

    def probe() -> None:
        spec = qs.spec(steps=1, gpus=1, priority=100,
                       labels={"bench": run_id, "probe": secrets.token_hex(4)})
        try:
            submitted["id"] = prober.submit(
                spec, on_retry=lambda exc, _s: load.saw("probe submit", exc)).task_id
        except Exception as exc:
            load.saw("probe submit", exc)
            submitted["error"] = classify(exc)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    while time.monotonic() - killed < timeout_s:
        now = time.monotonic() - killed
        if result.answering_s is None and target.answers():
            result.answering_s = now
        if "error" in submitted:
            result.note = f"probe submit failed: {submitted['error']}"
            break
        if "id" in submitted:
            state = state_of(reader, submitted["id"])
            if state in ADMITTED:
                result.admitting_s = time.monotonic() - killed
                break
            if state in ENDED:
                result.note = f"probe {submitted['id']} {state}"
                break
        time.sleep(0.1)
    else:
        result.note = f"not admitting within {timeout_s:g} s"
    result.probe = submitted.get("id", "")
    if after := target.after():
        result.note = (result.note + "; " if result.note else "") + after
    return result


def count_lost(client: ArgusClient, load: Load) -> list[str]:
    lost = []
    for key, task_id in load.accepted.items():
        try:
            task = client.get(task_id)
        except NotFound:
            lost.append(task_id)
            continue
        if (task.labels or {}).get("key") != key:
            lost.append(f"{task_id} (labels {task.labels})")
    return lost


def count_twice(client: ArgusClient, qs: QuickStart, run_id: str, keys: set[str],
                single_attempt: list[str]) -> tuple[int, list[str], str]:
    """Tasks of one key beyond the first, Ray jobs beyond one per (task, attempt), and
    attempts beyond the first of the tasks that must have one (stand-in, probes); with
    what was looked at. An accepted key that the listing misses is named too."""
    by_key: collections.Counter[str] = collections.Counter()
    cursor = None
    while True:
        page = client.list(labels={"bench": run_id}, user="all", cursor=cursor, limit=500)
        for task in page.tasks:
            if "key" in (task.labels or {}):
                by_key[task.labels["key"]] += 1
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    found = [f"key {k}: {n} tasks" for k, n in by_key.items() if n > 1]
    found += [f"key {k}: not listed" for k in sorted(keys - set(by_key))]
    jobs: collections.Counter[tuple[str, str | None]] = collections.Counter()
    attempts: dict[str, set[str | None]] = collections.defaultdict(set)
    for job in qs.ray_jobs():
        meta = job.get("metadata") or {}
        if "argus_task_id" in meta:
            jobs[(meta["argus_task_id"], meta.get("argus_attempt"))] += 1
            attempts[meta["argus_task_id"]].add(meta.get("argus_attempt"))
    found += [f"Ray: {t} attempt {a}: {n} jobs" for (t, a), n in jobs.items() if n > 1]
    found += [f"Ray: {t} attempts {sorted(map(str, attempts[t]))}" for t in single_attempt
              if len(attempts[t]) > 1]
    extra = sum(n - 1 for n in by_key.values() if n > 1)
    extra += sum(n - 1 for n in jobs.values() if n > 1)
    extra += sum(len(attempts[t]) - 1 for t in single_attempt if len(attempts[t]) > 1)
    looked = (f"{len(by_key)} keys in {sum(by_key.values())} tasks listed by label, "
              f"{sum(jobs.values())} Ray jobs of Argus by argus_task_id/argus_attempt")
    return extra, found, looked


def standin_outcome(client: ArgusClient, task_id: str, steps: int, timeout_s: float) -> str:
    """'' when the stand-in ended SUCCEEDED on attempt 1 with steps 1..N once each."""
    try:
        wait_for(lambda: state_of(client, task_id) in ENDED, timeout_s, f"{task_id} to end", 1)
    except TimeoutError as exc:
        return str(exc)
    state = state_of(client, task_id)
    try:
        tries = [a.attempt_no for a in client.attempts(task_id)]
        text = client.logs(task_id, attempt=1, tail=100000).text
    except Exception as exc:  # the run's verdict needs both: a failure, said as such
        return f"its attempts or log could not be read: {classify(exc)}"
    logged = [int(s) for s in re.findall(r"\] step:(\d+) - ", text)]
    problems = []
    if state != "SUCCEEDED":
        problems.append(f"ended {state}")
    if tries != [1]:
        problems.append(f"attempts {tries}")
    if logged != list(range(1, steps + 1)):
        problems.append(f"steps logged {len(logged)}, not 1..{steps} once each")
    return "; ".join(problems)


def missed_floors(rounds: list[Round], lost: int, twice: int, standin: str,
                  errors: collections.Counter[tuple[str, str]], given_up: int,
                  mode: str = MODES[0]) -> list[str]:
    """The floors of ``mode`` that a run missed (none: every one held): sqlite-supervised
    answers and admits <= 10 s every round; leader admits <= 10 s median, <= 15 s worst."""
    missed = []
    worst = {"leader": LEADER_WORST_S, "pg-restart": PG_BACK_S}.get(mode, FLOOR_S)
    for n, r in enumerate(rounds, 1):
        if r.answering_s is None or r.answering_s > FLOOR_S:
            missed.append(f"round {n}: answering {r.answering_s} s > {FLOOR_S:g} s")
        if r.admitting_s is None or r.admitting_s > worst:
            missed.append(f"round {n}: admitting {r.admitting_s} s > {worst:g} s "
                          f"{r.note}".rstrip())
    admits = [r.admitting_s for r in rounds if r.admitting_s is not None]
    if mode == "leader" and admits and statistics.median(admits) > LEADER_MEDIAN_S:
        missed.append(f"median admitting {statistics.median(admits):.1f} s > "
                      f"{LEADER_MEDIAN_S:g} s")
    if lost:
        missed.append(f"{lost} accepted tasks lost")
    if twice:
        missed.append(f"{twice} submitted twice")
    if standin:
        missed.append(f"the stand-in: {standin}")
    unexpected = sum(n for (_, kind), n in errors.items() if kind not in (CONNECTION, UNAVAILABLE))
    if unexpected:
        missed.append(f"{unexpected} unexpected client errors")
    if given_up:
        missed.append(f"{given_up} requests given up after their retries")
    return missed


def summary(rounds: list[Round], lost: int, twice: int) -> str:
    """The last line: kill -> the next admission's median and worst (inf: a round never
    admitted)."""
    admits = [r.admitting_s for r in rounds]
    done = [a for a in admits if a is not None]
    median = statistics.median(admits) if len(done) == len(admits) and done else float("inf")
    worst = max(done) if len(done) == len(admits) and done else float("inf")
    return (f"failover: median {median:.1f} s, worst {worst:.1f} s, lost {lost}, "
            f"submitted twice {twice}")


def print_report(args: argparse.Namespace, rounds: list[Round], load: Load, lost: list[str],
                 twice: tuple[int, list[str], str], standin: str) -> bool:
    what = {"leader": "kill -9 of the leading argus-api",
            "pg-restart": f"PostgreSQL stops for {args.outage:g} s (two instances on it)",
            "rolling": "clean restarts (SIGTERM) of each argus-api in turn"}.get(
        args.mode, "kill -9 of argus-api")
    print(f"mode {args.mode}: {args.rounds} {what}, {args.interval:g} s apart, "
          f"under {args.submit_rate:g} submits/s and {args.read_rate:g} reads/s through the "
          "SDK; a stand-in run trains throughout")
    print(f"{'round':>5}  {'answering s':>11}  {'admitting s':>11}  note")
    for n, r in enumerate(rounds, 1):
        ans = f"{r.answering_s:.1f}" if r.answering_s is not None else "-"
        adm = f"{r.admitting_s:.1f}" if r.admitting_s is not None else "-"
        print(f"{n:>5}  {ans:>11}  {adm:>11}  {r.note}")
    print(f"accepted {len(load.accepted)} submits ({load.given_up} given up), "
          f"{load.reads_ok} reads answered ({load.reads_given_up} given up after retries)")
    print("errors clients saw, by kind: " + (", ".join(
        f"{source} {kind}: {n}" for (source, kind), n in sorted(load.errors.items()))
        or "none"))
    print(f"lost: {len(lost)} of {len(load.accepted)} accepted {lost[:5] if lost else ''}")
    count, found, looked = twice
    print(f"submitted twice: {count} ({looked}) {found[:5] if found else ''}")
    print(f"stand-in: {standin or 'SUCCEEDED on attempt 1, every step logged once'}")
    missed = missed_floors(rounds, len(lost), count, standin, load.errors,
                           load.given_up + load.reads_given_up, args.mode)
    admitting = {"leader": f"admitting <= {LEADER_MEDIAN_S:g} s median and <= "
                           f"{LEADER_WORST_S:g} s worst",
                 "pg-restart": f"admitting <= {PG_BACK_S:g} s after the database is back"}.get(
        args.mode, f"admitting <= {FLOOR_S:g} s")
    print(f"floors (answering <= {FLOOR_S:g} s each round, {admitting}, 0 lost, 0 twice, "
          "no training lost, only connection errors and 503s with Retry-After): "
          + ("held" if not missed else "MISSED: " + "; ".join(missed)))
    print(summary(rounds, len(lost), count))
    return not missed


def run(args: argparse.Namespace, qs: QuickStart, target: Target, url: str) -> bool:
    """The rounds against ``target``, the clients on ``url``; True when every floor held."""
    run_id = f"failover-{secrets.token_hex(4)}"
    client = ArgusClient(url, qs.token, timeout=10)
    prober = ArgusClient(url, qs.token, timeout=5, submit_attempts=10_000,
                         sleep=lambda s: time.sleep(min(s, 0.2)))
    steps = int(60 + args.rounds * args.interval)
    standin = client.submit(qs.spec(steps=steps, gpus=1, priority=100,
                                    labels={"bench": run_id, "role": "standin"})).task_id
    wait_for(lambda: state_of(client, standin) == "RUNNING", 300, f"{standin} RUNNING")
    load = Load(client, args.submit_rate, args.read_rate, run_id,
                qs.spec(steps=1, gpus=NEVER_FITS_GPUS, labels={}))
    threads = load.start()
    time.sleep(args.interval / 2)  # the load in its stride before the first kill
    rounds = []
    for n in range(args.rounds):
        started = time.monotonic()
        rounds.append(kill_round(qs, target, client, prober, load, run_id, timeout_s=90))
        print(f"round {n + 1}: answering {rounds[-1].answering_s}, admitting "
              f"{rounds[-1].admitting_s} {rounds[-1].note}", file=sys.stderr)
        time.sleep(max(0.0, started + args.interval - time.monotonic()))
    load.stop.set()
    for thread in threads:
        thread.join()  # the pools wait for their submits in flight
    wait_for(target.answers, 60, "the service answers after the rounds")
    lost = count_lost(client, load)
    single = [standin, *[r.probe for r in rounds if r.probe]]
    twice = count_twice(client, qs, run_id, set(load.accepted), single)
    outcome = standin_outcome(client, standin, steps, timeout_s=steps + 180)
    return print_report(args, rounds, load, lost, twice, outcome)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, default=MODES[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=20.0,
                        help="seconds from one kill to the next (default 20)")
    parser.add_argument("--submit-rate", type=float, default=2.0,
                        help="submits a second (default 2: the host has 2 cores)")
    parser.add_argument("--read-rate", type=float, default=20.0,
                        help="reads a second (default 20)")
    parser.add_argument("--outage", type=float, default=10.0,
                        help="pg-restart: seconds the database is down each round")
    parser.add_argument("--check", action="store_true", help="exit 1 when a floor is missed")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.interval <= 0 or args.submit_rate < 0 or args.read_rate < 0:
        parser.error("--rounds must be >= 1, --interval > 0, the rates >= 0")
    return args


def leader_target(pair: failover_leader.Pair, proxy: failover_leader.Proxy,
                  rolling: bool = False) -> Target:
    """Whichever instance leads, SIGKILLed (started again after the round); ``rolling``:
    B, A, B... stopped cleanly and started again at once. The clients' address is the
    proxy's."""
    killed: list[str] = []

    def kill() -> str:
        if rolling:
            killed.append("ab"[(len(killed) + 1) % 2])
            return pair.kill(killed[-1], signal.SIGTERM)
        leader = pair.leader()
        if leader is None:
            return "no instance says it leads"
        killed.append(leader)
        return pair.kill(leader)

    def after() -> str:
        how = "restarted" if rolling else "killed"
        note = f"{killed[-1] if killed else '?'} {how}, {pair.leader() or 'nobody'} leads"
        pair.revive()
        return note

    return Target(kill, proxy.answers, after)


def outage_target(server: Any, pair: failover_leader.Pair, proxy: failover_leader.Proxy,
                  outage_s: float) -> Target:
    """The database stopped for ``outage_s`` and started again (``kill`` returns once it
    is back: the round's figures count from there)."""

    def kill() -> str:
        server.halt()
        time.sleep(outage_s)
        server.resume()
        return ""

    return Target(kill, proxy.answers,
                  lambda: f"{pair.leader() or 'nobody'} leads")


def run_leader(args: argparse.Namespace, qs: QuickStart) -> bool:
    """The quick start on a throwaway PostgreSQL, a second instance, a proxy; the rounds."""
    with failover_leader.pg_server() as server:
        qs.env["ARGUS_STORE_URL"] = server.store_database()
        qs.up()
        pid = qs.service_pid()
        if pid is None:
            raise RuntimeError("the quick start's supervisord names no service pid")
        pair = failover_leader.Pair(pid, qs.token, qs.run_dir)
        qs.supervisorctl("stop", "argus_api")  # the bench supervises A and B from here
        pair.start("a")
        wait_for(lambda: pair.leader() == "a", 60, "instance A leads")
        pair.start("b")
        proxy = failover_leader.Proxy(list(pair.ports.values()))
        try:
            wait_for(lambda: pair.answers("b"), 60, "instance B answers")
            print(f"instances: A and B on ports {pair.ports['a']}, {pair.ports['b']} (hosts "
                  f"argus-a, argus-b; lease TTL 6 s), clients on {proxy.url}; leading: "
                  f"{pair.leader()}")
            target = (outage_target(server, pair, proxy, args.outage)
                      if args.mode == "pg-restart" else
                      leader_target(pair, proxy, rolling=args.mode == "rolling"))
            ok = run(args, qs, target, proxy.url)
            print(f"instances started again after exiting by themselves: {pair.restarts}")
            return ok
        finally:
            proxy.close()
            pair.stop()
            qs.down()


def main() -> int:
    args = parse_args()
    if why := usable():
        sys.exit(f"bench_failover: {why}")
    print(host_line(), f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    qs = QuickStart()
    try:
        if args.mode != "sqlite-supervised":
            ok = run_leader(args, qs)
        else:
            try:
                qs.up()
                ok = run(args, qs, supervised_target(qs), qs.url)
            finally:
                qs.down()
    except Exception:
        print(qs.log_tail(3000), file=sys.stderr)
        raise
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
