"""The JobSpec JSON Schema: valid, and strict enough that generated specs are accepted."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis_jsonschema import from_schema

from service.config import Settings
from service.config_load import settings_from_mapping
from service.jobspec.model import JobSpecError
from service.jobspec.schema import jobspec_json_schema
from service.jobspec.spec import parse_jobspec
from service.web.openapi import build_openapi

DEFAULT = Settings()
TWO_ROOTS = settings_from_mapping(
    {"v2": {"jobspec": {"allowed_roots": ["/data/team-a", "/mnt/models.v2/"]}}})
GOOD = {"workload": "ppo", "code_path": "/private/code", "model_id": "Qwen/Qwen2.5-0.5B",
        "train_file": "/private/t.parquet", "val_file": "/private/v.parquet", "nnodes": 1,
        "n_gpus_per_node": 1}


def test_the_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(jobspec_json_schema())
    jsonschema.Draft202012Validator.check_schema(
        jobspec_json_schema(TWO_ROOTS.resolved_allowed_roots))


@pytest.mark.parametrize(
    "changes",
    [{"code_path": "/etc/verl"}, {"code_path": "/privateer/x"}, {"nnodes": 0},
     {"colour": "blue"}, {"model_id": "org/na..me"}, {"val_file": None},
     {"trainer_device": "cpu"}, {"overrides": ["hydra.run.dir=/etc"]}],
)
def test_the_schema_refuses_what_the_validator_refuses(changes: dict[str, Any]) -> None:
    doc = {**GOOD, **changes}
    with pytest.raises(JobSpecError):
        parse_jobspec(yaml.safe_dump(doc), DEFAULT)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, jobspec_json_schema())


def _accepts(doc: dict[str, Any], settings_: Settings) -> None:
    try:
        parse_jobspec(yaml.safe_dump(doc), settings_)
    except JobSpecError as exc:  # pragma: no cover - the failure message is the point
        pytest.fail(f"generated spec refused: {exc.details}\n{doc}")


SLOW = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


@settings(max_examples=50, deadline=None, derandomize=True, suppress_health_check=SLOW)
@given(from_schema(jobspec_json_schema(DEFAULT.resolved_allowed_roots)))
def test_generated_specs_are_accepted(doc: dict[str, Any]) -> None:
    _accepts(doc, DEFAULT)


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=SLOW)
@given(from_schema(jobspec_json_schema(TWO_ROOTS.resolved_allowed_roots)))
def test_generated_specs_are_accepted_under_configured_roots(doc: dict[str, Any]) -> None:
    _accepts(doc, TWO_ROOTS)


def test_openapi_request_body_is_one_jobspec_schema_per_workload() -> None:
    doc = build_openapi()
    body = doc["paths"]["/api/v2/tasks"]["post"]["requestBody"]
    assert {t: c["schema"] for t, c in body["content"].items()} == {
        t: {"$ref": "#/components/schemas/JobSpec"}
        for t in ("application/json", "application/yaml", "text/yaml", "application/x-yaml")
    }
    schemas = doc["components"]["schemas"]
    text = json.dumps(schemas).replace("#/components/schemas/", "#/$defs/")
    resolved = json.loads(text)

    def validate(spec: dict[str, Any]) -> None:
        jsonschema.validate(spec, {**resolved["JobSpec"], "$defs": resolved})

    validate(GOOD)
    validate({**GOOD, "workload": "sft", "val_file": None, "trainer_device": "cpu"})
    for bad in ({**GOOD, "val_file": None}, {**GOOD, "trainer_device": "cpu"},
                {**GOOD, "code_path": "rel/x"}, {**GOOD, "colour": "blue"}):
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)
    assert build_openapi() == doc
