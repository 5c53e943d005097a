"""The JobSpec's JSON Schema (OpenAPI and property-based test generators read it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.domain.workloads import WORKLOAD_NAMES, WORKLOADS
from service.jobspec.model import (
    MAX_EPOCHS,
    MAX_GPUS_PER_NODE,
    MAX_NNODES,
    MAX_OVERRIDES,
    MAX_RUNTIME_S,
    MAX_STEPS,
    MAX_STRING_LEN,
    NOTES,
    TRAINER_DEVICES,
)
from service.jobspec.sandbox import (
    HF_REPO_ID_RE,
    norm_abs,
    norm_roots,
    path_pattern,
    tree_pattern,
)
from service.policy.dependencies import OnUnsatisfiable
from service.policy.priorities import MAX_PRIORITY, MIN_PRIORITY

# Overrides a generator may produce: an added key under ``argus`` whose name cannot hit
# the policy's refused classes, and a value of safe characters. The service accepts any
# override its policy allows; the schema holds to a subset that is always valid.
_OVERRIDE_GENERATED_PATTERN = r"^\+argus\.x[a-z0-9]{0,24}=[A-Za-z0-9_.-]{0,64}$"


def _workload_variant(name: str, path: dict[str, Any]) -> dict[str, Any]:
    workload = WORKLOADS[name]
    properties: dict[str, Any] = {"workload": {"const": name}}
    required = ["workload"]
    if workload.needs_val_file:
        properties["val_file"] = path
        required.append("val_file")
    if not workload.takes_device:
        properties["trainer_device"] = {"const": None}
    return {"properties": properties, "required": required}


def jobspec_json_schema(allowed_roots: Sequence[str] = ("/private",),
                        users_root: str | None = None) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the JobSpec document, for ``allowed_roots``; paths
    under ``users_root`` (the users' private trees) are left out.

    Strict enough that a property-based generator (schemathesis, hypothesis-jsonschema)
    produces specs ``parse_jobspec`` accepts: paths match the roots, model ids are paths
    or HF repo ids, overrides a safe ``key=value`` shape. Rules JSON Schema cannot say
    (a path's normalised form, the override policy, sft-only ``trainer_device``) are
    left to the validator, whose 400 names them.
    """
    roots = norm_roots(allowed_roots)
    path: dict[str, Any] = {
        "type": "string", "pattern": path_pattern(roots), "maxLength": MAX_STRING_LEN,
        "examples": [f"{roots[0].rstrip('/')}/datasets/gsm8k/train.parquet"]}
    if users_root is not None:
        path["not"] = {"pattern": tree_pattern(norm_abs(users_root)),
                       "description": "the users' trees: only the submitter's own"}
    hf_id = {"type": "string", "pattern": f"^{HF_REPO_ID_RE.pattern}$", "not": {
        "pattern": r"\.\.|--"}}

    def count(low: int, high: int, description: str) -> dict[str, Any]:
        return {"type": "integer", "minimum": low, "maximum": high,
                "description": description}

    def nullable(schema: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [schema, {"type": "null"}]}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "JobSpec",
        "type": "object",
        "additionalProperties": False,
        "required": ["workload", "code_path", "model_id", "train_file", "nnodes",
                     "n_gpus_per_node"],
        "properties": {
            "workload": {"enum": list(WORKLOAD_NAMES)},
            "submission_id": nullable({"type": "string", "maxLength": MAX_STRING_LEN,
                                       "pattern": "^[ -~]*$",
                                       "description": "accepted and ignored"}),
            "code_path": {**path, "description": "verl checkout, put on PYTHONPATH"},
            "model_id": {"anyOf": [path, hf_id], "examples": ["Qwen/Qwen2.5-0.5B-Instruct"]},
            "train_file": path,
            "val_file": nullable(path),
            "nnodes": count(1, MAX_NNODES, "nodes of the gang"),
            "n_gpus_per_node": count(1, MAX_GPUS_PER_NODE, "GPUs on each node"),
            "total_epochs": nullable(count(1, MAX_EPOCHS, "default 1")),
            "total_training_steps": nullable(count(1, MAX_STEPS, "default: verl's")),
            "save_freq": nullable(count(-1, MAX_STEPS, "-1: off")),
            "test_freq": nullable(count(-1, MAX_STEPS, "-1: off")),
            "trainer_device": {"enum": [*TRAINER_DEVICES, None],
                               "description": "sft only"},
            "priority": nullable(count(
                MIN_PRIORITY, MAX_PRIORITY,
                "higher is admitted first; default and what users may ask for: config")),
            "max_runtime_s": nullable(count(
                1, MAX_RUNTIME_S,
                "time limit of each attempt from its driver's start (stopped past it, "
                "TIME_LIMIT); default: config (none)")),
            **{note.name: nullable({"type": "string", "maxLength": note.max_length,
                                    "pattern": "^[ -~]*$", "description": note.about})
               for note in NOTES},
            "on_unsatisfiable": nullable({
                "type": "string", "enum": [p.value for p in OnUnsatisfiable],
                "description": "a dependency that can never hold: cancel (default) or "
                               "keep waiting (see after, docs/pipelines.md)"}),
            "overrides": nullable({
                "type": "array", "maxItems": MAX_OVERRIDES,
                "items": {"type": "string", "pattern": _OVERRIDE_GENERATED_PATTERN},
                "description": "Hydra overrides key=value; the service accepts any its "
                               "override policy allows, the pattern is a subset that "
                               "always is",
            }),
        },
        # what depends on the workload: one variant each (val_file required and not
        # null, trainer_device only where the workload takes one)
        "anyOf": [_workload_variant(name, path) for name in WORKLOAD_NAMES],
    }
