"""The CLI's progress: the pure renderings by table, and ``argus wait``/``argus queue``
against the real API (FakeCluster, the real log follower, injected sleep and clock)."""

from __future__ import annotations

import io

import pytest

# The fixture "server" of the CLI tests, shared by importing it (pytest finds a fixture by
# its name in the module; the test parameters then shadow the import).
from cli_server import run, submitted

from argus_client.cli.progress import bar, progress_cell, wait_line
from service.domain.states import RayStatus
from service.engine.progress_follower import LogFollower


@pytest.mark.parametrize(("fraction", "text"), [
    (0.0, "[....]"), (0.5, "[##..]"), (0.99, "[###.]"), (1.0, "[####]"), (1.7, "[####]"),
])
def test_bar(fraction: float, text: str) -> None:
    assert bar(fraction, 4) == text


P = {"attempt_no": 1, "step": 120, "total_steps": 500, "fraction": 0.24, "resumed_from": None,
     "rate_steps_per_s": 0.52, "eta_s": 730.0}


@pytest.mark.parametrize(("progress", "text"), [
    (None, "-"),
    ({**P, "step": None}, "-"),
    (P, "120/500 24% ETA 12m 10s"),
    ({**P, "total_steps": None, "fraction": None, "eta_s": None}, "120"),
    ({**P, "eta_s": None}, "120/500 24%"),
])
def test_progress_cell(progress: dict | None, text: str) -> None:
    assert progress_cell(progress) == text


@pytest.mark.parametrize(("task", "text"), [
    ({"task_id": "t", "state": "RUNNING", "progress": P},
     "t  RUNNING  [####................]  step 120/500 (24%)  1.92 s/step  ETA 12m 10s"),
    ({"task_id": "t", "state": "RUNNING", "progress": {**P, "rate_steps_per_s": 3.5,
                                                        "resumed_from": 100}},
     "t  RUNNING  [####................]  step 120/500 (24%)  3.5 step/s  ETA 12m 10s  "
     "(resumed from step 100)"),
    ({"task_id": "t", "state": "RUNNING", "progress": {"step": 7, "total_steps": None}},
     "t  RUNNING  step 7"),
    ({"task_id": "t", "state": "RUNNING", "progress": None}, "t  RUNNING"),
    ({"task_id": "t", "state": "PENDING_RESOURCES", "queue_position": 2,
      "pending_reason": "needs 1x8 GPUs"},
     "t  PENDING_RESOURCES  #2 in the queue  needs 1x8 GPUs"),
    ({"task_id": "t", "state": "SUCCEEDED", "progress": P}, "t  SUCCEEDED"),
])
def test_wait_line(task: dict, text: str) -> None:
    assert wait_line(task) == text


async def test_wait_shows_live_progress_on_stderr_and_queue_a_column(server, tmp_path):
    task_id = await submitted(server, tmp_path, total_training_steps=4)
    server.tick()
    sid = f"{task_id}--a01"
    follower = LogFollower(server.store, server.cluster, server.artifacts, max_points=50,
                           max_read_chars=4096)
    steps = [
        lambda: server.cluster.start(sid, {"n1": 2}),
        lambda: server.cluster.write_log(sid, "Total training steps: 4\nstep:1 - loss:2\n"),
        lambda: server.cluster.write_log(sid, "step:3 - loss:1\n"),
        lambda: server.cluster.finish(sid, RayStatus.SUCCEEDED, log="step:4 - loss:0.5\n"),
    ]

    def fake_sleep(_: float) -> None:
        steps.pop(0)()
        server.now += 9  # and the tick adds 1: the follower reads 10 s apart
        server.tick()
        follower.poll(server.now)

    err = io.StringIO()
    code, out = await run(server, "wait", task_id, sleep=fake_sleep, err=err)
    assert code == 0 and "SUCCEEDED" in out and steps == []
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(f"{task_id}  SUBMITTED") and lines[-1] == f"{task_id}  SUCCEEDED"
    assert f"{task_id}  RUNNING  [#####...............]  step 1/4 (25%)" in lines
    assert any("step 3/4 (75%)  5 s/step  ETA 5s" in line for line in lines), lines

    assert "progress           step 4/4 (100%)" in out  # the final view (argus status's)
    quiet = io.StringIO()
    code, _ = await run(server, "wait", task_id, "--quiet", err=quiet)
    assert code == 0 and quiet.getvalue() == ""


async def test_queue_has_a_progress_column(server, tmp_path):
    task_id = await submitted(server, tmp_path, total_training_steps=10)
    server.tick()
    sid = f"{task_id}--a01"
    server.cluster.start(sid, {"n1": 2})
    server.tick()
    server.cluster.write_log(sid, "step:2 - loss:1\n")
    LogFollower(server.store, server.cluster, server.artifacts, max_points=50,
                max_read_chars=4096).poll(server.now)
    code, out = await run(server, "queue", "--user", "all")
    assert code == 0
    header, row = out.split("RUNNING\n", 1)[1].splitlines()[:2]
    assert header.split()[-1] == "PROGRESS" and row.split()[-2:] == ["2/10", "20%"]
