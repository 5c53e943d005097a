"""The queue's Prometheus families (admission wait, pending by reason class, oldest pending
age, per-node resources as admission saw them), the sampler behind the console's charts,
and the Grafana dashboard: every metric its queries name exists in ``/metrics``."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.cluster.fake import FakeCluster
from service.config import Settings
from service.domain import reasons
from service.domain.ids import new_task_id
from service.domain.newtask import NewTask
from service.domain.reasons import WaitKind
from service.domain.states import TaskState
from service.domain.writes import Sample
from service.engine.artifacts import Artifacts
from service.engine.sampling import Sampler
from service.engine.scheduler import Scheduler
from service.policy.nodehealth import HealthReport
from service.store.sql import MIGRATIONS_DIR
from service.store.writer import Store
from service.web.metrics import MeteredScheduler, ServiceMetrics
from service.web.ui.charts import bar_chart, line_chart, nice_max
from service.web.ui.pages import duration

T0 = 1_766_000_000.0
DASHBOARD = Path(__file__).resolve().parents[4] / "deploy" / "grafana" / "argus.json"
SPEC = ("workload: {w}\ncode_path: {s}/code/verl\nmodel_id: Qwen/Qwen2.5-0.5B-Instruct\n"
        "train_file: {s}/data/train.parquet\nval_file: {s}/data/test.parquet\nnnodes: 1\n"
        "n_gpus_per_node: {g}\n")


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.shared = tmp_path / "shared"
        self.settings = Settings(shared_root=str(self.shared))
        self.store = Store(str(tmp_path / "db.sqlite3"))
        self.cluster = FakeCluster(clock=T0)
        self.now = T0
        self.metrics = ServiceMetrics(self.store.tasks.counts_by_state, users=self.store,
                                      queue=self.store.console, nodes=self.store.nodes,
                                      clock=lambda: self.now)
        self.scheduler = MeteredScheduler(
            Scheduler(self.store, self.cluster, self.settings, Artifacts(str(self.shared))),
            self.metrics)

    def submit(self, gpus: int, workload: str = "ppo", user: str = "admin") -> str:
        from service.jobspec.spec import parse_jobspec
        text = SPEC.format(w=workload, s=self.shared, g=gpus)
        spec = parse_jobspec(text, self.settings, user)
        task_id = new_task_id("mvp2", workload, self.now, self.store.tasks.task_exists, user=user)
        self.store.tasks.create_task(NewTask(id_prefix="", workload=workload, text=text,
                                             spec=spec.to_dict(), nnodes=1, n_gpus_per_node=gpus,
                                             user=user, created_at=self.now, priority=0),
                                     task_id=task_id)
        return task_id

    def tick(self, advance: float) -> None:
        self.now += advance
        self.cluster.clock = self.now
        self.scheduler.tick(self.now)

    def samples(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        text = self.metrics.render().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, []).append((s.labels, s.value))
        return out


@pytest.fixture
def world(tmp_path: Path):
    w = World(tmp_path)
    w.store.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=T0)
    yield w
    w.store.close()


def test_queue_families_after_ticks(world):
    world.cluster.add_node("n1", gpus=4, cpus=16)
    world.tick(1)  # the first tick starts the admission count
    big = world.submit(4)
    world.tick(30)  # admitted after waiting 30 s
    world.cluster.start(f"{big}--a01", {"n1": 4})
    world.submit(2, workload="sft")
    world.submit(8)
    world.tick(5)
    got = world.samples()
    buckets = {(labels["workload"], labels["user"], labels["le"]): v
               for labels, v in got["argus_admission_wait_seconds_bucket"]}
    assert buckets[("ppo", "admin", "15.0")] == 0 and buckets[("ppo", "admin", "30.0")] == 1
    pending = {labels["reason"]: v for labels, v in got["argus_pending_tasks"]}
    assert set(pending) == {k.value for k in WaitKind}
    assert pending["resources"] == 1 and pending["never_fits"] == 1
    assert got["argus_oldest_pending_task_age_seconds"] == [({}, 5.0)]
    node = {"node": "n1", "node_ip": "10.0.0.1", "node_id": "n1"}
    assert (node, 0.0) in got["argus_node_gpus_free"]
    assert (node, 4.0) in got["argus_node_gpus_in_use"]
    assert (node, 13.0) in got["argus_node_cpus_in_use"]  # 4 GPUs x 3 CPUs + the driver
    assert got["argus_cluster_reachable"] == [({}, 1.0)]


def test_promtool_accepts_the_exposition(world):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    world.cluster.add_node("n1", gpus=4)
    world.tick(1)
    world.submit(2)
    world.tick(3)
    result = subprocess.run([promtool, "check", "metrics"], input=world.metrics.render(),
                            capture_output=True, timeout=30, check=False)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.strip() == b"" and result.stderr.strip() == b""


def test_the_dashboard_names_only_metrics_that_exist(world):
    world.cluster.add_node("n1", gpus=4)
    world.tick(1)
    world.submit(2)
    world.tick(2)
    world.metrics.observe_request("GET", "/healthz", 200)
    world.metrics.retries.inc(0)
    world.metrics.observed.record_health({"n1": HealthReport("n1", False, "xid 79", T0, 30)})
    exposed = set(world.samples())
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    named = {m for e in exprs for m in re.findall(r"\b(?:argus|process)_[a-z0-9_]+", e)}
    assert named and named <= exposed, sorted(named - exposed)
    for needed in ("argus_admission_wait_seconds_bucket", "argus_pending_tasks",
                   "argus_oldest_pending_task_age_seconds", "argus_node_gpus_in_use",
                   "argus_node_gpus_free", "argus_node_cpus_in_use", "argus_node_cpus_free",
                   "argus_node_state", "argus_node_health", "argus_node_events_total"):
        assert needed in named


def test_every_known_user_has_every_per_user_series_from_zero(world):
    from service.domain.users import Role

    world.store.users.create_user("alice", Role.USER, T0)
    got = world.samples()
    users = {labels["user"] for labels, _ in got["argus_user_gpus_in_use"]}
    assert users == {"admin", "alice"}
    for name in ("argus_user_gpus_in_use", "argus_user_gpu_seconds_total"):
        assert sorted(got[name], key=lambda s: s[0]["user"]) == [
            ({"user": "admin"}, 0.0), ({"user": "alice"}, 0.0)]
    alice = {labels["state"]: v for labels, v in got["argus_user_tasks"]
             if labels["user"] == "alice"}
    assert alice == {s.value: 0.0 for s in TaskState}
    world.store.users.create_user("bob", Role.USER, T0)  # a new user: there at the next scrape
    assert ({"user": "bob"}, 0.0) in world.samples()["argus_user_gpu_seconds_total"]


def test_no_created_series_process_metrics_and_5xx_from_zero(world):
    text = world.metrics.render().decode()
    assert "_created" not in text
    got = world.samples()
    assert got["process_resident_memory_bytes"][0][1] > 0
    assert "process_cpu_seconds_total" in got
    classes = dict((labels["class"], v) for labels, v in got["argus_http_responses_total"])
    assert classes == {"2xx": 0.0, "3xx": 0.0, "4xx": 0.0, "5xx": 0.0}
    world.metrics.observe_request("GET", "/api/v2/tasks", 503)
    classes = dict((labels["class"], v) for labels, v in
                   world.samples()["argus_http_responses_total"])
    assert classes["5xx"] == 1.0


def test_the_dashboard_provisions_from_a_file():
    """Grafana's file provisioning resolves no ``__inputs``: the dashboard picks its
    Prometheus through a datasource variable, in every panel and every query."""
    import yaml

    text = DASHBOARD.read_text()
    doc = json.loads(text)
    assert "__inputs" not in doc and "DS_PROMETHEUS" not in text
    assert doc["templating"]["list"][0] | {"type": "datasource", "name": "datasource",
                                           "query": "prometheus"} == doc["templating"]["list"][0]
    wanted = {"type": "prometheus", "uid": "${datasource}"}
    for panel in doc["panels"]:
        assert panel["datasource"] == wanted, panel["title"]
        assert all(t["datasource"] == wanted for t in panel["targets"]), panel["title"]
    provisioning = DASHBOARD.parent / "provisioning"
    sources = yaml.safe_load((provisioning / "datasources" / "argus.yaml").read_text())
    assert sources["datasources"][0]["type"] == "prometheus"
    boards = yaml.safe_load((provisioning / "dashboards" / "argus.yaml").read_text())
    assert boards["providers"][0]["type"] == "file"


def test_promtool_accepts_the_example_scrape_config(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    example = DASHBOARD.parents[1] / "prometheus" / "prometheus.yml"
    token = tmp_path / "argus-token"
    token.write_text("secret\n")
    config = tmp_path / "prometheus.yml"
    config.write_text(example.read_text().replace("/etc/prometheus/argus-token", str(token)))
    result = subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                            timeout=30, check=False)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


@pytest.mark.parametrize(("reason", "cls"), [
    (None, "new"),
    ("needs 1x2 GPUs (+6 CPUs per node); free: 10.0.0.1 0 GPU/19 CPU", "resources"),
    ("no free driver slot (CPU 1) next to 1x2 GPUs (+6 CPUs per node); free: x", "resources"),
    ("can never fit this cluster as it is: needs 1x8 GPUs", "never_fits"),
    ("user bob runs 2 of 2 tasks allowed", "user_limit"),
    ("user bob is disabled: the task waits", "user_disabled"),
    ("needs 9 GPUs, more than user bob's limit of 8 GPUs: it cannot start", "user_limit"),
    ("waiting behind t-1, runnable for over 300s (starvation guard)", "starvation_guard"),
    ("max_running_tasks (4) reached", "max_running"),
    ("attempt 1 failed (CLUSTER_LOST); attempt 2 not before 2026-01-01T00:00:00Z",
     "retry_backoff"),
    ("retry backoff: attempt 2 not before 2026-01-01T00:00:05Z; the room it needs is kept "
     "for it", "retry_backoff"),
    ("needs 1x4 GPUs (+12 CPUs per node); free: x; after tasks of higher priority",
     "resources"),
    ("waiting behind t-1 (priority 9), runnable for over 300s: nodes 10.0.0.2 are kept "
     "for it (starvation guard)", "starvation_guard"),
    ("preempting t-2 (priority 0) to make room (waited past preemption_grace_s=600)",
     "preemption"),
    ("waiting behind t-1 (priority 9), lower-priority tasks are being preempted for it: "
     "nodes 10.0.0.2 are kept for it (starvation guard)", "preemption"),
    ("attempt 1 preempted for t-1; attempt 2 as soon as it fits again (resumes from its "
     "checkpoint)", "preemption"),
    ("Ray cluster unreachable: timeout", "cluster_unreachable"),
    ("waiting behind t-1 (priority 0): first come, first served (backfill off)",
     "backfill_off"),
    ("attempt 1 never reached Ray (interrupted submit); it will be submitted again as x",
     "resubmit"),
    ("something new", "other"),
])
def test_migration_classifies_reasons_written_before_kinds(reason, cls):
    """Migration 0013 gives the rows of an older database their kind once, from the
    text (the only place a reason's words are read back)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE tasks (task_id TEXT, pending_reason TEXT)")
    conn.execute("INSERT INTO tasks VALUES ('t', ?)", (reason,))
    conn.executescript((MIGRATIONS_DIR / "0013_reason_kind.sql").read_text())
    kind = conn.execute("SELECT coalesce(reason_kind, 'new') FROM tasks").fetchone()[0]
    assert kind == cls


def test_rewording_a_reason_moves_no_metric(world, monkeypatch):
    """The pending gauge counts kinds, not words: new wording, same label."""
    monkeypatch.setattr(reasons, "_details_text", lambda details: "reworded")
    world.cluster.add_node("n1", gpus=4, cpus=16)
    world.tick(1)
    world.submit(8)  # never fits
    world.submit(2)
    world.submit(4)  # no room once the 2-GPU task runs
    world.tick(5)
    pending = {labels["reason"]: v for labels, v in world.samples()["argus_pending_tasks"]}
    assert pending["never_fits"] == 1 and pending["resources"] == 1
    assert pending["other"] == 0
    rows, _ = world.store.tasks.list_tasks(limit=10)
    assert sorted(t.pending_reason or "" for t in rows) == ["", "reworded", "reworded"]


class FakeSamples:
    def __init__(self) -> None:
        self.rows: list[Sample] = []
        self.last: float | None = None

    def admitted_between(self, since, until):
        return []

    def queue_sizes(self):
        return 3, 1

    def last_sample_ts(self):
        return self.last

    def record_sample(self, sample, keep_s):
        self.rows = [r for r in self.rows if r.ts >= sample.ts - keep_s] + [sample]


def test_sampler_writes_once_per_interval_and_stays_bounded():
    store = FakeSamples()
    sampler = Sampler(store, interval_s=60, keep_s=600)
    written = [sampler.sample(T0 + t, None) for t in range(0, 3600, 1)]
    assert sum(s is not None for s in written) == 60
    assert len(store.rows) == 11  # 600 s of one-minute samples, both ends included
    assert store.rows[-1] == Sample(T0 + 3540, 3, 1, None, None)
    restarted = Sampler(store, interval_s=60)
    store.last = T0 + 3540
    assert restarted.sample(T0 + 3560, None) is None  # the interval spans restarts


def test_store_samples_are_bounded(tmp_path):
    store = Store(str(tmp_path / "db.sqlite3"))
    try:
        for i in range(100):
            store.console.record_sample(Sample(T0 + 60 * i, i, 0, 1.0, 4.0), keep_s=600)
        rows = store.console.samples_since(0)
        assert len(rows) == 11 and rows[0].ts == T0 + 60 * 89 and rows[-1].pending == 99
    finally:
        store.close()


def test_duration_and_chart_helpers():
    assert [duration(s) for s in (None, 5, 65, 7300, 90000)] == [
        "", "5s", "1m 05s", "2h 01m", "1d 01h"]
    assert [nice_max(v) for v in (0, 1, 3, 7, 12, 180)] == [1, 1, 5, 10, 20, 200]
    svg = line_chart([(T0, 1), (T0 + 60, 2), (T0 + 3600, 3)], start=T0, end=T0 + 3600,
                     title="<b>q</b>")
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 1  # a gap after 60 s
    assert "&lt;b&gt;q&lt;/b&gt;" in svg and "<b>" not in svg
    bars = bar_chart([("<script>", 2.0)], title="t")
    assert "&lt;script&gt;" in bars and "<script>" not in bars


def test_gpu_seconds_in_window_matches_usage_accounting(tmp_path):
    from service.domain.states import TaskState
    from service.policy.usage import account
    from service.store.writer import BulkTask

    store = Store(str(tmp_path / "db.sqlite3"))
    try:
        store.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=T0)
        spans = [(T0 - 900, T0 - 100), (T0 - 50, T0 + 500), (T0 + 100, T0 + 200),
                 (T0 + 700, T0 + 900), (T0 - 5000, T0 - 4000)]
        store.tasks.bulk_load(BulkTask(task_id=f"mvp2-admin-ppo-20251223-000000-{i:04x}",
                                       workload="ppo", state=TaskState.SUCCEEDED, created_at=s[0],
                                       n_gpus_per_node=1 + i, user="admin", attempt_span=s)
                        for i, s in enumerate(spans))
        lo, hi = T0 - 300, T0 + 800
        report = account(store.usage.usage_spans(lo, hi, None), lo, hi, T0 + 1000)
        assert store.usage.gpu_seconds_in_window(lo, hi, T0 + 1000) == pytest.approx(
            {u.user: u.gpu_seconds for u in report.users})
    finally:
        store.close()


def test_the_plans_estimated_start_reaches_the_observed_view(tmp_path: Path) -> None:
    """With reservations on, a waiting task's planned start (the running one's time limit
    plus the stop's slack) is what the API and the console read."""
    from service.config import SchedulerSettings
    from service.scheduling.runtimes import LIMIT_SLACK_S

    w = World(tmp_path)
    w.settings = Settings(shared_root=str(w.shared),
                          scheduler=SchedulerSettings(reservations=8))
    w.scheduler = MeteredScheduler(
        Scheduler(w.store, w.cluster, w.settings, Artifacts(str(w.shared))), w.metrics)
    w.store.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=T0)
    w.cluster.add_node("n1", gpus=4, cpus=16)
    from service.jobspec.spec import parse_jobspec
    text = SPEC.format(w="ppo", s=w.shared, g=4)
    spec = parse_jobspec(text, w.settings, "admin").to_dict()
    for name in ("a", "b"):
        w.store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text=text, spec=spec,
                                          nnodes=1, n_gpus_per_node=4, user="admin",
                                          created_at=w.now, max_runtime_s=600, priority=0),
                                  task_id=f"mvp2-admin-ppo-20251223-143201-000{name}")
    first, second = "mvp2-admin-ppo-20251223-143201-000a", "mvp2-admin-ppo-20251223-143201-000b"
    w.tick(1)
    w.cluster.start(f"{first}--a01", {"n1": 4})
    started = w.now
    w.tick(1)
    assert w.metrics.observed.estimate(first) is None
    assert w.metrics.observed.estimate(second) == reasons.Planned(started + 600 + LIMIT_SLACK_S)
    w.store.close()
