"""The SDK's newer surface against the real app on a FakeCluster: ``wait`` calls back on a
change only, pipelines and curves come back as frozen dataclasses, a cancel of an ended
task is no error, a 404 of a task's logs says whether it has started; and, pure, how an
answer that is not Argus's maps to an error, and the names ``import *`` gives."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import itertools
import json
import warnings
from typing import Any

import pytest
from cli_server import TOKEN, Driver, Server, run, submitted

import argus_client
from argus_client import (
    ArgusClient,
    ArgusConnectionError,
    CancelResult,
    Metrics,
    NoLogYet,
    NotArgusError,
    NotFound,
    Pipeline,
    PipelineList,
    PipelineSubmitted,
    Progress,
    UsageError,
)
from argus_client.errors import ServerError, is_transient
from argus_client.transport import Transport
from service.engine.progress_follower import LogFollower


def client_of(srv: Server, **kw: Any) -> ArgusClient:
    return ArgusClient(srv.url, TOKEN, **kw)


async def sdk(fn, *args: Any, **kw: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kw)


def document(srv: Server) -> dict[str, Any]:
    spec = {"workload": "sft", "code_path": f"{srv.shared}/code", "model_id": "org/model",
            "train_file": f"{srv.shared}/train.parquet", "val_file": None, "nnodes": 1,
            "n_gpus_per_node": 2}
    return {"name": "two", "stages": {"first": {"jobspec": spec},
                                      "second": {"after": {"ok": ["first"]}, "jobspec": spec}}}


async def test_wait_calls_back_on_a_change_only(server, tmp_path):
    task_id = await submitted(server, tmp_path, n_gpus_per_node=8)  # never fits
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    seen: list[str] = []
    client = client_of(server, sleep=sleep, clock=lambda: now[0])
    with pytest.raises(argus_client.WaitTimeout):
        await sdk(client.wait, task_id, timeout=20, interval=2,
                  on_update=lambda t: seen.append(t.state))
    assert seen == ["QUEUED"]  # ten polls, one task that did not move: one call
    driver = Driver(server)
    task_id = await submitted(server, tmp_path)
    tasks: list[argus_client.Task] = []
    task = await sdk(client_of(server, sleep=driver, clock=driver.clock).wait, task_id,
                     interval=1, on_update=tasks.append)
    assert task.state == "SUCCEEDED" and [tasks[0].state, tasks[-1].state] == [
        "QUEUED", "SUCCEEDED"]
    assert all(a != b for a, b in itertools.pairwise(tasks))


def test_progress_compares_equal_while_only_the_eta_counts_down() -> None:
    base = {"attempt_no": 1, "step": 3, "total_steps": 10, "fraction": 0.3,
            "rate_steps_per_s": 0.5, "eta_s": 14.0, "eta_at": "2026-01-01T00:00:14Z",
            "resumed_from": None}
    assert Progress.from_json(base) == Progress.from_json({**base, "eta_s": 12.0})
    assert Progress.from_json(base) != Progress.from_json({**base, "step": 4})
    assert Progress.from_json(base) != Progress.from_json(
        {**base, "eta_at": "2026-01-01T00:01:00Z"})  # a revised estimate is a change


async def test_pipelines_are_frozen_dataclasses(server):
    client = client_of(server)
    created = await sdk(client.submit_pipeline, document(server))
    assert isinstance(created, PipelineSubmitted) and created.state == "WAITING"
    assert sorted(created.stages) == ["first", "second"]
    server.tick()
    pipeline = await sdk(client.pipeline, created.pipeline_id)
    assert isinstance(pipeline, Pipeline) and pipeline.state == "RUNNING"
    assert [(s.stage, s.state) for s in pipeline.stages] == [("first", "SUBMITTED"),
                                                             ("second", "BLOCKED")]
    assert [(e.from_, e.to, e.condition) for e in pipeline.edges] == [("first", "second",
                                                                       "ok")]
    with pytest.raises(dataclasses.FrozenInstanceError):
        pipeline.state = "SUCCEEDED"  # type: ignore[misc]
    listed = await sdk(client.pipelines)
    assert isinstance(listed, PipelineList)
    assert [p.pipeline_id for p in listed.pipelines] == [created.pipeline_id]
    canceled = await sdk(client.cancel_pipeline, created.pipeline_id)
    assert isinstance(canceled, Pipeline) and len(canceled.canceled) == 2
    server.tick()
    again = await sdk(client.cancel_pipeline, created.pipeline_id)
    assert again.state == "CANCELED" and again.canceled == [] and again.is_terminal


async def test_wait_pipeline_returns_the_ended_pipeline(server):
    driver = Driver(server)
    client = client_of(server, sleep=driver, clock=driver.clock)
    created = await sdk(client.submit_pipeline, document(server))
    states: list[str] = []
    ended = await sdk(client.wait_pipeline, created.pipeline_id, interval=1,
                      on_update=lambda p: states.append(p.state))
    assert ended.state == "SUCCEEDED" and states[0] == "WAITING" and states[-1] == "SUCCEEDED"


async def test_metrics_are_the_tasks_curves(server, tmp_path):
    task_id = await submitted(server, tmp_path, total_training_steps=4)
    server.tick()
    sid = f"{task_id}--a01"
    server.cluster.start(sid, {"n1": 2})
    server.cluster.write_log(sid, "step:1 - loss:2.5 - reward:0.1\n"
                                  "step:2 - loss:1.25 - reward:0.2\n")
    server.tick()
    LogFollower(server.store, server.cluster, server.artifacts, max_points=50,
                max_read_chars=4096).poll(server.now)
    metrics = await sdk(client_of(server).metrics, task_id)
    assert isinstance(metrics, Metrics) and {"loss", "reward"} <= set(metrics.keys)
    loss = metrics.curve("loss")
    assert loss is not None and (loss.steps, loss.values) == ([1, 2], [2.5, 1.25])
    only = await sdk(client_of(server).metrics, task_id, ["reward"])
    assert [c.key for c in only.series] == ["reward"]
    err = io.StringIO()
    code, out = await run(server, "metrics", task_id, "--keys", "loss", err=err)
    assert code == 0 and out.splitlines() == ["STEP  loss", "1     2.5", "2     1.25"]
    code, out = await run(server, "--json", "metrics", task_id)
    assert code == 0 and json.loads(out)["task_id"] == task_id


async def test_cancel_is_idempotent_and_logs_say_not_started(server, tmp_path):
    client = client_of(server)
    task_id = await submitted(server, tmp_path)
    with pytest.raises(NoLogYet) as early:
        await sdk(client.logs, task_id)
    assert early.value.state == "QUEUED" and isinstance(early.value, NotFound)
    first = await sdk(client.cancel, task_id)
    again = await sdk(client.cancel, task_id)
    assert isinstance(again, CancelResult) and not first.already_ended
    assert (again.state, again.already_ended) == ("CANCELED", True)
    with pytest.raises(NotFound) as gone:  # an ended task with no log: a plain 404
        await sdk(client.logs, task_id)
    assert not isinstance(gone.value, NoLogYet)


# -- pure: answers that are not Argus's, the URL, the names exported ---------------------------


@pytest.mark.parametrize(("status", "body", "error"), [
    (501, b"<!DOCTYPE HTML><title>Unsupported method</title>", NotArgusError),
    (500, b"Internal Server Error", NotArgusError),
    (404, b"<html>not found</html>", NotArgusError),
    (502, b"<html>Bad Gateway</html>", ArgusConnectionError),
    (504, b"", ArgusConnectionError),
    (503, b'{"error": {"code": "storage_unavailable", "message": "busy"}}', ServerError),
])
def test_what_an_error_answer_maps_to(status: int, body: bytes, error: type) -> None:
    got = Transport("http://argus:8080", "t")._failure("POST", "/api/v2/tasks", status, {}, body)
    assert type(got) is error
    assert is_transient(got) == (error is not NotArgusError)  # a wrong URL is not retried
    if error is NotArgusError:
        assert "<" not in str(got) and got.hint


def test_a_404_under_a_url_ending_in_api_v2_names_the_suffix() -> None:
    got = Transport("http://argus:8080/api/v2/", "t")._failure(
        "GET", "/api/v2/tasks", 404, {}, b'{"error": {"code": "not_found", "message": "x"}}')
    assert isinstance(got, NotArgusError)
    assert got.hint == "drop the /api/v2 suffix (argus adds /api/v2 itself): " \
                       "ARGUS_URL=http://argus:8080"


@pytest.mark.parametrize("url", ["127.0.0.1:18555", "localhost:8080", "ftp://x", "http://",
                                 "http://host:port"])
def test_a_url_urllib_cannot_use_is_a_usage_error(url: str) -> None:
    with pytest.raises(UsageError) as bad:
        ArgusClient(url, "t")
    assert bad.value.hint


def test_connection_error_is_not_exported_but_still_importable() -> None:
    assert "ConnectionError" not in argus_client.__all__
    names: dict[str, Any] = {}
    exec("from argus_client import *", names)
    assert "ConnectionError" not in names  # the builtin is not shadowed
    assert all(hasattr(argus_client, n) for n in argus_client.__all__)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from argus_client import ConnectionError as old
    assert old is ArgusConnectionError
    assert caught and {w.category for w in caught} == {DeprecationWarning}


def test_every_model_is_a_frozen_dataclass() -> None:
    from argus_client import models

    for name in argus_client.__all__:
        cls = getattr(argus_client, name)
        if getattr(cls, "__module__", "") == models.__name__:
            assert dataclasses.is_dataclass(cls), name
            assert cls.__dataclass_params__.frozen, name


async def test_wait_does_not_retry_an_answer_that_is_not_argus(server):
    code, _ = await run(server, "--url", server.url + "api/v2", "wait", "x",
                        sleep=lambda _: pytest.fail("retried"))
    assert code == 5
