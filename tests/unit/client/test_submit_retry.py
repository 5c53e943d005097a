"""A submit lands exactly once (issue 54): the SDK and the CLI send an ``Idempotency-Key``
with every submit and send the same request again through connection errors, 503s and a
first try still in progress, against the real app (``cli_server``) with an opener that
fails on cue; an injected clock and sleep, so nothing sleeps."""

from __future__ import annotations

import asyncio
import email.message
import io
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from cli_server import TOKEN, Server, run

from argus_client import ArgusClient, ArgusConnectionError, RateLimited, ServerError
from argus_client.client import SUBMIT_ATTEMPTS
from argus_client.errors import ApiError, Conflict
from service.web.app import create_app


def spec(srv: Server, **fields: Any) -> dict[str, Any]:
    return {"workload": "sft", "code_path": f"{srv.shared}/code", "model_id": "org/model",
            "train_file": f"{srv.shared}/train.parquet", "val_file": None, "nnodes": 1,
            "n_gpus_per_node": 2, **fields}


def refused() -> Exception:
    return urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))


def http_error(request: urllib.request.Request, status: int, code: str,
               retry_after: str | None = None) -> urllib.error.HTTPError:
    headers = email.message.Message()
    headers["Content-Type"] = "application/json"
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    body = json.dumps({"error": {"code": code, "message": f"{code} for the test",
                                 "details": []}}).encode()
    return urllib.error.HTTPError(request.full_url, status, code, headers, io.BytesIO(body))


class Script:
    """An opener that plays a script, one step per request: ``"pass"`` (the server
    answers), ``"refuse"`` (nothing reached it), ``"lose"`` (the server got it and
    answered; the answer was lost on the way back), or a function of the request that
    raises (an error answer). Past the script's end every request passes. It records each
    request's ``Idempotency-Key``."""

    def __init__(self, *steps: str | Callable[[urllib.request.Request], Exception]) -> None:
        self.steps = list(steps)
        self.keys: list[str | None] = []

    def __call__(self, request: urllib.request.Request, timeout: float) -> Any:
        self.keys.append(request.get_header("Idempotency-key"))
        step = self.steps.pop(0) if self.steps else "pass"
        if step == "refuse":
            raise refused()
        if callable(step):
            raise step(request)
        answer = urllib.request.urlopen(request, timeout=timeout)
        if step == "lose":
            answer.read()
            answer.close()
            raise urllib.error.URLError(ConnectionResetError(104, "Connection reset by peer"))
        return answer


class Sleeper:
    """The injected ``sleep`` and ``clock``: the slept seconds add up, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def client_of(srv: Server, opener: Script, sleeper: Sleeper, **kw: Any) -> ArgusClient:
    return ArgusClient(srv.url, TOKEN, opener=opener, sleep=sleeper.sleep,
                       clock=sleeper.clock, **kw)


def task_count(srv: Server) -> int:
    return sum(srv.store.tasks.counts_by_state().values())


async def test_connection_refused_then_success_makes_one_task(server):
    opener, sleeper = Script("refuse", "refuse"), Sleeper()
    retried: list[tuple[str, float]] = []
    done = await asyncio.to_thread(client_of(server, opener, sleeper).submit, spec(server),
                                   on_retry=lambda exc, delay: retried.append((str(exc), delay)))
    assert server.store.tasks.get_task(done.task_id) is not None
    assert task_count(server) == 1
    assert len(opener.keys) == 3 and len(set(opener.keys)) == 1 and opener.keys[0]
    assert sleeper.slept == [0.5, 1.0] and [d for _, d in retried] == [0.5, 1.0]
    assert "Connection refused" in retried[0][0]


async def test_an_answer_lost_after_the_task_landed_is_replayed_not_doubled(server):
    opener, sleeper = Script("lose"), Sleeper()
    done = await asyncio.to_thread(client_of(server, opener, sleeper).submit, spec(server))
    assert task_count(server) == 1  # the first try created it; the retry got it back
    assert len(opener.keys) == 2 and opener.keys[0] == opener.keys[1]
    assert server.store.tasks.get_task(done.task_id) is not None


async def test_a_503_with_retry_after_is_waited_then_retried(server):
    opener = Script(lambda r: http_error(r, 503, "storage_unavailable", retry_after="7"))
    sleeper = Sleeper()
    done = await asyncio.to_thread(client_of(server, opener, sleeper).submit, spec(server))
    assert sleeper.slept == [7.0]  # Retry-After, over the first backoff of 0.5 s
    assert task_count(server) == 1 and done.state == "QUEUED"
    assert len(set(opener.keys)) == 1


async def test_a_first_try_still_in_progress_is_retried(server):
    opener = Script(lambda r: http_error(r, 409, "idempotency_key_in_use", retry_after="1"))
    sleeper = Sleeper()
    await asyncio.to_thread(client_of(server, opener, sleeper).submit, spec(server))
    assert sleeper.slept == [1.0] and task_count(server) == 1


async def test_the_same_key_returns_the_same_task(server):
    client = client_of(server, Script(), Sleeper())
    first = await asyncio.to_thread(client.submit, spec(server), idempotency_key="job-42")
    again = await asyncio.to_thread(client.submit, spec(server), idempotency_key="job-42")
    assert again.task_id == first.task_id and task_count(server) == 1
    with pytest.raises(ApiError) as other:  # the same key, another body: refused, no retry
        await asyncio.to_thread(client.submit, spec(server, priority=3),
                                idempotency_key="job-42")
    assert other.value.status == 422 and other.value.code == "idempotency_key_reused"


async def test_each_submit_gets_a_fresh_key(server):
    opener = Script()
    client = client_of(server, opener, Sleeper())
    a = await asyncio.to_thread(client.submit, spec(server))
    b = await asyncio.to_thread(client.submit, spec(server))
    assert a.task_id != b.task_id and len(set(opener.keys)) == 2


async def test_retries_are_bounded(server):
    opener, sleeper = Script(*["refuse"] * 100), Sleeper()
    with pytest.raises(ArgusConnectionError):
        await asyncio.to_thread(client_of(server, opener, sleeper).submit, spec(server))
    assert len(opener.keys) == SUBMIT_ATTEMPTS
    assert sleeper.slept == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    once = Script(*["refuse"] * 100)
    with pytest.raises(ArgusConnectionError):
        await asyncio.to_thread(client_of(server, once, Sleeper(), submit_attempts=1).submit,
                                spec(server))
    assert len(once.keys) == 1 and task_count(server) == 0


@pytest.mark.parametrize("status, code, error", [
    (500, "internal_error", ServerError), (429, "quota_exceeded", RateLimited),
    (409, "conflict", Conflict)])
async def test_other_failures_are_not_retried(server, status, code, error):
    opener, sleeper = Script(lambda r: http_error(r, status, code, retry_after="1")), Sleeper()
    with pytest.raises(error):
        await asyncio.to_thread(client_of(server, opener, sleeper).submit, spec(server))
    assert len(opener.keys) == 1 and sleeper.slept == []


async def test_a_pipeline_submit_is_keyed_and_retried(server):
    opener, sleeper = Script("lose"), Sleeper()
    doc = {"name": "two", "stages": {"a": {"jobspec": spec(server)},
                                     "b": {"after": {"ok": ["a"]}, "jobspec": spec(server)}}}
    done = await asyncio.to_thread(client_of(server, opener, sleeper).submit_pipeline, doc)
    assert len(server.store.pipelines.list_pipelines(None, 10)) == 1
    assert task_count(server) == 2 and set(done.stages) == {"a", "b"}
    assert len(opener.keys) == 2 and opener.keys[0] == opener.keys[1]


async def test_the_cli_submit_rides_through_a_restart(server, tmp_path):
    opener, sleeper = Script("refuse", "lose"), Sleeper()
    err = io.StringIO()
    code, out = await run(server, "submit", str(server.spec_file(tmp_path)), opener=opener,
                          sleep=sleeper.sleep, clock=sleeper.clock, err=err)
    assert code == 0, err.getvalue()
    assert task_count(server) == 1
    task_id = out.split()[0]
    assert server.store.tasks.get_task(task_id) is not None
    assert err.getvalue().count("trying again") == 2


async def test_the_cli_takes_a_key_so_a_script_run_twice_submits_once(server, tmp_path):
    path = str(server.spec_file(tmp_path))
    code, first = await run(server, "submit", path, "--idempotency-key", "nightly-1")
    assert code == 0, first
    code, again = await run(server, "submit", path, "--idempotency-key", "nightly-1")
    assert code == 0 and again.split()[0] == first.split()[0]
    code, other = await run(server, "submit", path, "--idempotency-key", "nightly-2")
    assert code == 0 and other.split()[0] != first.split()[0]
    assert task_count(server) == 2


async def test_a_submit_while_the_service_is_down_lands_once_it_is_back(tmp_path):
    """A real closed port, not a scripted failure: the service is down when the submit
    starts (connection refused) and comes back during the SDK's first wait."""
    srv = Server(tmp_path)
    app = create_app(srv.settings, srv.store, srv.cluster, srv.artifacts, token=TOKEN,
                     clock=lambda: srv.now)
    runner = web.AppRunner(app)
    await runner.setup()
    with socket.socket() as probe:  # a free port, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    loop = asyncio.get_running_loop()
    started: list[float] = []

    def restart(seconds: float) -> None:  # the SDK's sleep: the service comes back
        started.append(seconds)
        site = web.TCPSite(runner, "127.0.0.1", port)
        asyncio.run_coroutine_threadsafe(site.start(), loop).result(timeout=30)

    client = ArgusClient(f"http://127.0.0.1:{port}", TOKEN, sleep=restart, clock=lambda: 0.0)
    try:
        done = await asyncio.to_thread(client.submit, spec(srv))
        assert started == [0.5]  # refused once, then the restarted service answered
        assert srv.store.tasks.get_task(done.task_id) is not None
        assert task_count(srv) == 1
    finally:
        await runner.cleanup()
        srv.store.close()
