"""argus-api start-up: configuration, token, wiring (in-process; never imports ray)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from aiohttp import web

from service import main as main_mod
from service.cluster.fake import FakeCluster
from service.config import ConfigError
from service.domain.lease import LEADER, Instance
from service.store.writer import Store
from service.web.http_server import ServerLimits

TOKEN = "s3cret-token"


def write_config(tmp_path: Path, extra_v2: str = "") -> Path:
    cfg = tmp_path / "argus.yaml"
    cfg.write_text(
        f"ray:\n  shared_root: {tmp_path / 'shared'}\n"
        f"v2:\n  api: {{host: 127.0.0.1, port: 18080}}\n{extra_v2}"
    )
    return cfg


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ARGUS_API_TOKEN", "ARGUS_SHARED_ROOT", "ARGUS_DB_PATH", "ARGUS_API_PORT",
                "ARGUS_API_HOST", "ARGUS_RAY_ADDRESS", "ARGUS_GCS_ADDRESS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> list[FakeCluster]:
    """Stand in for service.cluster.raycluster so main() wires a FakeCluster instead of Ray."""
    made: list[FakeCluster] = []

    class ClosableFake(FakeCluster):
        closed = False

        def close(self) -> None:
            self.closed = True

    def ray_cluster(settings: object) -> FakeCluster:
        made.append(ClosableFake())
        return made[-1]

    module = types.ModuleType("service.cluster.raycluster")
    module.RayCluster = ray_cluster  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "service.cluster.raycluster", module)
    return made


@pytest.fixture
def run_app_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    calls: list[dict] = []

    def fake_run(app, host, port, limits, **kw):
        calls.append({"app": app, "host": host, "port": port, "limits": limits, **kw})

    monkeypatch.setattr(main_mod, "run", fake_run)
    monkeypatch.setattr(main_mod, "_exit_past_stuck_threads", lambda grace_s: None)
    # serve() shortens the GIL switch interval: not for the rest of the test process
    monkeypatch.setattr(main_mod.sys, "setswitchinterval", lambda interval: None)
    return calls


@pytest.mark.parametrize("value", [None, "", "   "])
def test_refuses_to_start_without_token(tmp_path, monkeypatch, capsys, fake_ray, run_app_calls,
                                        value):
    if value is not None:
        monkeypatch.setenv("ARGUS_API_TOKEN", value)
    with pytest.raises(SystemExit) as exc:
        main_mod.main(["--config", str(write_config(tmp_path))])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "no API token" in err and "ARGUS_API_TOKEN" in err
    assert run_app_calls == [] and fake_ray == []


def test_token_env_name_comes_from_config(tmp_path, monkeypatch, capsys, fake_ray,
                                          run_app_calls):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)  # the default name is not the one asked for
    cfg = write_config(tmp_path, "  auth: {token_env: MY_TEAM_TOKEN}\n")
    with pytest.raises(SystemExit) as exc:
        main_mod.main(["--config", str(cfg)])
    assert exc.value.code == 2
    assert "MY_TEAM_TOKEN" in capsys.readouterr().err


def test_missing_config_file_exits_2(tmp_path, monkeypatch, capsys, run_app_calls):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    with pytest.raises(SystemExit) as exc:
        main_mod.main(["--config", str(tmp_path / "nope.yaml")])
    assert exc.value.code == 2
    assert "cannot read config file" in capsys.readouterr().err


def test_invalid_config_value_exits_2(tmp_path, monkeypatch, capsys, run_app_calls):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    cfg = write_config(tmp_path, "  scheduler: {tick_s: -1}\n")
    with pytest.raises(SystemExit) as exc:
        main_mod.main(["--config", str(cfg)])
    assert exc.value.code == 2
    assert "v2.scheduler.tick_s" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--port", "70000"], "--port"),
    (["--shared-root", "relative/dir"], "--shared-root"),
])
def test_bad_flags_exit_2(tmp_path, monkeypatch, capsys, run_app_calls, argv, message):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    with pytest.raises(SystemExit) as exc:
        main_mod.main(["--config", str(write_config(tmp_path)), *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_config_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main_mod.main([])
    assert exc.value.code == 2
    assert "--config" in capsys.readouterr().err


def test_flags_override_file(tmp_path):
    cfg = write_config(tmp_path)
    args = main_mod.parse_args([
        "--config", str(cfg), "--host", "0.0.0.0", "--port", "9999",
        "--db", str(tmp_path / "x.db"), "--ray-address", "http://10.0.0.9:8265",
    ])
    s = main_mod.settings_from_args(args, environ={})
    assert (s.api_host, s.api_port) == ("0.0.0.0", 9999)
    assert s.resolved_db_path == str(tmp_path / "x.db")
    assert s.ray_address == "http://10.0.0.9:8265"


def test_shared_root_moves_default_db_and_roots(tmp_path):
    cfg = write_config(tmp_path)
    args = main_mod.parse_args(["--config", str(cfg), "--shared-root", "/data/argus"])
    s = main_mod.settings_from_args(args, environ={})
    assert s.shared_root == "/data/argus"
    assert s.resolved_db_path == "/data/argus/common/db/mvp_v2.sqlite3"
    assert s.resolved_allowed_roots == ("/data/argus",)


def test_shared_root_follows_values_equal_to_old_defaults(tmp_path):
    # dev.yaml spells the defaults out; they still follow --shared-root
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "ray: {shared_root: /private}\n"
        "v2:\n  sqlite: {db_path: /private/common/db/mvp_v2.sqlite3}\n"
        "  jobspec: {allowed_roots: [/private]}\n"
    )
    s = main_mod.settings_from_args(
        main_mod.parse_args(["--config", str(cfg), "--shared-root", "/srv/a"]), environ={})
    assert s.resolved_db_path == "/srv/a/common/db/mvp_v2.sqlite3"
    assert s.resolved_allowed_roots == ("/srv/a",)


def test_shared_root_keeps_explicit_db_and_roots(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "ray: {shared_root: /private}\n"
        "v2:\n  sqlite: {db_path: /var/lib/argus.db}\n"
        "  jobspec: {allowed_roots: [/private, /datasets]}\n"
    )
    s = main_mod.settings_from_args(
        main_mod.parse_args(["--config", str(cfg), "--shared-root", "/srv/a"]), environ={})
    assert s.resolved_db_path == "/var/lib/argus.db"
    assert s.resolved_allowed_roots == ("/private", "/datasets")


def test_read_token_strips_and_rejects_blank():
    settings = main_mod.load_settings(None, environ={})
    assert main_mod.read_token(settings, {"ARGUS_API_TOKEN": " abc \n"}) == "abc"
    with pytest.raises(ConfigError, match="ARGUS_API_TOKEN"):
        main_mod.read_token(settings, {})


def test_main_wires_the_service_and_runs_it(tmp_path, monkeypatch, fake_ray, run_app_calls):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    main_mod.main(["--config", str(write_config(tmp_path)), "--port", "18123"])
    assert len(fake_ray) == 1 and fake_ray[0].closed
    (call,) = run_app_calls
    assert (call["host"], call["port"]) == ("127.0.0.1", 18123)
    assert call["access_log_class"] is main_mod.ErrorAccessLogger
    assert call["limits"] == ServerLimits(header_timeout_s=10.0, body_timeout_s=30.0,
                                          max_connections=512)
    assert (tmp_path / "shared" / "common" / "db" / "mvp_v2.sqlite3").exists()


def test_unopenable_database_exits_2(tmp_path, monkeypatch, capsys, fake_ray, run_app_calls):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SystemExit) as exc:
        main_mod.main(["--config", str(write_config(tmp_path)),
                       "--db", str(blocker / "sub" / "db.sqlite3")])
    assert exc.value.code == 2
    assert "cannot open the database" in capsys.readouterr().err
    assert run_app_calls == []


def test_database_of_a_newer_version_exits_2(tmp_path, monkeypatch, capsys, fake_ray,
                                             run_app_calls):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    db = tmp_path / "newer.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(SystemExit) as exc:
        main_mod.main(["--config", str(write_config(tmp_path)), "--db", str(db)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "cannot open the database" in err and "newer than this code" in err
    assert run_app_calls == []


@pytest.mark.parametrize("url, said", [
    ("postgresql://argus:pw@127.0.0.1:1/argus",
     "argus-api: cannot connect to PostgreSQL at postgresql://argus:***@127.0.0.1:1/argus: "),
    ("mysql://argus:pw@db/argus", "argus-api: ARGUS_STORE_URL: sqlite:///absolute/path or "
     "postgresql://user@host:port/db, got 'mysql://argus:***@db/argus'"),
])
def test_a_store_url_that_cannot_be_used_exits_2_with_one_line(
        url, said, tmp_path, monkeypatch, capsys, fake_ray, run_app_calls):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    monkeypatch.setenv("ARGUS_STORE_URL", url)
    with pytest.raises(SystemExit) as exc:
        main_mod.main(["--config", str(write_config(tmp_path))])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1 and ":pw@" not in err, err
    assert run_app_calls == []


def test_a_second_instance_on_the_database_exits_2_naming_the_holder(
        tmp_path, monkeypatch, capsys, fake_ray, run_app_calls):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    db = tmp_path / "db.sqlite3"
    store = Store(str(db))
    holder = Instance("other:4242:abcdef", "other-host", 4242, "other-host:8080")
    store.lease.take(LEADER, holder, None, time.time(), 3600.0)
    store.close()
    with pytest.raises(SystemExit) as exc:
        main_mod.main(["--config", str(write_config(tmp_path)), "--db", str(db)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "is in use by another Argus instance" in err and "other:4242:abcdef" in err
    assert "pid 4242 on other-host" in err
    assert run_app_calls == []


async def test_built_service_runs_the_scheduler_loop(tmp_path, aiohttp_client):
    """The app starts the real scheduler loop on start-up and stops it on shutdown."""
    settings = main_mod.load_settings(write_config(tmp_path), environ={})
    cluster = FakeCluster()  # no nodes: a submitted task must end up PENDING_RESOURCES
    app = main_mod.build_service(settings, TOKEN, cluster)
    client = await aiohttp_client(app)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    shared = tmp_path / "shared"
    (shared / "code").mkdir(parents=True)
    body = (
        f"workload: sft\ncode_path: {shared}/code\nmodel_id: org/model\n"
        f"train_file: {shared}/train.parquet\nval_file: null\nnnodes: 1\n"
        "n_gpus_per_node: 1\n"
    )
    resp = await client.post("/api/v2/tasks", data=body,
                             headers={**auth, "Content-Type": "application/yaml"})
    assert resp.status == 201, await resp.text()
    task_id = (await resp.json())["task_id"]
    deadline = time.monotonic() + 10
    state = None
    while time.monotonic() < deadline:
        state = (await (await client.get(f"/api/v2/tasks/{task_id}", headers=auth)).json())[
            "state"]
        if state == "PENDING_RESOURCES":
            break
        await asyncio.sleep(0.02)  # poll interval of a real thread, not a wait for it
    assert state == "PENDING_RESOURCES"
    health = await (await client.get("/healthz")).json()
    assert health["scheduler"]["ticks"] >= 1
    ready = await (await client.get("/readyz")).json()
    db = Store(settings.resolved_db_path)
    try:
        held = db.lease.get(LEADER)
    finally:
        db.close()
    assert ready["instance"]["role"] == "leader"
    assert ready["instance"]["holder"] == held.holder.holder
    assert {k: ready["instance"]["leader"][k] for k in ("holder", "address", "since", "epoch")} \
        == {"holder": held.holder.holder, "address": held.holder.address,
            "since": held.acquired_at, "epoch": 1}
    text = await (await client.get("/metrics", headers=auth)).text()
    assert f'argus_instance_leader{{address="{held.holder.address}",' \
           f'instance="{held.holder.holder}"}} 1.0' in text



async def test_a_stop_does_not_wait_past_its_share_for_a_tick_stuck_in_ray(
        tmp_path, aiohttp_client, monkeypatch, caplog):
    """A tick blocked in a Ray call holds the stop for ``LOOPS_STOP_S`` at most (the
    supervisor KILLs after its grace); the store stays open for the blocked thread."""
    import threading

    entered, release = threading.Event(), threading.Event()

    class StuckCluster(FakeCluster):
        def snapshot(self, submission_ids=()):
            entered.set()
            release.wait(30)
            return super().snapshot(submission_ids)

    monkeypatch.setattr(main_mod, "LOOPS_STOP_S", 0.2)
    settings = main_mod.load_settings(write_config(tmp_path), environ={})
    app = main_mod.build_service(settings, TOKEN, StuckCluster())
    client = await aiohttp_client(app)
    shared = tmp_path / "shared"
    (shared / "code").mkdir(parents=True)
    body = (f"workload: sft\ncode_path: {shared}/code\nmodel_id: org/model\n"
            f"train_file: {shared}/train.parquet\nval_file: null\nnnodes: 1\n"
            "n_gpus_per_node: 1\n")
    resp = await client.post("/api/v2/tasks", data=body, headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"})
    assert resp.status == 201, await resp.text()
    assert await asyncio.to_thread(entered.wait, 10), "the tick reached the cluster"
    try:
        started = time.monotonic()
        await client.close()  # the app's cleanup: the loops' stop
        assert time.monotonic() - started < 5
        assert "stopping with a loop still in a call (scheduler alive: True" in caplog.text
    finally:
        release.set()


@pytest.mark.parametrize("status, seconds, logged", [
    (200, 0.01, False), (201, 0.01, False), (404, 0.01, True), (500, 0.01, True),
    (200, 2.0, True),
])
def test_access_log_keeps_errors_and_slow_requests(caplog, status, seconds, logged):
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    logger = logging.getLogger("argus.access.test")
    access = main_mod.ErrorAccessLogger(logger, "")
    request = make_mocked_request("GET", "/api/v2/tasks?limit=5")
    with caplog.at_level(logging.INFO, logger="argus.access.test"):
        access.log(request, web.Response(status=status), seconds)
    assert bool(caplog.records) is logged
    if logged:
        assert f'"GET /api/v2/tasks?limit=5" {status}' in caplog.text


def test_exit_does_not_wait_for_a_thread_blocked_in_ray(monkeypatch):
    release = threading.Event()
    blocked = threading.Thread(target=release.wait, name="ray-call-0")  # non-daemon
    blocked.start()
    exits: list[int] = []
    monkeypatch.setattr(main_mod.os, "_exit", exits.append)
    monkeypatch.setattr(main_mod.logging, "shutdown", lambda: None)
    try:
        main_mod._exit_past_stuck_threads(0.01, [blocked])
    finally:
        release.set()
        blocked.join()
    assert exits == [0]


def test_exit_is_normal_when_no_thread_is_stuck(monkeypatch):
    exits: list[int] = []
    monkeypatch.setattr(main_mod.os, "_exit", exits.append)
    done = threading.Thread(target=lambda: None)
    done.start()
    main_mod._exit_past_stuck_threads(5.0, [done])
    assert exits == []


def test_refusals_are_logged_as_a_summary_not_one_line_each(caplog, monkeypatch):
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    monkeypatch.setattr(main_mod.ErrorAccessLogger, "_quiet", main_mod.Counter())
    monkeypatch.setattr(main_mod.ErrorAccessLogger, "_summary_at", float("-inf"))
    logger = logging.getLogger("argus.access.test")
    request = make_mocked_request("POST", "/ui/signin")
    with caplog.at_level(logging.INFO, logger="argus.access.test"):
        for i in range(1000):  # a new logger per connection, as aiohttp makes them
            main_mod.ErrorAccessLogger(logger, "").log(
                request, web.Response(status=401 if i % 2 else 429), 0.001)
    assert len(caplog.records) == 1  # the first refusal's summary; the rest wait
    assert "1 x 429" in caplog.text and '"POST /ui/signin"' in caplog.text
    assert sum(main_mod.ErrorAccessLogger._quiet.values()) == 999


def test_the_server_shortens_the_gil_switch_interval(monkeypatch):
    """The loop gets the GIL back within ``GIL_SWITCH_S`` of asking, not CPython's 5 ms,
    while the store's threads are busy."""
    import sys

    seen = []
    monkeypatch.setattr(main_mod, "run", lambda *a, **kw: seen.append(sys.getswitchinterval()))
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # CPython's default
    try:
        main_mod.serve(web.Application(), "127.0.0.1", 0)
    finally:
        sys.setswitchinterval(before)
    assert seen == [pytest.approx(main_mod.GIL_SWITCH_S)] and main_mod.GIL_SWITCH_S < 0.005


async def test_the_server_freezes_what_startup_made_once_the_loops_run(monkeypatch) -> None:
    import gc

    app = web.Application()
    app.on_startup.append(lambda _: None)  # build_service's hook: starts the loops
    monkeypatch.setattr(main_mod, "run", lambda *a, **kw: None)
    monkeypatch.setattr(main_mod.sys, "setswitchinterval", lambda interval: None)
    main_mod.serve(app, "127.0.0.1", 0)
    freeze = app.on_startup[-1]
    assert freeze is main_mod._freeze_startup_objects
    try:
        await freeze(app)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
