"""The numbers behind docs/client.md's choices: what a CLI framework, pydantic or the
client itself costs at start-up and on disk, and how fast each validates a JobSpec.

* start-up: the CPU time (user + system, the least of ``--runs``: on a shared machine
  wall time measures the neighbours) of ``python -c "import <module>"`` in a new process,
  less that of ``python -c pass`` (what the import adds to every ``argus`` command);
* install: the bytes each distribution's RECORD lists, over the closure it installs;
* validation: JobSpecs per second, the service's own validator (``parse_jobspec_json``)
  against a pydantic model of the same fields' types and ranges (the path rules and the
  override policy left out: pydantic would still need them by hand).

    .venv/bin/python bench/bench_client_choices.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench.hostinfo import host_line

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "python" / "argus_client"
MODULES = {
    "argus CLI: parser only (--help, completion)": "argus_client.cli.main",
    "argus CLI + SDK + urllib (any command)": "argus_client.cli.main, argus_client.client",
    "click": "click",
    "typer": "typer",
    "rich (console, table, progress)": "rich.console, rich.table, rich.progress",
    "pydantic": "pydantic",
    "httpx (instead of urllib)": "httpx",
    "service.jobspec.spec (the hand-written validator)": "service.jobspec.spec",
}
CLOSURES = {
    "argus-client": ["argus-client"],
    "click": ["click"],
    "typer + rich": ["typer", "click", "rich", "markdown-it-py", "mdurl", "pygments",
                     "shellingham", "typing-extensions", "annotated-doc"],
    "pydantic": ["pydantic", "pydantic-core", "annotated-types", "typing-inspection",
                 "typing-extensions"],
    "httpx": ["httpx", "httpcore", "h11", "anyio", "certifi", "idna", "sniffio"],
}


def startup_ms(statement: str, runs: int) -> float:
    def once(code: str) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime

    once(f"import {statement}")  # the first run writes the bytecode
    base = min(once("pass") for _ in range(runs))
    return 1000 * (min(once(f"import {statement}") for _ in range(runs)) - base)


def installed_mb(names: list[str]) -> float:
    total = 0
    if names == ["argus-client"]:  # installed editable here: its sources are what a wheel holds
        return sum(p.stat().st_size for p in CLIENT.rglob("*.py")) / 1e6
    for name in names:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            continue
        total += sum(f.size or 0 for f in files)
    return total / 1e6


def validation_rates(seconds: float) -> dict[str, float]:
    from pydantic import BaseModel, ConfigDict, Field

    from service.config import Settings
    from service.jobspec.spec import parse_jobspec_json

    class JobSpecModel(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        workload: Literal["ppo", "grpo", "sft"]
        code_path: str = Field(max_length=4096, pattern=r"^(/[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*)+$")
        model_id: str = Field(max_length=4096)
        train_file: str = Field(max_length=4096)
        val_file: str | None = None
        nnodes: int = Field(ge=1, le=1024)
        n_gpus_per_node: int = Field(ge=1, le=64)
        total_epochs: int | None = Field(default=None, ge=1, le=100_000)
        priority: int | None = Field(default=None, ge=-1000, le=1000)
        overrides: list[str] | None = Field(default=None, max_length=256)

    settings = Settings(shared_root="/shared")
    body = json.dumps({"workload": "ppo", "code_path": "/shared/code/verl",
                       "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
                       "train_file": "/shared/datasets/gsm8k/train.parquet",
                       "val_file": "/shared/datasets/gsm8k/test.parquet", "nnodes": 2,
                       "n_gpus_per_node": 8, "total_epochs": 1, "priority": 10,
                       "overrides": ["actor_rollout_ref.actor.optim.lr=1e-6"]})

    def rate(fn) -> float:  # per CPU second of this process
        count, start = 0, time.process_time()
        while time.process_time() - start < seconds:
            fn()
            count += 1
        return count / (time.process_time() - start)

    return {"service validator (all rules)": rate(lambda: parse_jobspec_json(body, settings)),
            "pydantic (types and ranges only)": rate(
                lambda: JobSpecModel.model_validate_json(body))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    print(host_line())
    print(f"start-up added by the import (CPU ms, least of {args.runs} runs):")
    for label, module in MODULES.items():
        print(f"  {label:48s} {startup_ms(module, args.runs):7.1f}")
    print("installed size (MB):")
    for label, names in CLOSURES.items():
        print(f"  {label:48s} {installed_mb(names):7.2f}")
    print("JobSpec validation (specs per second, one core):")
    for label, value in validation_rates(args.seconds).items():
        print(f"  {label:48s} {value:9.0f}")


if __name__ == "__main__":
    main()
