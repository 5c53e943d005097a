"""Every JobSpec example in the seed design documents is accepted verbatim.

The examples are copies kept in this repository, ``tests/unit/data/seed_jobspecs/`` (its
README says which seed document each came from and when); the tests read only those. A
folder of the seed documents named by ``ARGUS_SEED_DOCS`` (opt-in: a clone has none) has
the copies checked against every example the documents contain.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from service.config import Settings
from service.jobspec.schema import jobspec_json_schema
from service.jobspec.spec import parse_jobspec
from service.jobspec.submission import build_submit_request

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "seed_jobspecs"
SEED_DOCS = os.environ.get("ARGUS_SEED_DOCS")  # a folder of the seed documents, or unset
SETTINGS = Settings()  # shared root /private, as in the seeds
TASK = "mvp2-ppo-20251223-143201-7f3a"
_TOP_LEVEL_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*:(\s|$)")


def seed_examples(text: str) -> list[str]:
    """JobSpec examples in a seed document: runs of top-level ``key: value`` lines (and
    their indented or ``-`` continuation lines) that start with ``workload:``."""
    examples: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if current is None:
            if line.startswith("workload:"):
                current = [line]
        elif _TOP_LEVEL_KEY.match(line) or (line[:1] in (" ", "-") and line.strip()):
            current.append(line)
        else:
            examples.append("".join(current))
            current = None
    if current is not None:
        examples.append("".join(current))
    return examples


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.yaml"))


def test_there_are_fixtures() -> None:
    assert _fixtures(), f"no seed JobSpecs under {FIXTURES}"


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_seed_jobspec_is_accepted_verbatim(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    spec = parse_jobspec(text, SETTINGS)
    raw = yaml.safe_load(text)
    assert spec.workload == raw["workload"]
    assert (spec.nnodes, spec.n_gpus_per_node) == (raw["nnodes"], raw["n_gpus_per_node"])
    assert spec.train_file == raw["train_file"]
    # the JSON Schema published in the OpenAPI document accepts it too
    jsonschema.validate(raw, jobspec_json_schema(SETTINGS.resolved_allowed_roots))
    # and it becomes a Ray submit request
    req = build_submit_request(spec, task_id=TASK, attempt_no=1, user=None, settings=SETTINGS)
    argv = shlex.split(req.entrypoint)
    assert f"data.train_files={raw['train_file']}" in argv
    assert f"trainer.nnodes={raw['nnodes']}" in argv


def test_seed_002_ignores_an_empty_submission_id() -> None:
    text = (FIXTURES / "002_api_jobspec.yaml").read_text(encoding="utf-8")
    assert 'submission_id: ""' in text
    assert parse_jobspec(text, SETTINGS) == parse_jobspec(
        text.replace('submission_id: ""', 'submission_id: "mine"'), SETTINGS)


def test_example_extraction() -> None:
    doc = "intro\n\nworkload: ppo\nnnodes: 2  # c\noverrides:\n  - a=b\n\nafter\nworkload: sft\n"
    assert seed_examples(doc) == ["workload: ppo\nnnodes: 2  # c\noverrides:\n  - a=b\n",
                                  "workload: sft\n"]


@pytest.mark.skipif(not SEED_DOCS, reason="opt-in: ARGUS_SEED_DOCS names no folder of "
                    "seed documents")
def test_fixtures_match_the_seeds() -> None:
    seeds = sorted(Path(str(SEED_DOCS)).glob("*.txt"))
    assert seeds, f"no seed documents (*.txt) in {SEED_DOCS}"
    in_seeds = sorted(
        example
        for seed in seeds
        for example in seed_examples(seed.read_text(encoding="utf-8"))
    )
    copied = sorted(path.read_text(encoding="utf-8") for path in _fixtures())
    assert copied == in_seeds
