"""The SDK (``argus_client``) and the CLI's newer behaviour against a running test server
(real app, Store, FakeCluster): typed answers and errors, JSON/YAML/file submits, ``wait``
through network errors, ``logs -f`` that fetches only what is new, ``--json`` errors, a
wrong URL, shell completion."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

# the CLI tests' server fixture, shared by importing it (see test_cli_progress)
from cli_server import TOKEN, Server, run, submitted

from argus_client import (
    ArgusClient,
    ArgusConnectionError,
    ArgusError,
    AuthError,
    InvalidRequest,
    NotArgusError,
    NotFound,
    ServerError,
    Task,
    WaitTimeout,
)
from argus_client.cli import main as cli
from argus_client.cli.exits import Exit
from argus_client.client import jobspec_body
from argus_client.errors import RateLimited
from argus_client.retry import backoff, retrying
from service.domain.states import RayStatus


def spec(srv: Server, **fields: Any) -> dict[str, Any]:
    return {"workload": "sft", "code_path": f"{srv.shared}/code", "model_id": "org/model",
            "train_file": f"{srv.shared}/train.parquet", "val_file": None, "nnodes": 1,
            "n_gpus_per_node": 2, **fields}


class Recorder:
    """An opener that records every URL and fails the calls it is told to."""

    def __init__(self, failures: int = 0) -> None:
        self.urls: list[str] = []
        self.failures = failures

    def __call__(self, request: urllib.request.Request, timeout: float) -> Any:
        self.urls.append(request.full_url)
        if self.failures > 0:
            self.failures -= 1
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        return urllib.request.urlopen(request, timeout=timeout)


def client_of(srv: Server, **kw: Any) -> ArgusClient:
    return ArgusClient(srv.url, TOKEN, **kw)


async def sdk(fn, *args: Any, **kw: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kw)


async def test_submit_a_dict_a_yaml_string_and_files(server, tmp_path):
    client = client_of(server)
    as_dict = await sdk(client.submit, spec(server))
    yaml_text = "".join(f"{k}: {'null' if v is None else v}\n" for k, v in spec(server).items())
    as_yaml = await sdk(client.submit, yaml_text)
    (tmp_path / "job.json").write_text(json.dumps(spec(server)))
    (tmp_path / "job.yaml").write_text(yaml_text)
    as_json_file = await sdk(client.submit, tmp_path / "job.json")
    as_yaml_file = await sdk(client.submit, str(tmp_path / "job.yaml"))
    ids = [s.task_id for s in (as_dict, as_yaml, as_json_file, as_yaml_file)]
    assert len(set(ids)) == 4 and all(server.store.tasks.task_exists(i) for i in ids)
    assert server.store.console.task_jobspec(as_dict.task_id) == json.dumps(spec(server))
    task = await sdk(client.get, as_dict.task_id)
    assert isinstance(task, Task) and task.state == "QUEUED" and task.total_gpus == 2
    assert task.queue_position == 1 and task.latest_attempt is None and not task.is_terminal


def test_what_a_submit_sends(tmp_path) -> None:
    (tmp_path / "job.json").write_text('{"workload": "ppo"}')
    assert jobspec_body({"nnodes": 1}) == (b'{"nnodes": 1}', "application/json")
    assert jobspec_body(tmp_path / "job.json") == (b'{"workload": "ppo"}', "application/json")
    assert jobspec_body("workload: ppo") == (b"workload: ppo", "application/yaml")
    assert jobspec_body("{workload: ppo}")[1] == "application/yaml"
    with pytest.raises(ArgusError, match=r"cannot read .*absent\.yaml"):
        jobspec_body(str(tmp_path / "absent.yaml"))  # a path, not a YAML document


async def test_errors_carry_the_status_and_the_api_code(server):
    client = client_of(server)
    with pytest.raises(NotFound) as missing:
        await sdk(client.get, "mvp2-sft-20250101-000000-beef")
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    with pytest.raises(InvalidRequest) as invalid:
        await sdk(client.submit, spec(server, nnodes=0))
    assert invalid.value.code == "bad_request"
    assert [d["field"] for d in invalid.value.details] == ["nnodes"]
    with pytest.raises(AuthError) as denied:
        await sdk(ArgusClient(server.url, "wrong").me)
    assert denied.value.status == 401


async def test_lists_follow_their_pages_and_answers_are_typed(server):
    client = client_of(server)
    ids = [(await sdk(client.submit, spec(server))).task_id for _ in range(3)]
    page = await sdk(client.list, limit=2)
    assert len(page.tasks) == 2 and page.next_cursor
    everything = await sdk(lambda: [t.task_id for t in client.iter_tasks()])
    assert sorted(everything) == sorted(ids)
    queue = await sdk(client.queue, user="all")
    assert [t.task_id for t in queue.pending] == ids and queue.running == []
    me = await sdk(client.me)
    assert me.role == "admin"
    created = await sdk(client.create_token, label="ci", expires_in_s=3600)
    assert created.token.startswith("argus_") and created.label == "ci"
    assert created.prefix in [t.prefix for t in (await sdk(client.tokens)).tokens]
    assert (await sdk(client.revoke_token, created.token_id)).state == "revoked"


async def test_wait_reports_each_poll_and_keeps_waiting_through_network_errors(server):
    task_id = (await sdk(client_of(server).submit, spec(server))).task_id
    server.tick()
    sid = f"{task_id}--a01"
    steps = [lambda: server.cluster.start(sid, {"n1": 2}),
             lambda: server.cluster.finish(sid, RayStatus.SUCCEEDED)]
    opener = Recorder()
    slept: list[float] = []

    def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        if seconds == 5 and steps:  # a poll's pause (not a retry's)
            steps.pop(0)()
            server.tick()
            opener.failures = 2  # the network drops after each change

    seen: list[str] = []
    retries: list[float] = []
    client = client_of(server, opener=opener, sleep=fake_sleep)
    task = await sdk(client.wait, task_id, interval=5,
                     on_update=lambda t: seen.append(t.state),
                     on_retry=lambda exc, delay: retries.append(delay))
    assert task.state == "SUCCEEDED"
    assert seen == ["SUBMITTED", "RUNNING", "SUCCEEDED"]
    assert retries == [1, 2, 1, 2]  # backoff, and again from 1 after a success
    assert slept == [5, 1, 2, 5, 1, 2]


async def test_wait_gives_up_at_its_deadline_even_while_the_network_is_down(server):
    task_id = (await sdk(client_of(server).submit, spec(server, n_gpus_per_node=8))).task_id
    now = [0.0]

    def fake_sleep(seconds: float) -> None:
        now[0] += seconds

    client = client_of(server, sleep=fake_sleep, clock=lambda: now[0])
    with pytest.raises(WaitTimeout) as late:
        await sdk(client.wait, task_id, timeout=10, interval=3)
    assert late.value.task.state == "QUEUED" and now[0] == 10
    now[0] = 0.0
    down = client_of(server, opener=Recorder(failures=10**6), sleep=fake_sleep,
                     clock=lambda: now[0])
    with pytest.raises(ArgusConnectionError):
        await sdk(down.wait, task_id, timeout=100)
    assert now[0] == 100  # retried with backoff up to the deadline, not forever


async def test_cli_wait_exit_codes_and_a_line_per_change(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    sid = f"{task_id}--a01"
    steps = [lambda: server.cluster.start(sid, {"n1": 2}),
             lambda: server.cluster.finish(sid, RayStatus.FAILED, message="boom")]

    def fake_sleep(_: float) -> None:
        steps.pop(0)()
        server.tick()

    err = io.StringIO()
    code, out = await run(server, "wait", task_id, sleep=fake_sleep, err=err)
    assert code == Exit.TASK_FAILED and "FAILED" in out
    assert [line.split()[1] for line in err.getvalue().splitlines()] == [
        "SUBMITTED", "RUNNING", "FAILED"]


async def test_logs_follow_fetches_only_what_is_new(server, tmp_path):
    task_id = await submitted(server, tmp_path)
    server.tick()
    sid = f"{task_id}--a01"
    server.cluster.start(sid, {"n1": 2})
    server.cluster.write_log(sid, "".join(f"old {i}\n" for i in range(50)))
    script = [lambda: server.cluster.write_log(sid, "new 1\n"),
              lambda: None,  # nothing new: nothing printed, nothing sent but the header
              lambda: (server.cluster.finish(sid, RayStatus.SUCCEEDED, log="done\n"),
                       server.tick())]
    opener = Recorder()
    out = io.StringIO()
    code = await asyncio.to_thread(
        cli.main, ["--url", server.url, "logs", task_id, "-f", "--tail", "3"], out=out,
        opener=opener, sleep=lambda _: script.pop(0)())
    assert code == Exit.OK and script == []
    assert out.getvalue() == "old 47\nold 48\nold 49\nnew 1\ndone\n"
    logs = [urllib.parse.urlsplit(u) for u in opener.urls if "/logs" in u]
    queries = [dict(urllib.parse.parse_qsl(u.query)) for u in logs]
    assert queries[0]["tail"] == "3" and "offset" not in queries[0]
    size = len("".join(f"old {i}\n" for i in range(50)))
    assert [q.get("offset") for q in queries[1:]] == [
        str(size), str(size + 6), str(size + 6)]
    assert all("tail" not in q for q in queries[1:])


async def test_json_errors_and_distinct_exit_codes(server, monkeypatch, capsys):
    code, out = await run(server, "--json", "status", "mvp2-sft-20250101-000000-beef")
    assert code == Exit.NOT_FOUND
    assert json.loads(out)["error"] | {"message": ""} == {
        "status": 404, "code": "not_found", "message": "", "details": [], "hint": None}
    monkeypatch.setenv("BAD_TOKEN", "nope")
    code, out = await run(server, "--token-env", "BAD_TOKEN", "me", "--json")
    assert code == Exit.AUTH and json.loads(out)["error"]["code"] == "unauthorized"
    assert capsys.readouterr().err == ""  # --json: the error is the output


def test_json_error_when_nothing_answers(monkeypatch, capsys, unused_tcp_port):
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    out = io.StringIO()
    code = cli.main(["--url", f"http://127.0.0.1:{unused_tcp_port}", "--json", "queue"],
                    out=out)
    assert code == Exit.CONNECTION
    error = json.loads(out.getvalue())["error"]
    assert error["code"] == "connection_error" and "cannot reach" in error["message"]


async def test_a_wrong_url_says_so_in_one_line(aiohttp_server, monkeypatch, capsys):
    from aiohttp import web

    app = web.Application()  # a web server that is not Argus: 404 page not found
    not_argus = await aiohttp_server(app)
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    url = str(not_argus.make_url("")).rstrip("/")
    code = await asyncio.to_thread(cli.main, ["--url", url, "queue"])
    assert code == Exit.CONNECTION
    err = capsys.readouterr().err
    assert err == (f"argus: ARGUS_URL {url} does not look like an Argus API "
                   "(GET /api/v2/queue answered 404)\n"
                   "argus: hint: ARGUS_URL is the service's base URL, such as "
                   "http://argus-host:8080\n")
    with pytest.raises(NotArgusError):
        await sdk(ArgusClient(url, TOKEN).get, "x")


@pytest.mark.parametrize(("words", "expected"), [
    ("argus us", ["usage", "user"]),
    ("argus user ", ["create", "disable", "enable", "list", "show"]),
    ("argus logs x --t", ["--tail"]),
    ("argus --js", ["--json"]),
])
def test_bash_completion(tmp_path, words: str, expected: list[str]) -> None:
    bash = shutil.which("bash")
    if bash is None:  # pragma: no cover - every CI image has bash
        pytest.skip("no bash")
    out = io.StringIO()
    assert cli.main(["completion", "bash"], out=out) == Exit.OK
    script = tmp_path / "argus.bash"
    script.write_text(out.getvalue())
    parts = words.split(" ")
    array = " ".join(f"'{w}'" for w in parts)
    probe = (f"source {script}; COMP_WORDS=({array}); COMP_CWORD={len(parts) - 1}; "
             "_argus; printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run([bash, "-c", probe], capture_output=True, text=True, timeout=30,
                          check=True)
    assert sorted(done.stdout.split()) == expected


def test_zsh_completion_runs_the_bash_one_through_bashcompinit() -> None:
    out = io.StringIO()
    assert cli.main(["completion", "zsh"], out=out) == Exit.OK
    assert "bashcompinit" in out.getvalue() and "complete -o default -F _argus argus" in \
        out.getvalue()


# -- retries (pure) -------------------------------------------------------------------------


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff(n, first=1, cap=10) for n in range(6)] == [1, 2, 4, 8, 10, 10]


def test_retrying_retries_only_transient_errors_and_honours_retry_after() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    answers: list[Any] = [ServerError(503, "storage_unavailable", "busy", None, 7.0),
                          RateLimited(429, "quota_exceeded", "later", None, None), "ok"]

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert retrying(call, deadline=100, clock=lambda: now[0], sleep=sleep) == "ok"
    assert slept == [7.0, 2.0]

    def not_found() -> None:
        raise NotFound(404, "not_found", "gone")

    with pytest.raises(NotFound):
        retrying(not_found, deadline=100, clock=lambda: now[0], sleep=sleep)
    assert slept == [7.0, 2.0]
