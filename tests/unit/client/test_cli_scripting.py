"""The CLI in scripts: data alone on stdout (an id from submit when stdout is not a
terminal), notes and hints on stderr, ``--json`` for every answer and every error, exit
codes a script can branch on (docs/client.md), against the real app on a FakeCluster."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import pytest
from aiohttp import web
from cli_server import TOKEN, Driver, Server, Terminal, run, submitted

from argus_client.cli import main as cli
from argus_client.cli.exits import Exit
from service.domain.states import RayStatus


def pipeline_file(srv: Server, tmp_path) -> str:
    spec = {"workload": "sft", "code_path": f"{srv.shared}/code", "model_id": "org/model",
            "train_file": f"{srv.shared}/train.parquet", "val_file": None, "nnodes": 1,
            "n_gpus_per_node": 2}
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps({"name": "two", "stages": {
        "first": {"jobspec": spec},
        "second": {"after": {"ok": ["first"]}, "jobspec": spec}}}))
    return str(path)


# -- ids alone, so that ID=$(argus submit ...) works -------------------------------------------


async def test_submit_prints_the_id_alone_for_a_script_and_wait_takes_it(server, tmp_path):
    spec = str(server.spec_file(tmp_path))
    code, out = await run(server, "submit", spec)  # stdout is not a terminal
    task_id = out.strip()
    assert code == 0 and out == f"{task_id}\n" and server.store.tasks.task_exists(task_id)
    code, out = await run(server, "wait", task_id, sleep=Driver(server))
    assert code == Exit.OK and "SUCCEEDED" in out
    terminal = Terminal()
    code = await asyncio.to_thread(cli.main, ["--url", server.url, "submit", spec, "-q"],
                                   out=terminal)
    assert code == 0 and len(terminal.getvalue().split()) == 1  # -q: alone on a terminal too
    code, out = await run(server, "--json", "submit", spec)
    assert code == 0 and json.loads(out)["state"] == "QUEUED"


async def test_pipeline_submit_prints_the_id_alone_for_a_script(server, tmp_path):
    code, out = await run(server, "pipeline", "submit", pipeline_file(server, tmp_path))
    pipeline_id = out.strip()
    assert code == 0 and out == f"{pipeline_id}\n" and "-pipeline-" in pipeline_id
    terminal = Terminal()
    code = await asyncio.to_thread(cli.main, ["--url", server.url, "pipeline", "submit",
                                              pipeline_file(server, tmp_path)], out=terminal)
    lines = terminal.getvalue().splitlines()
    assert code == 0 and lines[1].split() == ["STAGE", "TASK_ID"] and len(lines) == 4


# -- following to the end ---------------------------------------------------------------------


@pytest.mark.parametrize(("outcome", "exit_code", "state"), [
    (RayStatus.SUCCEEDED, Exit.OK, "SUCCEEDED"),
    (RayStatus.FAILED, Exit.TASK_FAILED, "FAILED"),
])
async def test_submit_wait_follows_the_task_with_waits_exit_codes(
        server, tmp_path, outcome: RayStatus, exit_code: Exit, state: str) -> None:
    driver = Driver(server, outcome)
    err = io.StringIO()
    code, out = await run(server, "submit", str(server.spec_file(tmp_path)), "--wait",
                          "--interval", "1", sleep=driver, clock=driver.clock, err=err)
    assert code == exit_code
    task_id = out.strip()  # a script's stdout: the id alone, as without --wait
    assert out == f"{task_id}\n"
    assert err.getvalue().splitlines()[-1].split()[:2] == [task_id, state]
    code, out = await run(server, "--json", "submit", str(server.spec_file(tmp_path)),
                          "--wait", sleep=driver, clock=driver.clock)
    assert code == exit_code and json.loads(out)["state"] == state  # the ended task only


async def test_submit_wait_times_out_with_exit_7(server, tmp_path, capsys):
    driver = Driver(server)
    code, _ = await run(server, "submit", str(server.spec_file(tmp_path, n_gpus_per_node=8)),
                        "--wait", "--timeout", "10", sleep=driver, clock=driver.clock)
    assert code == Exit.TIMEOUT  # it never fits: the driver's ticks leave it waiting
    assert "still PENDING_RESOURCES after 10s" in capsys.readouterr().err


@pytest.mark.parametrize(("outcome", "exit_code", "state"), [
    (RayStatus.SUCCEEDED, Exit.OK, "SUCCEEDED"),
    (RayStatus.FAILED, Exit.TASK_FAILED, "FAILED"),
])
async def test_pipeline_wait_follows_it_to_the_end(server, tmp_path, outcome: RayStatus,
                                                   exit_code: Exit, state: str) -> None:
    code, out = await run(server, "pipeline", "submit", pipeline_file(server, tmp_path))
    pipeline_id = out.strip()
    driver = Driver(server, outcome)
    err = io.StringIO()
    code, out = await run(server, "pipeline", "wait", pipeline_id, "--timeout", "600",
                          sleep=driver, clock=driver.clock, err=err)
    assert code == exit_code, err.getvalue()
    assert f"state     {state}" in out  # the ended pipeline, as pipeline status shows it
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(f"{pipeline_id}  WAITING  first ")  # no stage started yet
    assert lines[-1].startswith(f"{pipeline_id}  {state}  first ")
    assert len(lines) == len(set(lines))  # a line per change, none repeated
    code, out = await run(server, "pipeline", "submit", pipeline_file(server, tmp_path),
                          "--wait", sleep=driver, clock=driver.clock)
    assert code == exit_code and out.count("\n") == 1  # the id alone: a script's stdout


# -- data on stdout, hints on stderr ----------------------------------------------------------


async def test_list_prints_rows_only_on_stdout_and_hints_on_stderr(server, tmp_path):
    ids = [await submitted(server, tmp_path) for _ in range(3)]
    err = io.StringIO()
    code, out = await run(server, "list", "--limit", "2", err=err)
    assert code == 0 and out.splitlines()[-1].split()[0] in ids  # `argus list | tail -1`
    assert err.getvalue().splitlines() == [
        "argus: only your tasks shown (--user all for everyone's)",
        err.getvalue().splitlines()[1]]
    assert err.getvalue().splitlines()[1].startswith("argus: more: --cursor ")
    code, out = await run(server, "list", "--no-header")
    assert [line.split()[0] for line in out.splitlines()] == ids[::-1]
    code, out = await run(server, "attempts", ids[0], "--no-header")
    assert (code, out) == (0, "\n")  # no attempt yet: no rows, no header
    err = io.StringIO()
    code, out = await run(server, "--json", "list", "--limit", "2", err=err)
    assert len(json.loads(out)["tasks"]) == 2 and err.getvalue() == ""


async def test_queue_hint_goes_to_stderr(server, tmp_path):
    await submitted(server, tmp_path)
    err = io.StringIO()
    code, out = await run(server, "queue", err=err)
    assert code == 0 and "--user all" not in out and "--user all" in err.getvalue()


# -- --json everywhere, errors included -------------------------------------------------------


def _json_error(out: str) -> dict[str, Any]:
    return json.loads(out)["error"]


def test_json_error_without_a_token(monkeypatch):
    monkeypatch.delenv("ARGUS_API_TOKEN", raising=False)
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["--json", "list"], out=out, err=err) == Exit.USAGE
    error = _json_error(out.getvalue())
    assert error["code"] == "usage_error" and "ARGUS_API_TOKEN" in error["message"]
    assert error["hint"] and err.getvalue() == ""


def test_json_usage_error_of_the_command_line(monkeypatch, capsys):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    out = io.StringIO()
    with pytest.raises(SystemExit) as exc:
        cli.main(["--json", "logs", "x", "--tail", "0"], out=out)
    assert exc.value.code == Exit.USAGE
    error = _json_error(out.getvalue())
    assert error["code"] == "usage_error" and "--tail" in error["message"]
    assert capsys.readouterr().err == ""


async def test_json_error_of_a_file_that_cannot_be_read(server, tmp_path):
    code, out = await run(server, "--json", "submit", str(tmp_path / "nope.yaml"))
    assert code == Exit.USAGE
    assert _json_error(out)["code"] == "usage_error"
    assert "cannot read" in _json_error(out)["message"]


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("argus 0.")


# -- exit codes of a wrong URL ----------------------------------------------------------------


async def _not_argus(aiohttp_server) -> str:
    """A web server that is not Argus, as ``python -m http.server`` answers: an HTML
    directory listing to a GET, 501 to a POST."""
    async def answer(request: web.Request) -> web.Response:
        if request.method == "POST":
            return web.Response(status=501, content_type="text/html",
                                text="<!DOCTYPE HTML><title>Unsupported method</title>")
        return web.Response(content_type="text/html", text="<!DOCTYPE HTML><ul></ul>")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    return str((await aiohttp_server(app)).make_url("")).rstrip("/")


async def test_a_server_that_is_not_argus_is_exit_5_for_a_post_too(
        aiohttp_server, tmp_path, monkeypatch, capsys):
    url = await _not_argus(aiohttp_server)
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    spec = tmp_path / "job.yaml"
    spec.write_text("workload: sft\n")
    for argv in (["submit", str(spec)], ["list"]):
        code = await asyncio.to_thread(cli.main, ["--url", url, *argv])
        assert code == Exit.CONNECTION, argv
        err = capsys.readouterr().err
        assert "does not look like an Argus API" in err and "argus: hint:" in err, err
        assert "<!DOCTYPE" not in err


async def test_a_url_ending_in_api_v2_says_to_drop_it(server, capsys):
    code, _ = await run(server, "--url", server.url + "api/v2", "list")
    assert code == Exit.CONNECTION
    err = capsys.readouterr().err
    assert f"hint: drop the /api/v2 suffix (argus adds /api/v2 itself): ARGUS_URL=" \
           f"{server.url.rstrip('/')}" in err


def test_a_url_without_a_scheme_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    assert cli.main(["--url", "127.0.0.1:18555", "list"]) == Exit.USAGE
    err = capsys.readouterr().err
    assert "has no scheme" in err and "hint: add http://" in err
    assert "http://127.0.0.1:18555" in err and "unknown url type" not in err


# -- logs of a task not started, cancel ---------------------------------------------------------


async def test_logs_of_a_task_not_started_is_exit_8_and_says_so(server, tmp_path, capsys):
    task_id = await submitted(server, tmp_path)
    code, out = await run(server, "logs", task_id)
    assert (code, out) == (Exit.NO_LOG_YET, "")
    assert f"task {task_id} is QUEUED: it has no attempt yet" in capsys.readouterr().err
    code, _ = await run(server, "logs", "mvp2-sft-20250101-000000-beef")
    assert code == Exit.NOT_FOUND  # an unknown task stays 3
    code, out = await run(server, "--json", "logs", task_id)
    assert code == Exit.NO_LOG_YET and _json_error(out)["code"] == "no_log_yet"


async def test_cancel_several_and_an_ended_one(server, tmp_path, capsys):
    first, second = await submitted(server, tmp_path), await submitted(server, tmp_path)
    await run(server, "cancel", first)
    capsys.readouterr()
    unknown = "mvp2-sft-20250101-000000-beef"
    code, out = await run(server, "cancel", first, unknown, second)
    assert code == Exit.NOT_FOUND  # the first failure's code; every id was tried
    assert out.splitlines() == [f"{first}  CANCELED  (already ended: nothing to cancel)",
                                f"{second}  CANCELED"]
    assert "HTTP 404" in capsys.readouterr().err
    code, out = await run(server, "--json", "cancel", first, second)
    assert code == 0
    assert [(d["task_id"], d.get("already_ended")) for d in json.loads(out)] == [
        (first, True), (second, True)]
    code, out = await run(server, "--json", "cancel", unknown, first)
    answers = json.loads(out)
    assert code == Exit.NOT_FOUND and answers[0]["error"]["status"] == 404
    assert answers[1]["state"] == "CANCELED"


async def test_cancel_an_ended_pipeline_exits_0(server, tmp_path):
    code, out = await run(server, "pipeline", "submit", pipeline_file(server, tmp_path))
    pipeline_id = out.strip()
    code, out = await run(server, "pipeline", "cancel", pipeline_id)
    assert code == 0 and "canceled 2 stage(s)" in out
    server.tick()  # the scheduler gives the pipeline its final state
    code, out = await run(server, "pipeline", "cancel", pipeline_id)
    assert code == 0 and "CANCELED; canceled 0 stage(s)" in out
