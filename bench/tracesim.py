"""The real ``Scheduler`` on a simulated cluster, in simulated time (no sleeps).

``SimCluster`` is ``FakeCluster`` that plays Ray's part by itself: a submitted job's
driver starts ``startup_s`` later (one figure, or one per task) and grabs its gang at
once (one STRICT_PACK group of ``n_gpus_per_node`` GPUs + 3 CPUs per GPU on each of
``nnodes`` distinct nodes, best fit like Ray's packing), runs for what is left of its
work and ends SUCCEEDED. An attempt whose gang cannot be placed when its driver starts
is HUNG (verl would wait forever): it stays RUNNING with its placement group pending, as
Ray would, and is placed as soon as room appears, unless the scheduler's hung watch
stops it first. A fail-fast task's first attempt dies ``FAILFAST_AFTER_S`` after its
driver starts with verl's resource message and never holds its gang. ``stop`` ends a
job STOPPED at once; a checkpointing task keeps the progress of its last whole
checkpoint interval, any other task starts over.

``Simulation`` drives ``Scheduler.tick(now)`` on a real ``Store`` (SQLite in /dev/shm when
there is one) at every arrival and job end, and every ``step_s`` while some task waits, so
the time-based rules (starvation guard, retry delays, preemption grace, hung watch) fire.
Between two ticks nothing changes, so every metric is an exact integral over those
intervals.
"""

from __future__ import annotations

import heapq
import itertools
import math
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.tracegen import (
    CLASS_ORDER,
    FAILFAST_AFTER_S,
    FAILFAST_MESSAGE,
    GPUS_PER_NODE,
    NODES,
    TraceTask,
    jain,
    lower_bound,
    percentile,
)
from service.cluster.boundary import SubmitRequest
from service.cluster.fake import FakeCluster
from service.config import SchedulerSettings, Settings
from service.domain.newtask import NewTask
from service.domain.states import RayStatus
from service.domain.workloads import driver
from service.engine.artifacts import Artifacts
from service.engine.scheduler import BACKFILL_WINDOW, Scheduler
from service.jobspec.model import JobSpec
from service.scheduling.admission import FreePool, Gang, InFlight
from service.store.writer import Store

T0 = 1_766_500_000.0
CPUS_PER_NODE = 96  # 8 GPUs x 3 CPUs for verl's bundles + 72 for drivers: CPUs never bind
# Jain's index per window: 4 h is twice the longest task (a 2x8 gang holds half the
# cluster for up to ~2 h, so no policy is fair over a window shorter than that); 1 h shows
# the short-term picture.
JAIN_WINDOW_S = 4 * 3600.0
SHORT_WINDOW_S = 3600.0
GUARD_REASON = "(starvation guard)"  # in the pending_reason of tasks held behind it
CHECKPOINT_EVERY_S = 600.0  # a checkpointing task saves its progress this often
PREEMPTED = "PREEMPTED"


# -- policies -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Policy:
    """``SchedulerSettings`` overrides plus whether the trace's priorities are used."""

    name: str
    label: str
    overrides: Mapping[str, Any]
    priorities: bool = False
    backfill_window: int = BACKFILL_WINDOW


# every policy names its reservations: the default (the shipped plan) must not leak in
_TODAY = {"retry_mode": "timer", "fair_share": False, "preemption": False, "reservations": 0}
POLICIES: tuple[Policy, ...] = (
    Policy("fifo", "FIFO, no backfill",
           {"backfill": False, **_TODAY}),
    Policy("backfill", "FIFO+backfill+guard",
           {"retry_interval_s": 60.0, **_TODAY}),
    Policy("priority", "+priorities",
           {"retry_mode": "when_fits", "fair_share": False, "preemption": False,
            "reservations": 0}, priorities=True),
    Policy("fairshare", "+fair share",
           {"retry_mode": "when_fits", "fair_share": True, "preemption": False,
            "reservations": 0}, priorities=True),
    Policy("preempt", "+preemption",
           {"retry_mode": "when_fits", "fair_share": True, "preemption": True,
            "preemption_grace_s": 300.0, "reservations": 0}, priorities=True),
    # the plan, shipped: 8 reservations from the time limits (N chosen by the trace bench's
    # 72 variants against 2 and 32), start estimates for the rest
    Policy("plan", "fair share + reservations",
           {"retry_mode": "when_fits", "fair_share": True, "preemption": False,
            "reservations": 8}, priorities=True),
)
POLICY_BY_NAME = {p.name: p for p in POLICIES}


def scheduler_settings(policy: Policy) -> SchedulerSettings:
    """The policy's scheduler settings."""
    return SchedulerSettings(**policy.overrides)


# -- the simulated cluster ------------------------------------------------------------------

@dataclass
class SimJob:
    """One attempt on the simulated cluster."""

    sid: str
    task: TraceTask
    attempt: int
    submitted: float
    fail_fast: bool
    placed_at: float | None = None  # gang placed (GPUs held) since
    ended: float | None = None
    hung: bool = False
    gpu_s: float = 0.0  # GPU-seconds held


@dataclass(frozen=True)
class Shape:
    """The simulated cluster: identical workers (plus a head that runs nothing)."""

    nodes: int = NODES
    gpus_per_node: int = GPUS_PER_NODE
    cpus_per_node: int = CPUS_PER_NODE

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class NullArtifacts(Artifacts):
    """No files: the simulation measures scheduling, not shared-storage writes."""

    def write_submission(self, sid: str, user: str | None, jobspec_yaml: str,
                         payload: Mapping[str, Any]) -> None:
        return None

    def archive_log(self, sid: str, user: str | None, text: str) -> None:
        return None


class SimCluster(FakeCluster):
    """``FakeCluster`` that starts, runs and ends jobs by itself (see the module doc)."""

    def __init__(self, tasks: Mapping[str, TraceTask], *,
                 startup_s: float | Mapping[str, float] = 0.0, shape: Shape = Shape()
                 ) -> None:
        super().__init__()
        self.tasks = tasks
        self.startup_s = startup_s
        self.add_node("head", gpus=0, cpus=0, worker_slots=0)  # Argus' head: no drivers
        self.workers = [f"w{i}" for i in range(shape.nodes)]
        for name in self.workers:
            self.add_node(name, gpus=shape.gpus_per_node, cpus=shape.cpus_per_node)
        self.records: dict[str, SimJob] = {}
        self.saved: dict[str, float] = defaultdict(float)  # task -> checkpointed work (s)
        self.done: dict[str, float] = {}  # task -> when its work was complete
        self.newly_done: list[str] = []  # tasks done since the caller last emptied it
        self.running = 0  # attempts holding their gang now
        self.running_by_user: Counter[str] = Counter()
        self.first_run: dict[str, float] = {}  # task -> first time its gang was placed
        # task -> when Argus first started it, what a start estimate predicts: its gang
        # placed, or a fail-fast attempt's driver started (it fails without a gang)
        self.first_start: dict[str, float] = {}
        self.held: Counter[str] = Counter()  # user -> GPUs held now
        self.unplaced: list[str] = []  # hung attempts waiting for room, in start order
        self.stopped_running = 0  # jobs with a gang stopped (preempted or hung-killed)
        self.lost_gpu_s = 0.0  # GPU-seconds of work thrown away by stops
        self._events: list[tuple[float, int, str, str]] = []
        self._seq = itertools.count()

    # -- the clock -----------------------------------------------------------------------
    def next_event(self) -> float:
        return self._events[0][0] if self._events else math.inf

    def advance(self, now: float) -> None:
        """Play every event due by ``now`` (in time order), then place hung gangs."""
        while self._events and self._events[0][0] <= now:
            at, _, kind, sid = heapq.heappop(self._events)
            self.clock = at
            if kind == "start":
                self._start(sid)
            elif self.records[sid].ended is None:  # not stopped meanwhile
                self._end(sid, kind)
        self.clock = now
        for sid in list(self.unplaced):
            if self._try_place(sid):
                self.unplaced.remove(sid)

    def _push(self, at: float, kind: str, sid: str) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, sid))

    # -- jobs ------------------------------------------------------------------------------
    def submit(self, req: SubmitRequest) -> None:
        super().submit(req)
        if "argus_task_id" not in req.metadata:
            return  # a fence (service.cluster.fence): the fake holds its node, nothing to run
        task = self.tasks[req.metadata["argus_task_id"]]
        attempt = int(req.metadata["argus_attempt"])
        fail_fast = task.cls.fail_fast and attempt == 1
        self.records[req.submission_id] = SimJob(req.submission_id, task, attempt,
                                                 self.clock, fail_fast)
        startup = self.startup_s if isinstance(self.startup_s, float | int) \
            else self.startup_s.get(task.task_id, 0.0)
        self._push(self.clock + startup, "start", req.submission_id)

    def _start(self, sid: str) -> None:
        rec = self.records[sid]
        if rec.ended is not None:
            return  # stopped before its driver started
        if rec.fail_fast:
            self.start(sid)  # the driver only: verl's check fails before any group
            self.first_start.setdefault(rec.task.task_id, self.clock)
            self._push(self.clock + FAILFAST_AFTER_S, "fail", sid)
        elif not self._try_place(sid):
            rec.hung = True
            self.hang(sid, self.clock)
            self.unplaced.append(sid)

    def _placement(self, nnodes: int, gpus: int) -> dict[str, float] | None:
        """``nnodes`` distinct workers with ``gpus`` GPUs (+3 CPUs each) free, best fit."""
        fits = []
        for name in self.workers:
            free = self.nodes[name].free()
            if free.get("GPU", 0.0) >= gpus and free.get("CPU", 0.0) >= 3 * gpus:
                fits.append((free["GPU"], name))
        fits.sort()
        return {name: float(gpus) for _, name in fits[:nnodes]} if len(fits) >= nnodes \
            else None

    def _try_place(self, sid: str) -> bool:
        rec = self.records[sid]
        placement = self._placement(rec.task.cls.nnodes, rec.task.cls.gpus_per_node)
        if placement is None:
            return False
        self.start(sid, placement)
        self.jobs[sid].pending_pg_since = None
        rec.placed_at = self.clock
        self.first_run.setdefault(rec.task.task_id, self.clock)
        self.first_start.setdefault(rec.task.task_id, self.clock)
        self.held[rec.task.user] += rec.task.gpus
        self.running += 1
        self.running_by_user[rec.task.user] += 1
        left = rec.task.duration - self.saved[rec.task.task_id]
        self._push(self.clock + left, "end", sid)
        return True

    def _end(self, sid: str, kind: str) -> None:
        if kind == "fail":
            self.finish(sid, RayStatus.FAILED, message=FAILFAST_MESSAGE,
                        log=f"Traceback (most recent call last):\n{FAILFAST_MESSAGE}\n",
                        exit_code=1)
            return
        self.finish(sid, RayStatus.SUCCEEDED, exit_code=0)
        task_id = self.records[sid].task.task_id
        self.done[task_id] = self.clock
        self.newly_done.append(task_id)

    def finish(self, submission_id: str, status: RayStatus = RayStatus.SUCCEEDED, *,
               message: str = "", log: str = "", exit_code: int | None = None) -> None:
        """Every end goes through here (``stop`` too): account the gang's time first."""
        rec = self.records.get(submission_id)
        if rec is not None and rec.ended is None:
            self._account_end(rec, status)
        super().finish(submission_id, status, message=message, log=log, exit_code=exit_code)

    def _account_end(self, rec: SimJob, status: RayStatus) -> None:
        rec.ended = self.clock
        if rec.sid in self.unplaced:
            self.unplaced.remove(rec.sid)
        if rec.placed_at is None:
            return  # held no gang (fail-fast, hung, or stopped before its start)
        ran = self.clock - rec.placed_at
        rec.gpu_s = ran * rec.task.gpus
        self.held[rec.task.user] -= rec.task.gpus
        self.running -= 1
        self.running_by_user[rec.task.user] -= 1
        if status is not RayStatus.STOPPED:
            return
        self.stopped_running += 1
        kept = (ran // CHECKPOINT_EVERY_S) * CHECKPOINT_EVERY_S if rec.task.cls.checkpoints \
            else 0.0
        self.saved[rec.task.task_id] += kept
        self.lost_gpu_s += (ran - kept) * rec.task.gpus

    # -- views -----------------------------------------------------------------------------
    @property
    def busy_gpus(self) -> int:
        return sum(self.held.values())

    def free_gpus(self) -> float:
        return sum(self.nodes[n].free().get("GPU", 0.0) for n in self.workers)


# -- the run --------------------------------------------------------------------------------

class Fairness:
    """GPU-seconds each user held while a condition held (e.g. "every user has work"),
    over the whole run and per window of ``window_s``.

    Over a whole run that completes every task, each user ends up with the GPU-seconds
    they offered: with equal offered loads, Jain's index of the totals is ~1 for any
    policy. The windowed index (time-weighted mean of each window's index) shows who held
    the GPUs while it mattered.
    """

    def __init__(self, users: Sequence[str], window_s: float) -> None:
        self.users = list(users)
        self.window_s = window_s
        self.seconds = 0.0
        self.total: Counter[str] = Counter()
        self.windows: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self.window_time: Counter[int] = Counter()

    def add(self, t: float, dt: float, held: Mapping[str, float]) -> None:
        """The interval [t, t+dt) (seconds from the first arrival) with GPUs ``held``."""
        self.seconds += dt
        for user in self.users:
            self.total[user] += held.get(user, 0) * dt
        end = t + dt
        while t < end:
            w = int(t // self.window_s)
            part = min(end, (w + 1) * self.window_s) - t
            self.window_time[w] += part
            for user in self.users:
                self.windows[w][user] += held.get(user, 0) * part
            t += part

    def whole(self) -> float:
        return jain([self.total[u] for u in self.users])

    def windowed(self) -> float:
        """Mean of the windows' indexes, weighted by the condition's time in each."""
        num = den = 0.0
        for w, seconds in self.window_time.items():
            index = jain([self.windows[w][u] for u in self.users])
            if not math.isnan(index):
                num += index * seconds
                den += seconds
        return num / den if den else math.nan


@dataclass
class Tally:
    """Integrals over simulated time, added interval by interval."""

    busy_gpu_s: float = 0.0
    idle_fit_gpu_s: float = 0.0  # free GPUs while a waiting task would have fit
    idle_guard_gpu_s: float = 0.0  # ... while a task held the starvation guard


@dataclass
class RunResult:
    policy: str
    load: float
    tasks: int
    makespan_s: float
    lb_s: float
    lb_term: str
    utilization: float
    idle_fit_gpu_h: float
    waits: dict[str, list[float]]  # class -> waits (s), and "high" for priority tasks
    jain: float  # of the whole run's GPU-seconds while every user had work
    jain_window: float  # of JAIN_WINDOW_S windows, while every user had work
    jain_short: float  # of SHORT_WINDOW_S windows, while every user had work
    jain_waiting: float  # of JAIN_WINDOW_S windows, while every user had a task waiting
    all_busy_h: float
    all_waiting_h: float
    idle_guard_gpu_h: float
    preemptions: int
    hung: int
    lost_gpu_h: float
    tick_ms: list[float]
    unfinished: int
    step_s: float
    wall_s: float
    # (actual wait, actual start - first planned start) of each task the plan estimated
    estimates: list[tuple[float, float]] = field(default_factory=list)
    user_waits: dict[str, list[float]] = field(default_factory=dict)  # user -> waits (s)

    @property
    def ratio(self) -> float:
        return self.makespan_s / self.lb_s

    def wait(self, cls: str, stat: str) -> float:
        values = self.waits.get(cls, [])
        if stat == "mean":
            return sum(values) / len(values) if values else math.nan
        if stat == "max":
            return max(values, default=math.nan)
        return percentile(values, 95)


def shm_dir() -> str | None:
    """/dev/shm when this machine has it (SQLite commits cost no disk flush there)."""
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


class Simulation:
    """One policy on one trace (see the module doc). ``run`` once."""

    def __init__(self, trace: Sequence[TraceTask], policy: Policy, settings: SchedulerSettings,
                 root: Path, *, step_s: float = 10.0,
                 startup_s: float | Mapping[str, float] = 0.0,
                 align_s: float | None = None, load: float = math.nan,
                 shape: Shape = Shape(), limits: bool = True,
                 cluster: SimCluster | None = None) -> None:
        self.trace = list(trace)
        self.shape = shape
        self.policy = policy
        self.load = load
        self.step_s = step_s
        self.align_s = align_s  # ticks only on this grid (the real loop's tick_s)
        self.settings = Settings(shared_root=str(root), scheduler=settings)
        self.store = Store(str(root / f"{policy.name}.sqlite3"))
        self.cluster = cluster or SimCluster({t.task_id: t for t in self.trace},
                                             startup_s=startup_s, shape=shape)
        self.scheduler = Scheduler(self.store, self.cluster, self.settings,
                                   NullArtifacts(root), backfill_window=policy.backfill_window)
        self.driver = driver(self.settings.entrypoint_resources,
                             self.settings.entrypoint_num_cpus)
        self.root = root
        self.tally = Tally()
        self.tick_ms: list[float] = []
        self.finished = 0
        self._next_arrival = 0
        self._waiting_users: Counter[str] = Counter()  # user -> arrived, not done
        # the tasks declare their time limits (max_runtime_s) to Argus
        self.limits = limits
        self._stopped = False  # the last tick stopped a running job
        self.users = sorted({t.user for t in self.trace})
        self.has_work = Fairness(self.users, JAIN_WINDOW_S)  # every user: runnable/running
        self.has_work_short = Fairness(self.users, SHORT_WINDOW_S)
        self.all_waiting = Fairness(self.users, JAIN_WINDOW_S)  # every user: a task waits
        # task -> (when first estimated, its first planned start): reservations only
        self.first_estimate: dict[str, tuple[float, float]] = {}

    # -- arrivals -----------------------------------------------------------------------
    def _spec(self, t: TraceTask) -> dict[str, Any]:
        spec = JobSpec(workload="ppo", code_path=f"{self.root}/verl", model_id="org/model",
                       train_file=f"{self.root}/train.parquet",
                       val_file=f"{self.root}/val.parquet", nnodes=t.cls.nnodes,
                       n_gpus_per_node=t.cls.gpus_per_node,
                       save_freq=10 if t.cls.checkpoints else -1).to_dict()
        if self.policy.priorities:
            spec["priority"] = t.priority
        if self.limits and t.limit_s is not None:
            spec["max_runtime_s"] = t.limit_s
        return spec

    def _arrive(self, now: float) -> None:
        while self._next_arrival < len(self.trace) and \
                T0 + self.trace[self._next_arrival].arrival <= now:
            t = self.trace[self._next_arrival]
            self._next_arrival += 1
            self.store.tasks.create_task(NewTask(
                id_prefix="", workload="ppo", text="workload: ppo\n", spec=self._spec(t),
                nnodes=t.cls.nnodes, n_gpus_per_node=t.cls.gpus_per_node, user=t.user,
                created_at=now, priority=t.priority if self.policy.priorities else 0,
                max_runtime_s=t.limit_s if self.limits else None), task_id=t.task_id)
            self._waiting_users[t.user] += 1

    # -- one step ------------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        self.cluster.advance(now)
        for task_id in self.cluster.newly_done:
            self._waiting_users[self.cluster.tasks[task_id].user] -= 1
        self.cluster.newly_done.clear()

    def _tick(self, now: float) -> None:
        self._advance(now)  # jobs that ended by now
        before = self.cluster.stopped_running
        started = time.thread_time()
        report = self.scheduler.tick(now)
        self.tick_ms.append((time.thread_time() - started) * 1000)
        for task_id, planned in self.scheduler.last_estimates.items():
            self.first_estimate.setdefault(task_id, (now, planned.start))
        self.finished += report.finished
        self._advance(now)  # drivers submitted this tick start (startup_s = 0)
        self._stopped = self.cluster.stopped_running > before

    def _fits_waiting(self, now: float) -> tuple[bool, bool]:
        """Whether some runnable task (not in a retry delay) fits the free resources, and
        whether the starvation guard holds tasks back."""
        if self.cluster.free_gpus() < 1:
            return False, False
        waiting = [w for w in self.store.tasks.runnable(now, 1_000_000)
                   if (w.retry_not_before or 0.0) <= now]
        if not waiting:
            return False, False
        guard = any(GUARD_REASON in (w.pending_reason or "") for w in waiting)
        cpg = self.settings.scheduler.cpus_per_gpu
        active = self.store.tasks.active()
        snap = self.cluster.snapshot([r.ray_submission_id for r in active])
        pool = FreePool.from_snapshot(snap, [
            InFlight(r.ray_submission_id, Gang(r.nnodes, r.n_gpus_per_node, cpg))
            for r in active])
        shapes = {(w.nnodes, w.n_gpus_per_node) for w in waiting}
        fits = any(pool.decide(Gang(n, g, cpg), self.driver).fits for n, g in shapes)
        return fits, fits and guard

    def _next_time(self, now: float) -> float:
        nxt = min(T0 + self.trace[self._next_arrival].arrival
                  if self._next_arrival < len(self.trace) else math.inf,
                  self.cluster.next_event())
        waiting = sum(self._waiting_users.values()) > self.cluster.running
        if self._stopped:  # a stop frees room: the real loop sees it within tick_s
            nxt = min(nxt, now + self.settings.scheduler.tick_s)
        if waiting:
            nxt = min(nxt, now + self.step_s)
        if self.align_s:
            nxt = T0 + math.ceil((nxt - T0) / self.align_s - 1e-9) * self.align_s
        return max(nxt, now + 1e-6)

    def _integrate(self, now: float, dt: float) -> None:
        busy = self.cluster.busy_gpus
        self.tally.busy_gpu_s += busy * dt
        fits, guard = self._fits_waiting(now)
        if fits:
            self.tally.idle_fit_gpu_s += self.cluster.free_gpus() * dt
        if guard:
            self.tally.idle_guard_gpu_s += self.cluster.free_gpus() * dt
        t = now - (T0 + self.trace[0].arrival)
        held = self.cluster.held
        if all(self._waiting_users[u] > 0 for u in self.users):
            self.has_work.add(t, dt, held)
            self.has_work_short.add(t, dt, held)
            if all(self._waiting_users[u] > self.cluster.running_by_user[u]
                   for u in self.users):
                self.all_waiting.add(t, dt, held)

    def run(self, max_ticks: int = 2_000_000) -> RunResult:
        wall = time.perf_counter()
        now = T0 + self.trace[0].arrival
        self.scheduler.startup(now)
        for _ in range(max_ticks):
            self._arrive(now)
            self._tick(now)
            if self.finished >= len(self.trace):
                break
            nxt = self._next_time(now)
            self._integrate(now, nxt - now)
            now = nxt
        result = self._result(now, time.perf_counter() - wall)
        self.store.close()
        return result

    # -- results -------------------------------------------------------------------------
    def _waits(self) -> dict[str, list[float]]:
        waits: dict[str, list[float]] = {c: [] for c in CLASS_ORDER}
        waits["high"] = []
        for t in self.trace:
            start = self.cluster.first_run.get(t.task_id)
            if start is None:
                continue
            waits[t.cls.name].append(start - (T0 + t.arrival))
            if self.policy.priorities and t.priority > 0:
                waits["high"].append(start - (T0 + t.arrival))
        return waits

    def _user_waits(self) -> dict[str, list[float]]:
        waits: dict[str, list[float]] = {u: [] for u in self.users}
        for t in self.trace:
            start = self.cluster.first_run.get(t.task_id)
            if start is not None:
                waits[t.user].append(start - (T0 + t.arrival))
        return waits

    def _estimates(self) -> list[tuple[float, float]]:
        """(actual wait, error of the first estimate: actual start - planned) of every task
        the plan estimated, its first estimate taken when it was made; the actual start is
        when Argus first started it (``SimCluster.first_start``)."""
        out = []
        for t in self.trace:
            first = self.cluster.first_start.get(t.task_id)
            est = self.first_estimate.get(t.task_id)
            if first is not None and est is not None:
                out.append((first - (T0 + t.arrival), first - est[1]))
        return out

    def _preemptions(self) -> int:
        return sum(1 for t in self.trace for a in self.store.attempts.list_attempts(t.task_id)
                   if a.failure_kind == PREEMPTED)

    def _result(self, now: float, wall_s: float) -> RunResult:
        lb = lower_bound(self.trace, self.shape.gpus)
        makespan = now - (T0 + self.trace[0].arrival)
        unfinished = sum(1 for t in self.trace
                         if self.store.tasks.get_task(t.task_id).state.value != "SUCCEEDED")
        return RunResult(
            policy=self.policy.name, load=self.load, tasks=len(self.trace),
            makespan_s=makespan, lb_s=lb.value, lb_term=lb.term,
            utilization=self.tally.busy_gpu_s / (self.shape.gpus * makespan),
            idle_fit_gpu_h=self.tally.idle_fit_gpu_s / 3600, waits=self._waits(),
            jain=self.has_work.whole(), jain_window=self.has_work.windowed(),
            jain_short=self.has_work_short.windowed(),
            jain_waiting=self.all_waiting.windowed(), all_busy_h=self.has_work.seconds / 3600,
            all_waiting_h=self.all_waiting.seconds / 3600,
            idle_guard_gpu_h=self.tally.idle_guard_gpu_s / 3600,
            preemptions=self._preemptions(),
            hung=sum(1 for r in self.cluster.records.values() if r.hung),
            lost_gpu_h=self.cluster.lost_gpu_s / 3600, tick_ms=self.tick_ms,
            unfinished=unfinished, step_s=self.step_s, wall_s=wall_s,
            estimates=self._estimates(), user_waits=self._user_waits(),
        )


def simulate(trace: Sequence[TraceTask], policy: Policy, *, step_s: float = 10.0,
             startup_s: float | Mapping[str, float] = 0.0, align_s: float | None = None,
             load: float = math.nan,
             settings: SchedulerSettings | None = None, shape: Shape = Shape(),
             limits: bool = True) -> RunResult:
    """Run ``policy`` on ``trace`` in a temp directory."""
    if settings is None:
        settings = scheduler_settings(policy)
    with tempfile.TemporaryDirectory(prefix="argus-trace-", dir=shm_dir()) as tmp:
        sim = Simulation(trace, policy, settings, Path(tmp), step_s=step_s,
                         startup_s=startup_s, align_s=align_s, load=load, shape=shape,
                         limits=limits)
        return sim.run()
