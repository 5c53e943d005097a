"""Opt-in tier: real verl 0.9.1's fail-fast error is classified INSUFFICIENT_RESOURCES.

    .venv/bin/pytest tests/verl -m verl -q        (not in CI: installs ~2 GB)

Builds a separate venv (``$ARGUS_VERL_VENV``, default /tmp/argus-verl-venv, reused when
already complete) with ``torch==2.13.0`` first, then ``verl[verl-core]==0.9.1`` under a
constraints file that pins the torch just installed and this repo's Ray (driver and
cluster must run the same Ray). Tiny PPO assets come from ``scripts/
make_tiny_verl_assets.py`` (a 100k-parameter Qwen2, 48/16 GSM8K-shaped prompts). The local
Ray cluster puts that venv first on its PATH, so the entrypoint's ``python3 -m
verl.trainer.main_ppo`` is real verl. GPUs are taken outside Argus right after Argus
submits; verl's check must fail and Argus must file it as INSUFFICIENT_RESOURCES.

The SFT test submits ``examples/sft-tiny.yaml`` (assets from ``scripts/
make_tiny_sft_assets.py``) with ``trainer_device: cpu``. verl 0.9.1 cannot train on a CPU:
it knows no CPU platform, so ``auto_set_device`` turns ``trainer.device=cpu`` back into
``cuda``, and each training worker opens its process group with the backend
``cpu:gloo,cuda:nccl`` (on a CPU build of torch: "Distributed package doesn't have NCCL
built in"; with a CUDA build the next step needs a CUDA device). The test pins how far a
real SFT run gets through Argus without a GPU: every Hydra key Argus and the example set
is accepted, the datasets are built, the gang (10 CPUs per GPU) is admitted and placed,
and the training worker's death ends the task FAILED after one attempt, not retried.
``scripts/gpu_smoke.sh`` runs the same JobSpec to SUCCEEDED on a GPU host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo: tests.integration

from tests.integration.conftest import ArgusService, GpuHolder
from tests.integration.localray import LocalRayCluster

pytestmark = [pytest.mark.verl, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
ASSET_TOOL = REPO / "scripts" / "make_tiny_verl_assets.py"
SFT_ASSET_TOOL = REPO / "scripts" / "make_tiny_sft_assets.py"
SFT_EXAMPLE = REPO / "examples" / "sft-tiny.yaml"
SFT_CPUS_PER_GPU = 10  # verl's SFT trainer: one {"CPU": 10, "GPU": 1} bundle per GPU
RETRIED = ("INSUFFICIENT_RESOURCES", "CLUSTER_LOST")
TORCH = "torch==2.13.0"
# What a user passes for a tiny PPO run; verl 0.9 refuses to start without batch sizes.
TINY_PPO = [
    "data.train_batch_size=8",
    "data.max_prompt_length=64",
    "data.max_response_length=32",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "critic.ppo_micro_batch_size_per_gpu=1",
]
VERL = "verl[verl-core]==0.9.1"


def _run(argv: list[str], **kw) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise AssertionError(f"{argv[:4]} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


@pytest.fixture(scope="session")
def verl_venv() -> Path:
    venv = Path(os.environ.get("ARGUS_VERL_VENV", "/tmp/argus-verl-venv"))
    py = venv / "bin" / "python"
    stamp = venv / ".argus-complete"
    if not stamp.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
        # The pip a venv is born with (23.x) backtracks for many minutes over verl's
        # dependency tree; a current one resolves it in about a minute.
        _run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"])
        _run([str(py), "-m", "pip", "install", "-q", TORCH])
        torch_version = _run([str(py), "-c", "import torch; print(torch.__version__)"]).strip()
        constraints = venv / "constraints.txt"
        constraints.write_text(f"torch=={torch_version}\nray=={version('ray')}\n")
        _run([str(py), "-m", "pip", "install", "-q", "-c", str(constraints), VERL,
              f"ray[default]=={version('ray')}"])
        stamp.write_text(torch_version)
    return venv


@pytest.fixture(scope="session")
def tiny_assets(verl_venv: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("assets")
    _run([str(verl_venv / "bin" / "python"), str(ASSET_TOOL), str(out)])
    return out


def test_real_verl_fail_fast_is_insufficient_resources(verl_venv, tiny_assets):
    cluster = LocalRayCluster(python_bin_dir=verl_venv / "bin")
    argus = None
    holder = None
    try:
        cluster.start_head()
        worker = cluster.add_worker(gpus=4)
        root = Path(tempfile.mkdtemp(prefix="argus-verl-", dir=cluster.root))
        argus = ArgusService(cluster, root, ray_address=cluster.dashboard_url,
                             scheduler={"tick_s": 0.5, "retry_interval_s": 600})
        data = argus.shared_root / "data"
        code = argus.shared_root / "code" / "verl-installed"  # verl comes from the venv
        code.mkdir(parents=True)
        shutil.copytree(tiny_assets / "datasets", data)
        model = argus.shared_root / "model"
        shutil.copytree(tiny_assets / "models" / "tiny", model)
        argus.start()
        spec = yaml.safe_dump({
            "workload": "ppo", "code_path": str(code), "model_id": str(model),
            "train_file": str(data / "train.parquet"), "val_file": str(data / "test.parquet"),
            "nnodes": 1, "n_gpus_per_node": 4, "total_training_steps": 1,
            "overrides": TINY_PPO,
        })
        r = argus.http.post(f"{argus.url}/api/v2/tasks", data=spec,
                            headers={"Content-Type": "application/yaml"}, timeout=10)
        assert r.status_code == 201, r.text
        tid = r.json()["task_id"]
        argus.wait_for(tid, lambda t: t["state"] in ("SUBMITTED", "RUNNING"), 120,
                       "to be submitted")
        holder = GpuHolder(cluster, {cluster.node_id_of(worker): 2})  # 2 of 4 left
        task = argus.wait_for(tid, lambda t: (t["latest_attempt"] or {}).get("ray_status")
                              in ("FAILED", "STOPPED", "SUCCEEDED"), 900, "verl to give up")
        first = argus.attempts(tid)[0]
        logs = argus.logs(tid, attempt="1").text
        assert first["failure_kind"] == "INSUFFICIENT_RESOURCES", (
            f"{first}\n{task}\n--- driver log tail ---\n{logs[-6000:]}")
        assert task["state"] == "PENDING_RESOURCES"
        assert "Total available GPUs 2.0 is less than total desired GPUs 4" in logs
    finally:
        if holder is not None:
            holder.release()
        if argus is not None:
            argus.stop()
        cluster.stop()
        cluster.cleanup_files()


@pytest.fixture(scope="session")
def sft_assets(verl_venv: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sft-assets")
    _run([str(verl_venv / "bin" / "python"), str(SFT_ASSET_TOOL), str(out)])
    return out


def test_real_verl_sft_on_cpu_reaches_the_trainer_and_fails_for_good(verl_venv, sft_assets):
    cluster = LocalRayCluster(python_bin_dir=verl_venv / "bin")
    argus = None
    try:
        cluster.start_head()
        cluster.add_worker(gpus=1, cpus=16)
        root = Path(tempfile.mkdtemp(prefix="argus-verl-sft-", dir=cluster.root))
        argus = ArgusService(cluster, root, ray_address=cluster.dashboard_url,
                             scheduler={"tick_s": 0.5, "retry_interval_s": 600,
                                        "cpus_per_gpu": SFT_CPUS_PER_GPU})
        shared = argus.shared_root
        (shared / "code" / "verl-installed").mkdir(parents=True)
        shutil.copytree(sft_assets / "models", shared / "models")
        shutil.copytree(sft_assets / "datasets", shared / "datasets")
        argus.start()
        spec = SFT_EXAMPLE.read_text().replace("@SHARED@", str(shared))
        assert "trainer_device: cuda" in spec
        spec = spec.replace("trainer_device: cuda", "trainer_device: cpu")
        r = argus.http.post(f"{argus.url}/api/v2/tasks", data=spec,
                            headers={"Content-Type": "application/yaml"}, timeout=10)
        assert r.status_code == 201, r.text
        tid = r.json()["task_id"]
        task = argus.wait_for(tid, lambda t: (t["latest_attempt"] or {}).get("ray_status")
                              in ("FAILED", "STOPPED", "SUCCEEDED"), 900, "verl to end")
        task = argus.wait_for(tid, lambda t: t["state"] in ("FAILED", "SUCCEEDED",
                                                            "PENDING_RESOURCES"),
                              60, "the attempt's end to be recorded")
        attempts = argus.attempts(tid)
        logs = argus.logs(tid, attempt="1").text
        context = f"{task}\n{attempts}\n--- driver log tail ---\n{logs[-6000:]}"
        assert task["state"] == "FAILED", context
        assert len(attempts) == 1, context
        assert attempts[0]["failure_kind"] not in RETRIED, context
        # Hydra took every key; the trainer built both datasets (48 and 16 chats) ...
        assert "dataset len: 48" in logs and "dataset len: 16" in logs, context
        # ... then the training worker died opening its CUDA process group.
        assert "TrainingWorker.__init__" in logs, context
        assert any(m in logs for m in ("NCCL", "CUDA", "NVIDIA")), context
    finally:
        if argus is not None:
            argus.stop()
        cluster.stop()
        cluster.cleanup_files()
