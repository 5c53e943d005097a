"""The pipelines' part of the OpenAPI document (``service.web.openapi`` adds it): the routes
of ``service.web.api.pipelines`` and the dependency fields of a task."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.policy.dependencies import Condition, OnUnsatisfiable
from service.policy.pipelines import PipelineState
from service.web.openapi_schemas import TS as _TS
from service.web.openapi_schemas import json_content as _json
from service.web.openapi_schemas import ref as _ref

_CONDITION = {"type": "string", "enum": [c.value for c in Condition]}
_PIPELINE_ID_PARAM = {
    "name": "pipeline_id", "in": "path", "required": True,
    "schema": {"type": "string", "pattern": "^[^/:]+$"},
    "example": "mvp2-alice-pipeline-20251223-143201-7f3a",
}
_BODY = {"required": True, "content": {
    t: {"schema": {"type": "object", "required": ["name", "stages"],
                   "description": "name, and stages: {stage: {jobspec, after, "
                                  "on_unsatisfiable}} (docs/pipelines.md)"}}
    for t in ("application/yaml", "text/yaml", "application/x-yaml", "application/json")}}

SCHEMAS: dict[str, Any] = {
    "PipelineState": {"type": "string", "enum": [s.value for s in PipelineState]},
    "Pipeline": {
        "type": "object", "required": ["pipeline_id", "name", "user", "state"],
        "properties": {"pipeline_id": {"type": "string"}, "name": {"type": "string"},
                       "user": {"type": "string"}, "state": _ref("PipelineState"),
                       "created_at": _TS, "updated_at": _TS, "ended_at": _TS,
                       "cancel_requested": {"type": "boolean"}},
    },
    "PipelineDetail": {"allOf": [_ref("Pipeline"), {
        "type": "object", "required": ["stages", "edges"],
        "properties": {
            "stages": {"type": "array", "items": {
                "type": "object",
                "properties": {"stage": {"type": "string"}, "task_id": {"type": "string"},
                               "state": _ref("TaskState"),
                               "skipped": {"type": "boolean", "description": "canceled: a "
                                           "dependency could never hold"},
                               "error_summary": {"type": ["string", "null"]},
                               "attempts": {"type": "integer"}}}},
            "edges": {"type": "array", "items": {
                "type": "object",
                "properties": {"from": {"type": "string"}, "to": {"type": "string"},
                               "condition": _CONDITION}}},
            "canceled": {"type": "array", "items": {"type": "string"},
                         "description": "cancel only: the stages it canceled or stops"},
        }}]},
    "PipelineCreated": {
        "type": "object", "required": ["pipeline_id", "state", "stages"],
        "properties": {"pipeline_id": {"type": "string"}, "state": {"const": "RUNNING"},
                       "stages": {"type": "object", "additionalProperties": {
                           "type": "string"}, "description": "stage -> task_id"}},
    },
    "TaskPipeline": {"type": "object", "required": ["pipeline_id", "stage"],
                     "properties": {"pipeline_id": {"type": "string"},
                                    "stage": {"type": "string"}}},
    "PipelineList": {"type": "object", "required": ["pipelines"],
                     "properties": {"pipelines": {"type": "array",
                                                  "items": _ref("Pipeline")}}},
}

TASK_FIELDS: dict[str, Any] = {
    "after": {"type": "array", "description": "GET one task: its dependencies",
              "items": {"type": "object", "properties": {
                  "task_id": {"type": "string"},
                  "condition": _CONDITION,
                  "state": _ref("TaskState")}}},
    "on_unsatisfiable": {"type": "string", "enum": [p.value for p in OnUnsatisfiable]},
    "waiting_on": {"type": ["string", "null"],
                   "description": "a BLOCKED task: why it waits (after <task> (<state>))"},
    "pipeline": {"anyOf": [_ref("TaskPipeline"), {"type": "null"}],
                 "description": "a pipeline's stage: which pipeline, which stage"},
}


def paths(_op: Callable[..., dict[str, Any]], _query: Callable[..., dict[str, Any]]
          ) -> dict[str, Any]:
    """The pipeline routes, built with the main document's operation and query helpers
    (passed in: this module is imported by that one)."""
    return {
        "/api/v2/pipelines": {
            "post": _op("Submit a pipeline: a DAG of stages, each a JobSpec, created "
                        "atomically", {"201": _json(_ref("PipelineCreated"), "Created")},
                        "400:BadRequest", "408:RequestTimeout", "413:PayloadTooLarge",
                        "415:UnsupportedMediaType", "429:TooManyRequests", requestBody=_BODY),
            "get": _op("List pipelines, newest first (yours; an admin: everyone's)",
                       {"200": _json(_ref("PipelineList"), "Pipelines")}, "400:BadRequest",
                       "403:Forbidden",
                       params=[_query("user", {"type": "string"}, "me, all or a user name"),
                               _query("limit", {"type": "integer", "minimum": 1,
                                                "maximum": 500, "default": 50},
                                      "how many")]),
        },
        "/api/v2/pipelines/{pipeline_id}": {"get": _op(
            "A pipeline with its stages and edges",
            {"200": _json(_ref("PipelineDetail"), "The pipeline")}, "404:NotFound",
            access="owner", params=[_PIPELINE_ID_PARAM])},
        "/api/v2/pipelines/{pipeline_id}/cancel": {"post": _op(
            "Cancel every stage of a pipeline that has not ended",
            {"200": _json(_ref("PipelineDetail"), "Canceled (running stages are stopped "
                                                  "by the scheduler)")},
            "404:NotFound", access="owner", params=[_PIPELINE_ID_PARAM])},
    }
