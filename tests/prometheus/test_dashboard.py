"""Every expression of ``deploy/grafana/argus.json`` through a real Prometheus that
scraped a real ``argus-api`` during a scripted scenario: four users (one who never
submits), tasks that run and succeed, fail, are canceled while running and while waiting,
and one that waits for room and is admitted once it frees; then an admin cordons a node.

None may be empty or fail; the usage panels must equal the API: GPUs in use per user
while tasks run, and GPU-hours per user over 7 days against ``GET /api/v2/usage`` once
they ended (the first ended attempt of a user included: its series is there from 0).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from service.domain.reasons import WaitKind
from service.domain.states import RayStatus

from .conftest import SCRAPE_S, Argus, Prometheus, wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "argus.json"
GPUS_BY_USER = "GPUs in use by user"
GPU_HOURS = "GPU-hours per user, last 7 days"
NODES_BY_STATE = "Nodes by state"
USERS = ("alice", "bob", "carol", "dan")
DAN_ADMITTED = 'argus_admission_wait_seconds_count{user="dan"}'


def targets() -> list[tuple[str, dict[str, Any]]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(p["title"], t) for p in doc["panels"] for t in p["targets"]]


def expression(target: dict[str, Any], range_s: float) -> str:
    """The query Grafana sends: its variables replaced the way Grafana resolves them at a
    scrape interval of ``SCRAPE_S`` (``$__rate_interval``: four scrape intervals)."""
    expr = target["expr"]
    for name, value in (("$__rate_interval", f"{4 * SCRAPE_S}s"),
                        ("$__interval", f"{SCRAPE_S}s"), ("$__range", f"{int(range_s)}s")):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"an unresolved variable in {expr}"
    return expr


def expr_of(title: str) -> str:
    (target,) = [t for panel, t in targets() if panel == title]
    return expression(target, 0)


def submit(argus: Argus, token: str, gpus: int) -> str:
    spec = (f"workload: ppo\ncode_path: {argus.shared}/code/verl\n"
            "model_id: Qwen/Qwen2.5-0.5B-Instruct\n"
            f"train_file: {argus.shared}/data/train.parquet\n"
            f"val_file: {argus.shared}/data/test.parquet\nnnodes: 1\n"
            f"n_gpus_per_node: {gpus}\n")
    return argus.call("POST", "/api/v2/tasks", spec, token=token,
                      content_type="application/yaml")["task_id"]


def state(argus: Argus, task_id: str) -> str:
    return argus.call("GET", f"/api/v2/tasks/{task_id}")["state"]


def run(argus: Argus, task_id: str, node: str, gpus: int) -> None:
    """The scheduler handed the attempt to Ray; the fake starts its gang on ``node``."""
    sid = f"{task_id}--a01"
    wait_for(f"{task_id} submitted", lambda: sid in argus.cluster.jobs)
    argus.cluster.start(sid, {node: gpus})
    wait_state(argus, task_id, "RUNNING")


def wait_state(argus: Argus, task_id: str, want: str) -> None:
    seen: list[str] = []

    def reached() -> bool:
        seen.append(state(argus, task_id))
        return seen[-1] == want

    try:
        wait_for(f"{task_id} {want}", reached)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: still {seen[-1]}") from None


def gpus_in_use_from_api(argus: Argus) -> dict[str, float]:
    out = dict.fromkeys(("admin", "prometheus", *USERS), 0.0)
    for st in ("SUBMITTING", "SUBMITTED", "RUNNING"):
        for task in argus.call("GET", f"/api/v2/tasks?state={st}&user=all")["tasks"]:
            out[task["user"]] += task["desired_resources"]["total_gpus"]
    return out


def test_every_dashboard_expression_is_true_against_a_real_prometheus(
        argus: Argus, prometheus: Prometheus) -> None:
    started = time.time()
    tokens = {}
    for name in USERS:
        argus.call("POST", "/api/v2/users", {"name": name, "role": "user"})
        tokens[name] = argus.call("POST", f"/api/v2/users/{name}/tokens", {})["token"]
    everyone = {"admin", "prometheus", *USERS}
    wait_for("every known user's GPU-seconds at 0 in Prometheus", lambda: prometheus.values(
        "argus_user_gpu_seconds_total", "user") == dict.fromkeys(everyone, 0.0))

    argus.cluster.add_node("n1", gpus=4, cpus=32)
    argus.cluster.add_node("n2", gpus=4, cpus=32)
    ok, failing = submit(argus, tokens["alice"], 2), submit(argus, tokens["alice"], 1)
    canceled_running = submit(argus, tokens["bob"], 4)
    run(argus, ok, "n1", 2)
    run(argus, failing, "n1", 1)
    run(argus, canceled_running, "n2", 4)
    canceled_waiting = submit(argus, tokens["bob"], 8)  # can never fit: it waits
    admitted_later = submit(argus, tokens["dan"], 2)  # 1 GPU free: it waits for room
    wait_for("the waiting tasks in Prometheus", lambda: prometheus.values(
        "argus_pending_tasks", "reason") == {
            **dict.fromkeys((k.value for k in WaitKind), 0.0),
            "resources": 1.0, "never_fits": 1.0})  # every kind exposed, from 0
    wait_for("dan's admissions at 0 while his task waits",
             lambda: prometheus.values(f"sum({DAN_ADMITTED})", "") == {"": 0.0})

    in_use = gpus_in_use_from_api(argus)
    assert in_use == {"admin": 0, "prometheus": 0, "alice": 3, "bob": 4, "carol": 0,
                      "dan": 0}
    wait_for(f"'{GPUS_BY_USER}' equal to the API's running gangs",
             lambda: prometheus.values(expr_of(GPUS_BY_USER), "user") == in_use)

    argus.cluster.finish(f"{ok}--a01", RayStatus.SUCCEEDED)
    argus.cluster.finish(f"{failing}--a01", RayStatus.FAILED, message="driver exited 1")
    argus.call("POST", f"/api/v2/tasks/{canceled_waiting}:cancel", token=tokens["bob"])
    argus.call("POST", f"/api/v2/tasks/{canceled_running}:cancel", token=tokens["bob"])
    run(argus, admitted_later, "n1", 2)  # n1 is free again
    argus.cluster.finish(f"{admitted_later}--a01", RayStatus.SUCCEEDED)
    for task_id, end in ((ok, "SUCCEEDED"), (failing, "FAILED"), (admitted_later, "SUCCEEDED"),
                         (canceled_waiting, "CANCELED"), (canceled_running, "CANCELED")):
        wait_state(argus, task_id, end)
    # the admission of a pair (workload, user) first seen waiting counts in rate()
    wait_for("dan's admission in increase()", lambda: prometheus.values(
        f"sum(increase({DAN_ADMITTED}[1h]))", "").get(
            "", 0.0) >= 0.9)

    usage = {u["user"]: u["gpu_seconds"]
             for u in argus.call("GET", f"/api/v2/usage?from={started - 60:.0f}")["users"]}
    assert set(usage) == {"alice", "bob", "dan"} and min(usage.values()) > 0, usage
    expected = {user: usage.get(user, 0.0) for user in everyone}
    wait_for("the API's GPU-seconds scraped", lambda: _close(
        prometheus.values("argus_user_gpu_seconds_total", "user"), expected))
    # At the last scrape's time Prometheus extrapolates nothing: the panel is exact there.
    (last,) = prometheus.instant("max(timestamp(argus_user_gpu_seconds_total))")
    at = float(last["value"][1])
    hours = {r["metric"]["user"]: float(r["value"][1])
             for r in prometheus.instant(expr_of(GPU_HOURS), at=at)}
    assert _close({u: h * 3600 for u, h in hours.items()}, expected), (hours, usage)

    # An admin cordons n2: the node panels show it by name, and its event is counted.
    argus.call("POST", "/api/v2/nodes/n2:cordon", {"reason": "swap GPU 3"})
    wait_for("n2 cordoned in Prometheus", lambda: prometheus.values(
        'argus_node_state{state!="schedulable"} == 1', "node") == {"n2": 1.0})
    nodes_by_state = next(t for panel, t in targets() if panel == NODES_BY_STATE)
    by_state = prometheus.values(expression(nodes_by_state, 0), "state")
    assert by_state == {"schedulable": 1.0, "cordoned": 1.0, "drained": 0.0}
    wait_for("the cordon counted", lambda: prometheus.values(
        'argus_node_events_total{source="operator"}', "kind") == {
            "NODE_CORDONED": 1.0, "NODE_DRAINED": 0.0, "NODE_RESUMED": 0.0,
            "NODE_QUARANTINED": 0.0})

    # The range queries' last step must come after the last scrape of the scenario (its
    # steps are a 1 s grid from `started`): wait for one more scrape.
    mark = time.time()
    wait_for("a scrape after the scenario", lambda: prometheus.values(
        "max(timestamp(up))", "").get("", 0.0) >= mark + SCRAPE_S)
    ended = time.time()
    for title, target in targets():
        expr = expression(target, ended - started)
        if target.get("instant"):
            body = prometheus.api("query", query=expr, time=ended)
        else:
            body = prometheus.api("query_range", query=expr, start=started, end=ended,
                                  step=SCRAPE_S)
        assert body["status"] == "success" and not body.get("warnings"), (title, expr, body)
        assert _finite_values(body["data"]["result"]), (title, expr, "empty")


def _close(got: dict[str, float], want: dict[str, float]) -> bool:
    """Equal but for the usage API's rounding (to the millisecond GPU-second)."""
    return set(got) == set(want) and all(
        got[k] == pytest.approx(want[k], rel=1e-6, abs=2e-3) for k in want)


def _finite_values(result: list[dict[str, Any]]) -> int:
    points = [v for r in result for _, v in r.get("values", [r.get("value", (0, "NaN"))])]
    return sum(math.isfinite(float(v)) for v in points)
