"""``argus pipeline ...`` and ``argus status`` of a stage against the real API (FakeCluster,
the real scheduler ticked by hand)."""

from __future__ import annotations

import json

from cli_server import run


def _doc(srv) -> str:
    spec = {"workload": "sft", "code_path": f"{srv.shared}/code", "model_id": "org/model",
            "train_file": f"{srv.shared}/train.parquet", "val_file": None, "nnodes": 1,
            "n_gpus_per_node": 2}
    return json.dumps({"name": "two", "stages": {
        "first": {"jobspec": spec},
        "second": {"after": {"any": ["first"]},
                   "jobspec": {**spec, "model_id": "{{stages.first.checkpoint_dir}}"}}}})


async def test_pipeline_submit_status_list_cancel(server, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(_doc(server))
    code, out = await run(server, "--json", "pipeline", "submit", str(path))
    assert code == 0, out
    created = json.loads(out)
    pid, second = created["pipeline_id"], created["stages"]["second"]
    server.tick()
    code, out = await run(server, "pipeline", "status", pid)
    assert code == 0
    assert f"pipeline  {pid}" in out and "first -any-> second" in out
    assert f"second  {second}  BLOCKED" in out
    code, out = await run(server, "status", second)
    assert f"pipeline           {pid} (stage second)" in out
    assert f"any:{created['stages']['first']} (SUBMITTED)" in out
    assert f"after {created['stages']['first']} (SUBMITTED)" in out  # pending_reason
    code, out = await run(server, "queue", "--user", "all")  # apart from GPU waits
    assert code == 0 and "WAITING ON OTHER TASKS" in out
    assert f"{second}" in out.split("WAITING ON OTHER TASKS")[1].split("\n\n")[0]
    code, out = await run(server, "--json", "queue", "--user", "all")
    queue = json.loads(out)
    assert [t["task_id"] for t in queue["blocked"]] == [second]
    assert queue["blocked"][0]["waiting_on"].startswith("after ")
    assert second not in [t["task_id"] for t in queue["pending"]]
    code, out = await run(server, "pipeline", "list")
    assert code == 0 and pid in out and "RUNNING" in out
    code, out = await run(server, "pipeline", "cancel", pid)
    assert code == 0 and "canceled 2 stage(s)" in out


async def test_pipeline_submit_invalid_names_the_field(server, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nstages: {a: {jobspec: {workload: nope}}}\n")
    code, _ = await run(server, "pipeline", "submit", str(path))
    assert code == 1
    assert "stages.a.jobspec.workload" in capsys.readouterr().err
