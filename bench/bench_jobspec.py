"""JobSpec parse + validate throughput, and the cost of refusing hostile bodies.

Three valid bodies (seed 002's example, a minimal spec, a spec with 16 overrides, some of
them path-valued) are parsed and validated in a loop on one core; the figure is specs per
CPU second. Floor: far above the API's 500 submits/s (this is one step of a submit). Then
every hostile body of the unit tier's corpus (deep nesting, alias and merge-key bombs,
tags, huge integers, 1 MB scalars...) is refused once more, and the slowest refusal is
printed (floor: 100 ms).

``--impl module:function`` measures another ``parse_jobspec(text, settings)`` with the
same bodies (for comparing validation designs).

    .venv/bin/python bench/bench_jobspec.py [--seconds 2] [--impl module:function]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench.hostinfo import host_line
from service.config import Settings
from service.jobspec.model import JobSpecError
from service.jobspec.spec import parse_jobspec

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "tests" / "unit" / "data" / "seed_jobspecs" / "002_api_jobspec.yaml"
FLOOR_PER_S = 500.0
HOSTILE_FLOOR_MS = 100.0

MINIMAL = {
    "workload": "sft", "code_path": "/private/code/verl", "model_id": "/private/models/q",
    "train_file": "/private/data/train.parquet", "nnodes": 1, "n_gpus_per_node": 8,
}
OVERRIDES = {
    **MINIMAL, "workload": "grpo", "val_file": "/private/data/val.parquet",
    "model_id": "Qwen/Qwen2.5-7B-Instruct", "total_epochs": 3, "save_freq": 10,
    "overrides": [
        "actor_rollout_ref.rollout.name=vllm", "trainer.val_before_train=False",
        "data.max_prompt_length=1024", "data.max_response_length=2048",
        "actor_rollout_ref.actor.ppo_mini_batch_size=64",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "custom_reward_function.path=/private/rewards/gsm8k.py",
        "custom_reward_function.name=compute_score",
        "data.custom_cls.path=/private/datasets/mine.py", "data.custom_cls.name=MyDataset",
        "actor_rollout_ref.model.tokenizer_path=Qwen/Qwen2.5-7B-Instruct",
        "+argus_demo.duration_s=5", "algorithm.kl_ctrl.kl_coef=0.001",
        "actor_rollout_ref.model.external_lib=my_models.patch",
        "trainer.rollout_data_dir=/private/rollouts", "transfer_queue.enable=True",
    ],
}


def _rate(parse: Callable, text: str, settings: Settings, seconds: float) -> float:
    parse(text, settings)  # warm up, and fail loudly if the body is refused
    # CPU time of this process: on a shared machine, wall time would measure neighbours
    done = 0
    started = time.process_time()
    deadline = started + seconds
    while time.process_time() < deadline:
        for _ in range(50):
            parse(text, settings)
        done += 50
    return done / (time.process_time() - started)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="per body")
    ap.add_argument("--impl", default=None, help="module:function to measure instead")
    args = ap.parse_args()
    parse = parse_jobspec
    if args.impl:
        module, _, name = args.impl.partition(":")
        parse = getattr(importlib.import_module(module), name)
    settings = Settings()
    bodies = {
        "seed 002 example": SEED.read_text(encoding="utf-8"),
        "minimal sft": yaml.safe_dump(MINIMAL, sort_keys=False),
        "grpo, 16 overrides": yaml.safe_dump(OVERRIDES, sort_keys=False),
    }
    ok = True
    print(host_line())
    print(f"parse + validate, one core ({args.impl or 'service.jobspec.spec:parse_jobspec'})")
    for name, text in bodies.items():
        rate = _rate(parse, text, settings, args.seconds)
        ok &= rate >= FLOOR_PER_S
        print(f"  {name:22s} {len(text):5d} B  {rate:9,.0f} specs/s  "
              f"{1e6 / rate:7.1f} us/spec")

    sys.path.insert(0, str(ROOT / "tests" / "unit" / "jobspec"))
    from test_yamldoc import HOSTILE  # the unit tier's corpus

    worst_name, worst_ms = "", 0.0
    for name, (body, _) in HOSTILE.items():
        started = time.perf_counter()
        try:
            parse(body, settings)
        except JobSpecError:
            refused = True
        else:
            refused = False
        elapsed = (time.perf_counter() - started) * 1000
        if not refused:
            ok = False
            print(f"  ACCEPTED: {name}")
        if elapsed > worst_ms:
            worst_name, worst_ms = name, elapsed
    ok &= worst_ms <= HOSTILE_FLOOR_MS
    print(f"hostile corpus: {len(HOSTILE)} bodies refused, slowest {worst_ms:.1f} ms "
          f"({worst_name})")
    print(f"floors: >= {FLOOR_PER_S:.0f} specs/s, hostile <= {HOSTILE_FLOOR_MS:.0f} ms: "
          + ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
