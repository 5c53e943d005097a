"""Pipelines and dependencies: three figures against their floors (docs/pipelines.md).

* create: a 20-stage pipeline (a chain of 10 plus 10 stages fanning out of its middle,
  every stage's JobSpec validated, one output reference each) parsed and created in one
  transaction on a file database that already holds 10k finished tasks. Floor <= 100 ms.
* tick: bench_tick's worst case (10k runnable + 90k finished tasks, nothing fits, fair
  share on) with and without 1,000 BLOCKED dependents waiting on queued parents. Floor:
  bench_tick's, every tick <= 20 ms.
* delay: the real ``SchedulerLoop`` thread (``tick_s`` 1 s, the default) on the fake
  cluster: the time from a parent's Ray job ending to its dependent's submission to Ray.
  Floor <= 1.5 s (a tick of at most 1 s plus the tick itself).

    .venv/bin/python bench/bench_pipelines.py [--creates 30] [--ticks 100] [--delays 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from service.domain.newtask import NewTask

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench_tick import T0, build_db

from bench.hostinfo import host_line
from service.cluster.fake import FakeCluster
from service.config import SchedulerSettings, Settings
from service.domain.states import RayStatus, TaskState
from service.engine.artifacts import Artifacts
from service.engine.scheduler import Scheduler, SchedulerLoop
from service.jobspec.model import JobSpec
from service.policy.pipelines import parse_pipeline
from service.store.writer import Store
from service.usecases.pipeline_submit import submit_pipeline

CREATE_FLOOR_MS = 100.0
TICK_FLOOR_MS = 20.0
DELAY_FLOOR_S = 1.5


def _spec(root: str, model: str = "org/model") -> str:
    return (f"{{workload: ppo, code_path: {root}/verl, model_id: '{model}', "
            f"train_file: {root}/train.parquet, val_file: {root}/val.parquet, nnodes: 1, "
            f"n_gpus_per_node: 4, overrides: ['+argus_demo.duration_s=1']}}")


def pipeline_doc(root: str, stages: int = 20) -> str:
    lines = ["name: bench", "stages:", f"  s0: {{jobspec: {_spec(root)}}}"]
    chain = stages // 2
    for i in range(1, stages):
        parent = f"s{i - 1}" if i < chain else f"s{chain // 2}"
        ref = f"{{{{stages.{parent}.checkpoint_dir}}}}"
        lines.append(f"  s{i}: {{after: {{ok: [{parent}]}}, jobspec: {_spec(root, ref)}}}")
    return "\n".join(lines) + "\n"


def _db(path: str, runnable: int, finished: int) -> Store:
    """A store at ``path`` loaded by bench_tick's ``build_db`` (which takes the store)."""
    store = Store(path)
    build_db(store, runnable, finished)
    return store


def bench_create(root: Path, n: int) -> list[float]:
    store = _db(str(root / "create.sqlite3"), 0, 10_000)
    settings = Settings(shared_root=str(root))
    text = pipeline_doc(str(root))
    out = []
    for i in range(n):
        started = time.perf_counter()
        doc = parse_pipeline(text)
        submit_pipeline(store, doc, text, settings, "alice", T0 + i)
        out.append((time.perf_counter() - started) * 1000)
    store.close()
    return sorted(out)


def _tick_run(root: Path, label: str, blocked: int, ticks: int
              ) -> tuple[float, list[float]]:
    store = _db(str(root / f"{label}.sqlite3"), 10_000, 90_000)
    parents = [r.task_id for r in store.tasks.runnable(T0 + 1e6, 100)]
    spec = JobSpec(workload="ppo", code_path=f"{root}/verl", model_id="org/model",
                   train_file=f"{root}/t.parquet", val_file=f"{root}/v.parquet", nnodes=1,
                   n_gpus_per_node=4)
    for i in range(blocked):
        parent = parents[i % len(parents)]
        store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x",
                                        spec=spec.to_dict(), nnodes=1, n_gpus_per_node=4,
                                        user=store.tasks.get_task(parent).user, created_at=T0,
                                        after=tuple((("ok", parent),)), priority=0),
                                task_id=f"mvp2-alice-ppo-20251224-000000-{i:04x}")
    cluster = FakeCluster()
    cluster.add_node("head", gpus=0, cpus=0, worker_slots=0)
    for i in range(4):
        cluster.add_node(f"worker{i}", gpus=8, cpus=32)
        cluster.occupy(f"worker{i}", GPU=7, CPU=21)
    settings = Settings(shared_root=str(root),
                        scheduler=SchedulerSettings(starvation_guard_s=1e12, fair_share=True))
    sched = Scheduler(store, cluster, settings, Artifacts(settings.shared_root))
    now = T0 + 1e6
    sched.startup(now)
    first = sched.tick(now).duration_s * 1000  # writes every examined task's reason
    durations = []
    for i in range(ticks):
        report = sched.tick(now + 1 + i)
        assert report.submitted == 0 and report.released == 0
        durations.append(report.duration_s * 1000)
    assert store.pipelines.blocked_count() == blocked
    store.close()
    return first, sorted(durations)


def bench_delay(root: Path, n: int) -> list[float]:
    store = Store(str(root / "delay.sqlite3"))
    cluster = FakeCluster(clock=time.time())
    cluster.add_node("head", gpus=0, cpus=0, worker_slots=0)
    cluster.add_node("w1", gpus=8, cpus=32)
    settings = Settings(shared_root=str(root))
    sched = Scheduler(store, cluster, settings, Artifacts(settings.shared_root))
    loop = SchedulerLoop(sched, settings.scheduler.tick_s)
    spec = JobSpec(workload="ppo", code_path=f"{root}/verl", model_id="org/model",
                   train_file=f"{root}/t.parquet", val_file=f"{root}/v.parquet", nnodes=1,
                   n_gpus_per_node=4).to_dict()
    loop.start()
    delays = []
    try:
        for i in range(n):
            parent = f"mvp2-alice-ppo-20251224-000001-{i:04x}"
            child = f"mvp2-alice-ppo-20251224-000002-{i:04x}"
            store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec=spec,
                                            nnodes=1, n_gpus_per_node=4, user="alice",
                                            created_at=time.time(), priority=0), task_id=parent)
            store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec=spec,
                                            nnodes=1, n_gpus_per_node=4, user="alice",
                                            created_at=time.time(), after=tuple((("ok", parent),)),
                                            priority=0), task_id=child)
            loop.wake()
            _until(lambda p=parent: store.tasks.get_task(p).state is TaskState.SUBMITTED, 10)
            time.sleep(0.2 + 0.37 * i % 1.0)  # end at varied points of the tick cycle
            cluster.clock = time.time()
            cluster.finish(f"{parent}--a01", RayStatus.SUCCEEDED)
            ended = time.perf_counter()
            _until(lambda c=child: store.tasks.get_task(c).state is TaskState.SUBMITTED, 10,
                   step=0.005)
            delays.append(time.perf_counter() - ended)
            cluster.finish(f"{child}--a01", RayStatus.SUCCEEDED)
            _until(lambda c=child: store.tasks.get_task(c).state is TaskState.SUCCEEDED, 10)
    finally:
        loop.stop()
        store.close()
    return sorted(delays)


def _until(pred: Callable[[], bool], timeout: float, step: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("the bench's condition did not hold in time")
        time.sleep(step)


def _p(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--creates", type=int, default=30)
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--delays", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="argus-bench-pipelines-") as tmp:
        root = Path(tmp)
        create = bench_create(root, args.creates)
        plain = _tick_run(root, "plain", 0, args.ticks)
        blocked = _tick_run(root, "blocked", 1000, args.ticks)
        delay = bench_delay(root, args.delays)
    ok = {True: "OK", False: "OVER"}
    print(host_line())
    print(f"create a 20-stage pipeline ({args.creates} times): median "
          f"{statistics.median(create):.1f} ms, p95 {_p(create, 0.95):.1f} ms, max "
          f"{create[-1]:.1f} ms -> floor {CREATE_FLOOR_MS:.0f} ms "
          f"{ok[create[-1] <= CREATE_FLOOR_MS]}")
    for label, (first, d) in (("no dependents", plain),
                              ("1,000 BLOCKED dependents", blocked)):
        worst = max(first, d[-1])
        print(f"tick, 10k runnable + 90k finished, {label}: first {first:.2f} ms, then "
              f"median {statistics.median(d):.2f} ms, p99 {_p(d, 0.99):.2f} ms, max "
              f"{d[-1]:.2f} ms -> floor {TICK_FLOOR_MS:.0f} ms {ok[worst <= TICK_FLOOR_MS]}")
    print(f"parent ended -> dependent submitted ({args.delays} times, tick_s 1): median "
          f"{statistics.median(delay):.3f} s, max {delay[-1]:.3f} s -> floor "
          f"{DELAY_FLOOR_S} s {ok[delay[-1] <= DELAY_FLOOR_S]}")


if __name__ == "__main__":
    main()
