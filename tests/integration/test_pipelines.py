"""The example pipeline (examples/pipeline-sft-ppo-eval.yaml) end to end on real local Ray
(fake GPUs), through the real service's HTTP API, with the verl stand-in: SFT -> PPO from
SFT's last checkpoint -> eval; and the same pipeline with a failing PPO (eval still runs,
the pipeline FAILED), and with a failing SFT (PPO canceled naming it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, ArgusService, ensure_workers
from .localray import wait_until

pytestmark = pytest.mark.timeout(300)

EXAMPLE = REPO / "examples" / "pipeline-sft-ppo-eval.yaml"
ENDED = ("SUCCEEDED", "FAILED", "CANCELED")


def _document(argus: ArgusService, *, fail: str | None = None) -> str:
    text = EXAMPLE.read_text().replace("@SHARED@", str(argus.shared_root))
    if fail is not None:  # the stand-in exits 1 at the end of that stage
        anchor = {"sft": '- "+argus_demo.duration_s=3"',
                  "ppo": '- "+argus_demo.duration_s=4"'}[fail]
        text = text.replace(anchor, anchor + '\n        - "+argus_demo.exit_code=1"', 1)
    return text


def _submit(argus: ArgusService, text: str) -> dict[str, Any]:
    r = argus.http.post(f"{argus.url}/api/v2/pipelines", data=text,
                        headers={"Content-Type": "application/yaml"}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()


def _pipeline(argus: ArgusService, pid: str) -> dict[str, Any]:
    r = argus.http.get(f"{argus.url}/api/v2/pipelines/{pid}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def _wait_ended(argus: ArgusService, pid: str, timeout: float = 180) -> dict[str, Any]:
    try:
        # a pipeline none of whose stages has started reads WAITING, then RUNNING
        return wait_until(lambda: (p := _pipeline(argus, pid))["state"] in ENDED and p,
                          timeout, f"pipeline {pid} to end", interval=0.5)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; last view {_pipeline(argus, pid)}\n"
                             f"--- argus-api log ---\n{argus.log_tail()}") from None


def _states(view: dict[str, Any]) -> dict[str, str]:
    return {s["stage"]: s["state"] for s in view["stages"]}


def _resolved_model(argus: ArgusService, task_id: str) -> str:
    events = argus.http.get(f"{argus.url}/api/v2/tasks/{task_id}/events", timeout=10).json()
    released = [e for e in events["events"] if e.get("payload", {}).get("resolved")]
    assert released, events
    return released[0]["payload"]["resolved"]["model_id"]


def _submit_with_the_cli(argus: ArgusService, text: str, tmp_path: Path) -> dict[str, Any]:
    """``argus pipeline submit FILE``, as a user would (the client package's CLI)."""
    document = tmp_path / "pipeline.yaml"
    document.write_text(text)
    env = {**os.environ, "ARGUS_URL": argus.url, "ARGUS_API_TOKEN": argus.token}
    done = subprocess.run([sys.executable, "-m", "argus_client.cli", "--json", "pipeline",
                           "submit", str(document)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.usefixtures("service_store")  # on both engines (conftest)
def test_the_example_runs_end_to_end(ray_cluster, argus, tmp_path: Path):
    ensure_workers(ray_cluster, 1)
    created = _submit_with_the_cli(argus, _document(argus), tmp_path)
    view = _wait_ended(argus, created["pipeline_id"])
    assert view["state"] == "SUCCEEDED", view
    assert _states(view) == {"sft": "SUCCEEDED", "ppo": "SUCCEEDED", "eval": "SUCCEEDED"}
    assert [(e["from"], e["to"], e["condition"]) for e in view["edges"]] == [
        ("sft", "ppo", "ok"), ("ppo", "eval", "any")]
    sft, ppo = created["stages"]["sft"], created["stages"]["ppo"]
    step = _resolved_model(argus, ppo)
    assert step == str(argus.shared_root / "users" / "admin" / "checkpoints" / sft
                       / "global_step_3")
    assert Path(step).is_dir()  # the stand-in's SFT saved it, verl's layout
    # the stage's task shows its pipeline; PPO's own run saved into its own tree
    assert argus.task(ppo)["pipeline"] == {"pipeline_id": created["pipeline_id"],
                                           "stage": "ppo"}
    assert (argus.shared_root / "users" / "admin" / "checkpoints" / ppo
            / "latest_checkpointed_iteration.txt").read_text().strip() == "4"


def test_a_failed_ppo_still_runs_eval_and_fails_the_pipeline(ray_cluster, argus):
    ensure_workers(ray_cluster, 1)
    created = _submit(argus, _document(argus, fail="ppo"))
    view = _wait_ended(argus, created["pipeline_id"])
    assert _states(view) == {"sft": "SUCCEEDED", "ppo": "FAILED", "eval": "SUCCEEDED"}, view
    assert view["state"] == "FAILED"


def test_a_failed_sft_cancels_ppo_naming_it(ray_cluster, argus):
    ensure_workers(ray_cluster, 1)
    created = _submit(argus, _document(argus, fail="sft"))
    view = _wait_ended(argus, created["pipeline_id"])
    states = _states(view)
    assert states["sft"] == "FAILED" and states["ppo"] == "CANCELED", view
    ppo = argus.task(created["stages"]["ppo"])
    assert ppo["error_summary"] == (f"dependency never satisfied: {created['stages']['sft']} "
                                    "ended FAILED (after ok)")
    # eval waits on ppo with any: ppo ended (canceled), so eval runs; its reference to
    # SFT's last checkpoint resolves (SFT saved every step, then exited 1)
    assert states["eval"] == "SUCCEEDED" and view["state"] == "FAILED"
