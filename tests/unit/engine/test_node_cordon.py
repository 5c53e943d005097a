"""Cordoned nodes are out of admission; the health check cordons and resumes (issue 55)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from scheduler_env import T0, Env, S, sid

from service.config import SchedulerSettings, Settings
from service.domain.nodes import NodeSource, NodeStateKind
from service.engine.scheduler import Scheduler


def test_a_cordoned_node_gets_no_new_attempt_and_a_resumed_one_does(env: Env) -> None:
    env.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "bad ECC on GPU 2")
    t = env.add()
    assert env.tick(T0).submitted == 0
    assert env.state(t) is S.PENDING_RESOURCES
    reason = env.store.tasks.get_task(t).pending_reason
    assert "w1 is cordoned: bad ECC on GPU 2" in reason, reason
    env.store.nodes.resume("w1", None, "root", T0 + 1, "fixed")
    assert env.tick(T0 + 1).submitted == 1
    assert env.cluster.submit_calls == [sid(t)]


def test_a_cordon_moves_work_to_the_other_nodes(env: Env) -> None:
    env.cluster.add_node("w2", gpus=4, cpus=16)
    env.store.nodes.drain("w1", "root", T0, "maintenance")
    a, b = env.add(), env.add()
    assert env.tick(T0).submitted == 0  # the fence on w1 starts; nothing starts before it holds
    assert env.tick(T0 + 1).submitted == 1  # only w2's 4 GPUs count
    assert (env.state(a), env.state(b)) == (S.SUBMITTED, S.PENDING_RESOURCES)
    assert "w1 is drained: maintenance" in env.store.tasks.get_task(b).pending_reason


def test_an_uncordoned_gang_that_could_not_use_the_node_is_not_told_of_it(env: Env) -> None:
    env.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "why")
    t = env.add(g=8)  # w1 has 4 GPUs: the cordon is not why it waits
    env.tick(T0)
    assert "cordoned" not in env.store.tasks.get_task(t).pending_reason


# -- the health files ------------------------------------------------------------------


def _health_env(root: Path, **sched: object) -> Env:
    env = Env(root)
    head_json = root / "ray" / "discovery" / "argus" / "head.json"
    (head_json.parent / "nodes").mkdir(parents=True)
    env.settings = Settings(shared_root=str(root), head_json=str(head_json),
                            scheduler=SchedulerSettings(**sched))  # type: ignore[arg-type]
    env.sched = Scheduler(env.store, env.cluster, env.settings, env.artifacts)
    return env


def _plant(env: Env, name: str, healthy: bool, at: float, reason: str = "ok",
           raw: str | None = None) -> None:
    path = Path(env.settings.head_json).parent / "nodes" / f"{name}.health.json"
    path.write_text(raw if raw is not None else json.dumps({
        "version": 1, "node": name, "healthy": healthy, "reason": reason,
        "checked_at": at, "interval_s": 30.0, "checks": []}))


@pytest.fixture
def henv(tmp_path: Path) -> Env:
    e = _health_env(tmp_path, node_health_every_s=1.0, node_health_passes=3)
    yield e
    e.store.close()


def test_an_unhealthy_report_is_out_of_admission_in_the_tick_that_reads_it(henv: Env) -> None:
    _plant(henv, "w1", False, T0, "xid: XID 79 GPU has fallen off the bus")
    t = henv.add()
    assert henv.tick(T0).submitted == 0
    row = henv.store.nodes.state("w1")
    assert row is not None and (row.state, row.source) == (NodeStateKind.CORDONED,
                                                           NodeSource.HEALTH)
    assert row.reason == "health: xid: XID 79 GPU has fallen off the bus"
    assert "w1 is cordoned: health: xid" in henv.store.tasks.get_task(t).pending_reason


def test_the_service_resumes_its_own_cordon_after_n_passes(henv: Env) -> None:
    _plant(henv, "w1", False, T0, "ecc: 2 uncorrectable")
    henv.tick(T0)
    for i in (1, 2):
        _plant(henv, "w1", True, T0 + 30 * i)
        henv.tick(T0 + 30 * i)
        henv.tick(T0 + 30 * i + 1)  # the same round read again counts once
        assert henv.store.nodes.state("w1") is not None
    t = henv.add()
    _plant(henv, "w1", True, T0 + 90)
    assert henv.tick(T0 + 90).submitted == 1
    assert henv.store.nodes.state("w1") is None
    assert [e.kind.value for e in henv.store.nodes.events("w1")] == [
        "NODE_CORDONED", "NODE_RESUMED"]
    assert henv.state(t) is S.SUBMITTED


def test_the_health_check_never_lifts_an_operators_cordon(henv: Env) -> None:
    henv.store.nodes.cordon("w1", NodeSource.OPERATOR, "root", T0, "replacing a fan")
    for i in range(5):
        _plant(henv, "w1", True, T0 + 30 * i)
        henv.tick(T0 + 30 * i)
    row = henv.store.nodes.state("w1")
    assert row is not None and row.source is NodeSource.OPERATOR


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", json.dumps({"version": 2}),
                                 json.dumps({"version": 1, "node": "w9", "healthy": False,
                                             "reason": "x", "checked_at": T0,
                                             "interval_s": 30}),
                                 "\x00" * 100_000])
def test_garbage_is_ignored_with_a_log_line(henv: Env, raw: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    _plant(henv, "w1", False, T0, raw=raw)
    t = henv.add()
    with caplog.at_level(logging.WARNING, logger="service.engine.node_health"):
        assert henv.tick(T0).submitted == 1
    assert henv.store.nodes.state("w1") is None and henv.state(t) is S.SUBMITTED
    assert "health file of node w1 ignored" in caplog.text


def test_a_stale_report_is_ignored(henv: Env) -> None:
    _plant(henv, "w1", False, T0 - 3600, "old")
    henv.tick(T0)
    assert henv.store.nodes.state("w1") is None


def test_a_link_in_place_of_the_file_is_not_followed(henv: Env, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"version": 1, "node": "w1", "healthy": False,
                                   "reason": "planted", "checked_at": T0, "interval_s": 30}))
    (Path(henv.settings.head_json).parent / "nodes" / "w1.health.json").symlink_to(outside)
    henv.tick(T0)
    assert henv.store.nodes.state("w1") is None
