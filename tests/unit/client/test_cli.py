"""The ``argus`` CLI (``argus_client.cli``) against a running test server (real app,
Store, FakeCluster).

The CLI is synchronous (urllib), so each call runs in a worker thread while the test's
event loop serves the requests. ``wait`` and ``logs --follow`` get an injected sleep that
drives the scheduler instead of waiting, and an injected clock.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys

import pytest
from cli_server import T0, TOKEN, Server, run, submitted

from argus_client.cli import main as cli
from argus_client.cli.exits import Exit
from argus_client.env import DEFAULT_URL
from service.domain.states import RayStatus


async def test_submit_file(server, tmp_path):
    out = _Terminal()  # on a terminal: the id and the state
    code = await asyncio.to_thread(cli.main, ["--url", server.url, "submit",
                                              str(server.spec_file(tmp_path))], out=out)
    assert code == 0
    task_id, state = out.getvalue().split()
    assert state == "QUEUED" and server.store.tasks.task_exists(task_id)


async def test_submit_stdin(server, tmp_path, monkeypatch):
    data = server.spec_file(tmp_path).read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out = await run(server, "submit", "-", "--json")
    assert code == 0
    assert json.loads(out)["state"] == "QUEUED"


async def test_submit_invalid_prints_error_and_details(server, tmp_path, capsys):
    path = server.spec_file(tmp_path, nnodes=0, code_path="rel/path")
    code, out = await run(server, "submit", str(path))
    assert code == Exit.ERROR and out == ""
    err = capsys.readouterr().err
    assert "HTTP 400: invalid JobSpec" in err
    assert "  nnodes:" in err and "  code_path:" in err


async def test_submit_missing_file(server, tmp_path, capsys):
    code, _ = await run(server, "submit", str(tmp_path / "absent.yaml"))
    assert code == Exit.USAGE  # the caller's own file: nothing was sent
    assert "cannot read" in capsys.readouterr().err


async def test_status_table_and_json(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    code, out = await run(server, "status", task_id)
    assert code == 0
    rows = dict(line.split(None, 1) for line in out.splitlines())
    assert rows["task_id"] == task_id and rows["state"] == "QUEUED" and rows["priority"] == "0"
    assert rows["resources"] == "1x2 GPUs" and rows["queue_position"] == "1"
    code, out = await run(server, "status", task_id, "--json")
    assert code == 0 and json.loads(out)["desired_resources"]["total_gpus"] == 2


async def test_status_and_attempts_show_where_the_latest_attempt_runs(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    server.cluster.start(f"{task_id}--a01", {"n1": 2})
    server.tick()
    code, out = await run(server, "status", task_id)
    rows = dict(line.split(None, 1) for line in out.splitlines())
    assert code == 0 and rows["nodes"] == "n1 (driver), n1 (gang, 2 GPUs)", out
    code, out = await run(server, "attempts", task_id)
    assert code == 0 and "NODES" in out and "n1 (driver), n1 (gang, 2 GPUs)" in out, out


async def test_status_shows_the_description(server, tmp_path):
    task_id = await submitted(server, tmp_path, description="lr sweep, run 3")
    code, out = await run(server, "status", task_id)
    assert code == 0
    rows = dict(line.split(None, 1) for line in out.splitlines())
    assert rows["description"] == "lr sweep, run 3"


async def test_status_unknown_task_is_exit_not_found(server, capsys):
    code, _ = await run(server, "status", "mvp2-sft-20250101-000000-beef")
    assert code == Exit.NOT_FOUND
    assert "HTTP 404" in capsys.readouterr().err


async def test_events(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    code, out = await run(server, "events", task_id)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["TIME", "EVENT", "DETAILS"]
    assert any("STATE_TRANSITION" in line and "QUEUED -> SUBMITTING" in line for line in lines)
    code, out = await run(server, "--json", "events", task_id)
    assert json.loads(out)["events"][0]["type"] == "CREATED"


async def test_attempts(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    code, out = await run(server, "attempts", task_id)
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:3] == ["ATTEMPT", "RAY_SUBMISSION_ID", "RAY_STATUS"]
    assert row.split()[:3] == ["1", f"{task_id}--a01", "PENDING"]
    code, out = await run(server, "--json", "attempts", task_id)
    assert json.loads(out)["attempts"][0]["attempt_no"] == 1


async def test_logs_with_tail_and_attempt(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    server.cluster.write_log(f"{task_id}--a01", "a\nb\nc\n")
    code, out = await run(server, "logs", task_id, "--tail", "2", "--attempt", "1")
    assert (code, out) == (0, "b\nc\n")


async def test_logs_follow_until_the_task_ends(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    sid = f"{task_id}--a01"
    server.cluster.start(sid, {"n1": 2})
    server.cluster.write_log(sid, "step 1\n")
    script = [
        lambda: server.cluster.write_log(sid, "step 2\n"),
        lambda: (server.cluster.finish(sid, RayStatus.SUCCEEDED, log="done\n"), server.tick()),
    ]
    slept: list[float] = []

    def fake_sleep(seconds: float) -> None:  # runs in the CLI thread between polls
        slept.append(seconds)
        script.pop(0)()

    code, out = await run(server, "logs", task_id, "--follow", sleep=fake_sleep)
    assert code == 0
    assert out == "step 1\nstep 2\ndone\n"
    assert len(slept) == 2


async def test_cancel(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    code, out = await run(server, "cancel", task_id)
    assert (code, out.split()) == (0, [task_id, "CANCELED"])
    code, out = await run(server, "cancel", task_id)  # idempotent: the API's 409, said so
    assert (code, out) == (0, f"{task_id}  CANCELED  (already ended: nothing to cancel)\n")


async def test_cancel_running_says_stop_requested(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    code, out = await run(server, "cancel", task_id)
    assert code == 0 and "stop requested" in out


async def test_queue(server, tmp_path):
    first = await submitted(server, tmp_path, n_gpus_per_node=4)
    server.tick()
    second = await submitted(server, tmp_path, n_gpus_per_node=4)
    server.tick()
    code, out = await run(server, "queue")
    assert code == 0
    pending, running = out.split("\n\n")
    assert second in pending and "needs" in pending
    assert first in running and f"{first}--a01" in running
    code, out = await run(server, "queue", "--json")
    data = json.loads(out)
    assert [t["task_id"] for t in data["pending"]] == [second]
    assert "KIND" in pending and " resources  needs " in pending.splitlines()[2]


async def test_queue_and_list_filter_by_reason_kind(server, tmp_path):
    await submitted(server, tmp_path, n_gpus_per_node=4)
    server.tick()
    second = await submitted(server, tmp_path, n_gpus_per_node=4)
    server.tick()
    third = await submitted(server, tmp_path, n_gpus_per_node=4)  # not examined: new
    code, out = await run(server, "queue", "--reason", "new", "--json")
    assert code == 0 and [t["task_id"] for t in json.loads(out)["pending"]] == [third]
    code, out = await run(server, "list", "--user", "all", "--reason", "resources", "--json")
    assert code == 0 and [t["task_id"] for t in json.loads(out)["tasks"]] == [second]
    code, _ = await run(server, "queue", "--reason", "bogus")
    assert code != 0


async def test_labels_and_max_attempts_in_status_and_list(server, tmp_path):
    nlp = await submitted(server, tmp_path, labels="{team: nlp, env: dev}", max_attempts=2)
    vision = await submitted(server, tmp_path, labels="{team: vision}")
    code, out = await run(server, "status", nlp)
    assert code == 0 and "env=dev,team=nlp" in out and "max_attempts" in out
    assert [line.split()[-1] for line in out.splitlines()
            if line.startswith("max_attempts")] == ["2"]
    code, out = await run(server, "list", "--user", "all")
    assert code == 0 and "LABELS" in out.splitlines()[0] and "team=vision" in out
    code, out = await run(server, "list", "--user", "all", "--label", "team=nlp", "--json")
    assert code == 0 and [t["task_id"] for t in json.loads(out)["tasks"]] == [nlp]
    code, out = await run(server, "list", "--user", "all", "--label", "team=nlp",
                          "--label", "env=prod", "--json")
    assert code == 0 and json.loads(out)["tasks"] == []
    code, out = await run(server, "list", "--user", "all", "--label", "team=vision",
                          "--json")
    assert [t["task_id"] for t in json.loads(out)["tasks"]] == [vision]
    with pytest.raises(SystemExit):  # argparse: not KEY=VALUE
        await run(server, "list", "--label", "team")
    code, _ = await run(server, "list", "--label", "Team=x")  # the server's 400
    assert code != 0


async def test_queue_follows_the_pages_of_a_long_queue(server, tmp_path, monkeypatch):
    from service.web.api import handlers

    monkeypatch.setattr(handlers, "QUEUE_LIMIT_DEFAULT", 2)  # pages of 2 waiting tasks
    ids = [await submitted(server, tmp_path, n_gpus_per_node=64) for _ in range(5)]
    code, out = await run(server, "queue", "--json")
    assert code == 0
    data = json.loads(out)
    assert [t["task_id"] for t in data["pending"]] == ids
    assert [t["queue_position"] for t in data["pending"]] == [1, 2, 3, 4, 5]


def test_queue_shows_the_fair_shares() -> None:
    from argus_client.cli.tasks import fair_share_text as _fair_share

    text = _fair_share([{"user": "bob", "gpus": 1.0, "share": 0.125, "weight": 1.0,
                         "weighted_share": 0.125},
                        {"user": "alice", "gpus": 4.0, "share": 0.5, "weight": 2.0,
                         "weighted_share": 0.25}])
    header, bob, alice = text.strip().splitlines()[1:]
    assert header.split() == ["USER", "GPUS", "SHARE", "WEIGHT", "WEIGHTED"]
    assert bob.split() == ["bob", "1.0", "0.125", "1.0", "0.125"]
    assert alice.split()[0] == "alice" and _fair_share([]) == ""


def test_status_and_queue_say_what_a_start_estimate_comes_from() -> None:
    from argus_client.cli.tasks import estimate_cell, estimate_text

    at, by = "2026-11-24T17:20:00.000Z", "2026-11-24T18:05:00.000Z"
    limits = {"estimated_start": by, "estimate_basis": "time_limits",
              "estimated_start_bound": by}
    history = {"estimated_start": at, "estimate_basis": "run_history",
               "estimated_start_bound": by}
    unknown = {"estimated_start": None, "estimate_basis": "unknown",
               "estimated_start_bound": None}
    assert estimate_text(limits) == f"by {by} (from time limits)"
    assert estimate_text(history) == (f"about {at} (from run history; by {by} at the latest, "
                                      "from time limits)")
    assert estimate_text(unknown).startswith("unknown")
    assert estimate_text({"estimate_basis": None}) is None  # not waiting
    assert [estimate_cell(t) for t in (limits, history, unknown)] == [f"<={by}", f"~{at}", "-"]


async def test_priority_reorders_the_queue(server, tmp_path):
    first = await submitted(server, tmp_path)
    second = await submitted(server, tmp_path)
    code, out = await run(server, "priority", second, "50")
    assert (code, out) == (0, f"{second}  priority 50  (queue position 1)\n")
    code, out = await run(server, "priority", first, "-7")
    assert (code, out.split()[:3]) == (0, [first, "priority", "-7"])
    code, out = await run(server, "queue")
    header, *rows = out.split("\n\n")[0].splitlines()[1:]
    assert header.split()[:3] == ["POS", "PRI", "TASK_ID"]
    assert [r.split()[:3] for r in rows] == [["1", "50", second], ["2", "-7", first]]
    code, out = await run(server, "status", second)
    assert dict(line.split(None, 1) for line in out.splitlines())["priority"] == "50"
    code, out = await run(server, "--json", "priority", first, "+3")
    assert code == 0 and json.loads(out)["priority"] == 3


async def test_priority_refusals_print_the_servers_message(server, tmp_path, monkeypatch,
                                                           capsys):
    alice = await new_user(server, "alice", monkeypatch)
    code, out = await run(server, "--token-env", alice, "--json", "submit",
                          str(server.spec_file(tmp_path)))
    task_id = json.loads(out)["task_id"]
    admins = await submitted(server, tmp_path)
    capsys.readouterr()
    cases = [
        (alice, task_id, "5", Exit.AUTH,
         "HTTP 403: priority 5 is above what users may ask for (0)"),
        (alice, admins, "-1", Exit.AUTH, "HTTP 403: only its owner (admin) or an admin"),
        ("ARGUS_API_TOKEN", task_id, "5000", Exit.ERROR, "HTTP 400: invalid priority request\n"
                                                         "  priority: must be from -1000 to 1000"),
    ]
    for var, target, priority, exit_code, needle in cases:
        code, out = await run(server, "--token-env", var, "priority", target, priority)
        assert (code, out) == (exit_code, "")
        assert needle in capsys.readouterr().err
    code, out = await run(server, "--token-env", alice, "priority", task_id, "-1")
    assert code == 0 and "priority -1" in out
    server.tick()  # submitted: no longer waiting
    code, _ = await run(server, "--token-env", alice, "priority", task_id, "-2")
    assert code == Exit.ERROR
    assert f"HTTP 409: task {task_id} is SUBMITTED" in capsys.readouterr().err
    assert server.store.tasks.get_task(task_id).priority == -1


async def test_list_with_state_limit_and_cursor(server, tmp_path):
    ids = []
    for _ in range(3):
        ids.append(await submitted(server, tmp_path))
        server.now += 1
    err = io.StringIO()
    code, out = await run(server, "list", "--limit", "2", err=err)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["TASK_ID", "USER", "STATE"]
    assert [line.split()[0] for line in lines[1:]] == ids[:0:-1]  # data only on stdout
    cursor = err.getvalue().splitlines()[-1].split("--cursor ")[1]
    code, out = await run(server, "--json", "list", "--limit", "2", "--cursor", cursor)
    assert [t["task_id"] for t in json.loads(out)["tasks"]] == [ids[0]]
    code, out = await run(server, "list", "--state", "CANCELED", "--json")
    assert json.loads(out)["tasks"] == []
    code, _ = await run(server, "list", "--state", "BOGUS")
    assert code == Exit.ERROR


async def test_wait_until_succeeded(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    sid = f"{task_id}--a01"
    steps = [lambda: server.cluster.start(sid, {"n1": 2}),
             lambda: server.cluster.finish(sid, RayStatus.SUCCEEDED)]

    def fake_sleep(_: float) -> None:
        steps.pop(0)()
        server.tick()

    code, out = await run(server, "wait", task_id, "--interval", "5", sleep=fake_sleep)
    assert code == 0
    assert "SUCCEEDED" in out and steps == []


async def test_wait_failed_task_exits_task_failed(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    server.cluster.finish(f"{task_id}--a01", RayStatus.FAILED, message="Traceback: boom")
    server.tick()
    code, out = await run(server, "wait", task_id, sleep=lambda _: None)
    assert code == Exit.TASK_FAILED and "FAILED" in out


async def test_wait_times_out_with_a_deadline(server, tmp_path, capsys):
    task_id = await submitted(server, tmp_path, n_gpus_per_node=8)  # never fits
    now = [0.0]
    sleeps: list[float] = []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    code, _ = await run(server, "wait", task_id, "--timeout", "10", "--interval", "3",
                        sleep=fake_sleep, clock=lambda: now[0])
    assert code == Exit.TIMEOUT
    assert sleeps == [3, 3, 3, 1]
    assert "still QUEUED after 10s" in capsys.readouterr().err


async def test_wrong_token_is_exit_auth(server, monkeypatch, capsys):
    monkeypatch.setenv("OTHER_TOKEN", "nope")
    code, _ = await run(server, "--token-env", "OTHER_TOKEN", "queue")
    assert code == Exit.AUTH
    assert "HTTP 401" in capsys.readouterr().err


def test_missing_token_is_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("ARGUS_API_TOKEN", raising=False)
    assert cli.main(["queue"]) == Exit.USAGE
    assert "ARGUS_API_TOKEN" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["logs", "x", "--tail", "0"],
    ["logs", "x", "--attempt", "one"],
    ["wait", "x", "--timeout", "-3"],
    ["priority", "x", "high"],
    ["priority", "x", "1.5"],
    ["priority", "x"],
    ["frobnicate"],
    [],
])
def test_usage_errors_exit_2(monkeypatch, argv):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2


def test_unreachable_server_is_exit_connection(monkeypatch, capsys, unused_tcp_port):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    code = cli.main(["--url", f"http://127.0.0.1:{unused_tcp_port}", "queue"])
    assert code == Exit.CONNECTION
    assert "cannot reach" in capsys.readouterr().err


def test_url_from_environment(monkeypatch):
    monkeypatch.setenv("ARGUS_URL", "http://argus.example:9000")
    assert cli.build_parser().parse_args(["queue"]).url == "http://argus.example:9000"
    monkeypatch.delenv("ARGUS_URL")
    assert cli.build_parser().parse_args(["queue"]).url == DEFAULT_URL


# -- users, tokens, usage ----------------------------------------------------------------------


async def new_user(srv: Server, name: str, monkeypatch, role: str = "user") -> str:
    """``argus user create NAME`` as the admin; the new token goes to ``<NAME>_TOKEN``."""
    code, out = await run(srv, "--json", "user", "create", name, "--role", role,
                          "--label", "first")
    assert code == 0, out
    data = json.loads(out)
    assert data["user"]["name"] == name and data["token"]["label"] == "first"
    var = f"{name.upper()}_TOKEN"
    monkeypatch.setenv(var, data["token"]["token"])
    return var


async def test_user_create_prints_the_token_once(server, monkeypatch):
    err = io.StringIO()
    code, out = await run(server, "user", "create", "alice", err=err)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["name", "alice"] and "unlimited tasks" in out
    assert lines[-1].startswith("argus_")  # the secret, on its own line
    token = lines[-1]
    assert "shown this once" in err.getvalue()  # the reminder: stderr
    monkeypatch.setenv("ALICE_TOKEN", token)
    code, out = await run(server, "--token-env", "ALICE_TOKEN", "me")
    assert code == 0 and out.split("\n")[0].split() == ["name", "alice"]
    err = io.StringIO()
    code, out = await run(server, "user", "create", "bob", "--no-token", err=err)
    assert code == 0 and "argus token create --user bob" in err.getvalue()


async def test_two_users_see_each_other_but_cancel_only_their_own(server, tmp_path,
                                                                  monkeypatch, capsys):
    alice = await new_user(server, "alice", monkeypatch)
    bob = await new_user(server, "bob", monkeypatch)
    spec = str(server.spec_file(tmp_path))

    async def as_(var: str, *argv: str) -> tuple[int, str]:
        return await run(server, "--token-env", var, *argv)

    code, out = await as_(alice, "--json", "submit", spec)
    a_task = json.loads(out)["task_id"]
    assert a_task.startswith("mvp2-alice-sft-")
    code, out = await as_(bob, "--json", "submit", spec)
    b_task = json.loads(out)["task_id"]
    capsys.readouterr()
    code, out = await as_(alice, "queue")  # mine by default
    assert a_task in out and b_task not in out and "--user all" in capsys.readouterr().err
    code, out = await as_(alice, "queue", "--user", "all")
    assert a_task in out and b_task in out and "alice" in out and "bob" in out
    code, out = await as_(alice, "--json", "list", "--user", "bob")
    assert [t["task_id"] for t in json.loads(out)["tasks"]] == [b_task]
    capsys.readouterr()
    code, _ = await as_(alice, "cancel", b_task)
    assert code == Exit.AUTH
    assert "HTTP 403: only its owner (bob) or an admin" in capsys.readouterr().err
    code, out = await run(server, "cancel", b_task)  # the admin may
    assert code == 0 and "CANCELED" in out


async def test_token_create_list_revoke(server, monkeypatch, capsys):
    alice = await new_user(server, "alice", monkeypatch)
    code, out = await run(server, "--token-env", alice, "--json", "token", "create",
                          "--label", "ci", "--expires-in", "30d")
    created = json.loads(out)
    assert code == 0 and created["label"] == "ci" and created["expires_at"]
    code, out = await run(server, "--token-env", alice, "token", "list")
    assert code == 0 and created["prefix"] in out and "ci" in out and created["token"] not in out
    code, out = await run(server, "--token-env", alice, "token", "revoke", created["prefix"])
    assert code == 0 and out.split() == [created["prefix"], "revoked"]
    code, out = await run(server, "--token-env", alice, "token", "revoke", created["token_id"])
    assert code == 0 and "(already)" in out
    capsys.readouterr()
    code, _ = await run(server, "--token-env", alice, "token", "create", "--user", "admin")
    assert code == Exit.AUTH and "HTTP 403" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        await run(server, "token", "create", "--expires-in", "soon")
    assert exc.value.code == 2 and "must be a duration" in capsys.readouterr().err


async def test_user_list_disable_enable(server, monkeypatch, capsys):
    bob = await new_user(server, "bob", monkeypatch)
    code, out = await run(server, "user", "list")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["admin", "bob"]
    code, out = await run(server, "user", "disable", "bob")
    assert code == 0 and "bob  disabled: the user's tokens are refused" in out
    capsys.readouterr()
    code, _ = await run(server, "--token-env", bob, "me")
    assert code == Exit.AUTH and "HTTP 401: user bob is disabled" in capsys.readouterr().err
    code, out = await run(server, "user", "enable", "bob")
    assert code == 0 and "enabled" in out
    code, _ = await run(server, "--token-env", bob, "user", "list")
    assert code == Exit.AUTH and "HTTP 403" in capsys.readouterr().err


async def test_usage_table(server, tmp_path, monkeypatch):
    alice = await new_user(server, "alice", monkeypatch)
    code, out = await run(server, "--token-env", alice, "--json", "submit",
                          str(server.spec_file(tmp_path)))
    task_id = json.loads(out)["task_id"]
    server.tick()
    server.cluster.start(f"{task_id}--a01", {"n1": 2})
    server.tick()
    server.now += 30
    server.cluster.clock = server.now
    server.cluster.finish(f"{task_id}--a01")
    server.tick()
    code, out = await run(server, "--token-env", alice, "usage")
    assert code == 0
    header, row = out.splitlines()[2:4]
    assert header.split()[:3] == ["USER", "GPU_HOURS", "GPU_SECONDS"]
    # started at T0 + 1 (the fake's clock), ended at T0 + 32: 31 s x 2 GPUs
    assert row.split()[:3] == ["alice", f"{62 / 3600:.4f}", "62.0"]
    assert f"{task_id}  alice  2" in out and "a01 62.0s" in out
    code, out = await run(server, "--json", "usage", "--from", str(T0 + 22), "--user", "alice")
    assert code == 0 and json.loads(out)["users"][0]["gpu_seconds"] == 20.0  # 10 s x 2


def test_durations_and_times() -> None:
    from argus_client.cli.accounts import duration, token_id_of, when

    assert duration("90s") == 90 and duration("2w") == 14 * 86400 and duration("1.5h") == 5400
    for bad in ("", "5", "0d", "-1d", "1y"):
        with pytest.raises(Exception, match="duration"):
            duration(bad)
    assert when("1d", now=lambda: 86400 * 2) == "1970-01-02T00:00:00Z"
    assert when("2026-01-01T00:00:00Z") == "2026-01-01T00:00:00Z"
    assert token_id_of("argus_0123456789ab") == "0123456789ab"
    assert token_id_of("argus_0123456789ab_secretpart") == "0123456789ab"
    assert token_id_of("0123456789ab") == "0123456789ab"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


HOSTILE_LOG = ("\x1b[32mok\x1b[0m\n\x1b]0;pwned\x07retitle\n\x1b[2J\x1b[Hwipe\r\nbar\r50%\n"
               "\x9b31mC1\n")


def test_logs_on_a_terminal_show_control_sequences_instead_of_obeying_them():
    from argus_client.cli.terminal import safe_for_terminal

    assert safe_for_terminal(HOSTILE_LOG) == (
        "ok\n\\x1b]0;pwned\\x07retitle\n\\x1b[2J\\x1b[Hwipe\nbar\\r50%\n\\x9b31mC1\n")
    assert safe_for_terminal("plain\ttext\n") == "plain\ttext\n"


async def test_logs_escape_control_sequences_on_a_terminal_and_raw_asks_for_them(
        server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    server.cluster.write_log(f"{task_id}--a01", HOSTILE_LOG)
    for argv, tty, escaped in ((("logs", task_id), True, True),
                               (("logs", task_id, "--raw"), True, False),
                               (("logs", task_id), False, False)):  # a pipe: as it is
        out = _Terminal() if tty else io.StringIO()
        code = await asyncio.to_thread(cli.main, ["--url", server.url, *argv], out=out)
        assert code == 0
        assert ("\x1b" not in out.getvalue()) is escaped, argv
        assert ("\\x1b]0;pwned" in out.getvalue()) is escaped, argv
