"""scripts/gpu_smoke.sh, its requirements, examples/sft-tiny.yaml and the tiny SFT assets.

The GPU run itself needs a GPU host; what can be checked here: the script is shellcheck
clean and refuses bad settings before it starts anything, the example JobSpec is accepted
and becomes the verl command line it documents, the requirements pin the project's Ray,
and the asset maker's conversations are what its docstring says.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from service.config import Settings
from service.jobspec.spec import parse_jobspec
from service.jobspec.submission import build_submit_request, driver_argv

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "gpu_smoke.sh"
REQUIREMENTS = REPO / "scripts" / "gpu-smoke-requirements.txt"
EXAMPLE = REPO / "examples" / "sft-tiny.yaml"
ASSETS = REPO / "scripts" / "make_tiny_sft_assets.py"


def _smoke(env: dict[str, str], *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={**base, "ARGUS_SMOKE_DIR": str(tmp_path / "state"), **env},
                          timeout=60)


def test_script_passes_shellcheck() -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (scripts/bootstrap.sh installs it)")
    done = subprocess.run(["shellcheck", "-x", str(SCRIPT)], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr


def test_help_prints_the_header(tmp_path: Path) -> None:
    done = _smoke({}, "--help", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "ARGUS_SMOKE_WHEELHOUSE" in done.stdout
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(("env", "args", "message"), [
    ({}, ("launch",), "usage:"),
    ({"ARGUS_SMOKE_TASK_GPUS": "two"}, (), "ARGUS_SMOKE_TASK_GPUS must be a whole number"),
    ({"ARGUS_API_PORT": "80; rm -rf /"}, (), "ARGUS_API_PORT must be a whole number"),
    ({"ARGUS_SMOKE_WHEELHOUSE": "/nonexistent/wheels"}, (), "is not a directory"),
    ({"ARGUS_SMOKE_INSTALL": "no"}, (), "ARGUS_SMOKE_INSTALL must be 0 or 1"),
    ({"ARGUS_SMOKE_PYTHON": "/nonexistent/python3"}, (), "no Python"),
])
def test_bad_settings_stop_before_anything_starts(tmp_path: Path, env: dict[str, str],
                                                   args: tuple[str, ...], message: str) -> None:
    done = _smoke(env, *args, tmp_path=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert not (tmp_path / "state").exists()


def test_requirements_pin_the_projects_ray() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    ray_pin = re.search(r'"(ray\[default\]==[^"]+)"', pyproject)
    assert ray_pin is not None
    lines = [line.strip() for line in REQUIREMENTS.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert ray_pin.group(1) in lines
    assert not any(line.split("=")[0].split(">")[0].split("<")[0] in ("torch", "verl")
                   for line in lines), "torch stays the host's; verl goes in with --no-deps"


def test_example_is_accepted_and_becomes_the_documented_command_line() -> None:
    text = EXAMPLE.read_text().replace("@SHARED@", "/private")
    spec = parse_jobspec(text, Settings())
    assert (spec.workload, spec.nnodes, spec.n_gpus_per_node, spec.trainer_device) == (
        "sft", 1, 1, "cuda")
    req = build_submit_request(spec, task_id="mvp2-sft-20261123-080000-1a2b", attempt_no=1,
                               user=None, settings=Settings())
    argv = driver_argv(req.entrypoint)
    assert argv[:3] == ["python3", "-m", "verl.trainer.sft_trainer_ray"]
    for arg in ("data.train_files=/private/datasets/sft_train.parquet",
                "data.val_files=/private/datasets/sft_test.parquet",
                "model.path=/private/models/tiny", "trainer.device=cuda",
                "trainer.n_gpus_per_node=1", "trainer.total_training_steps=4",
                "data.train_batch_size=8", "model.use_remove_padding=false",
                "+model.override_config.attn_implementation=sdpa"):
        assert arg in argv, (arg, argv)


def _load_assets_module():
    spec = importlib.util.spec_from_file_location("make_tiny_sft_assets", ASSETS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no torch/transformers at module level
    return module


def test_asset_conversations_are_deterministic_worked_sums() -> None:
    assets = _load_assets_module()
    chats = assets.conversations(assets.N_TRAIN + assets.N_TEST)
    assert chats == assets.conversations(assets.N_TRAIN + assets.N_TEST)
    assert len(chats) == 64
    for user, assistant in chats:
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        a, b = map(int, re.findall(r"\d+", user["content"]))
        assert assistant["content"].endswith(f"#### {a + b}")
    # Fewer rows than verl's default batch (256): the example's train_batch_size is needed.
    assert assets.N_TRAIN % 8 == 0 and assets.N_TRAIN < 256
