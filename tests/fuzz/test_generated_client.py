"""A third-party client generated from the committed document works against a real
``argus-api``: ``openapi-python-client`` generates it from ``clients/openapi.json`` into a
temporary directory, and the generated functions submit a JobSpec (JSON), read the task
back and cancel it. Duplicate classes (a nullable enum generated once per use, a
``JobSpecType0``) would show up as extra model modules: there must be none."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from .harness import Service, good_spec

REPO = Path(__file__).resolve().parents[2]
DOCUMENT = REPO / "clients" / "openapi.json"
PACKAGE = "argus_generated_client"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    out = tmp_path_factory.mktemp("generated")
    bindir = Path(sys.executable).parent  # the generator runs ruff from PATH on its output
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [str(bindir / "openapi-python-client"), "generate", "--path", str(DOCUMENT),
         "--meta", "none", "--output-path", str(out / PACKAGE)],
        cwd=out, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def test_one_class_per_schema(generated: ModuleType) -> None:
    models = {p.stem for p in (Path(generated.__file__).parent / "models").glob("*.py")}
    assert {"job_spec_ppo", "job_spec_grpo", "job_spec_sft", "ray_status", "failure_kind",
            "token_state"} <= models
    assert not [m for m in models if "type_0" in m or "type_1" in m], sorted(models)
    assert not [m for m in models if m.endswith("_state") and m not in (
        "task_state", "token_state", "pipeline_state", "node_state", "health_state")
    ], sorted(models)


def test_a_generated_client_submits_reads_and_cancels(argus: Service,
                                                      generated: ModuleType) -> None:
    api = importlib.import_module(f"{PACKAGE}.api.tasks")
    submit_task = importlib.import_module(f"{api.__name__}.submit_task")
    get_task = importlib.import_module(f"{api.__name__}.get_task")
    cancel_task = importlib.import_module(f"{api.__name__}.cancel_task")
    models = importlib.import_module(f"{PACKAGE}.models")
    client = generated.AuthenticatedClient(base_url=f"http://127.0.0.1:{argus.port}",
                                           token=argus.token, raise_on_unexpected_status=True)
    spec = models.JobSpecSft.from_dict(yaml.safe_load(good_spec(argus.shared)))
    submitted = submit_task.sync(client=client, body=spec)
    assert isinstance(submitted, models.Submitted), submitted
    task = get_task.sync(submitted.task_id, client=client)
    assert isinstance(task, models.Task), task
    assert task.task_id == submitted.task_id and task.workload == models.Workload.SFT
    canceled = cancel_task.sync(submitted.task_id, client=client)
    assert isinstance(canceled, models.CancelResult), canceled
    # canceled at once while it waits; once the scheduler took it, a stop is requested
    assert canceled.state == models.TaskState.CANCELED or canceled.cancel_requested
    again = get_task.sync(submitted.task_id, client=client)
    assert again.state == models.TaskState.CANCELED or again.cancel_requested
    refused = get_task.sync("no-such-task", client=client)
    assert isinstance(refused, models.Error) and refused.error.code == "not_found"
