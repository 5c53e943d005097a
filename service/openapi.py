"""The OpenAPI 3.1 document of the API, served at ``GET /api/v2/openapi.json``.

Written by hand as data (no framework generates it), and kept honest by a test that
compares it with the routes the app registers, both ways.
"""

from __future__ import annotations

import copy
from typing import Any

from service.config import Settings
from service.jobspec import jobspec_json_schema
from service.states import FailureKind, RayStatus, TaskState

VERSION = "2.0.0"

_TS = {"type": ["string", "null"], "format": "date-time",
       "description": "ISO 8601 UTC timestamp"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _err(description: str) -> dict[str, Any]:
    return {"$ref": "#/components/responses/" + description}


_TASK_ID_PARAM = {
    "name": "task_id", "in": "path", "required": True,
    "schema": {"type": "string", "pattern": "^[^/:]+$"},
    "example": "mvp2-ppo-20251223-143201-7f3a",
}

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string", "examples": ["bad_request", "not_found"]},
                "message": {"type": "string"},
                "details": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
                }},
            },
        }},
    },
    "TaskState": {"type": "string", "enum": [s.value for s in TaskState]},
    "RayStatus": {"type": ["string", "null"], "enum": [*(s.value for s in RayStatus), None]},
    "FailureKind": {"type": ["string", "null"],
                    "enum": [*(k.value for k in FailureKind), None]},
    "Submitted": {
        "type": "object", "required": ["task_id", "state"],
        "properties": {"task_id": {"type": "string"}, "state": {"const": "QUEUED"}},
    },
    "Attempt": {
        "type": "object",
        "required": ["attempt_no", "ray_submission_id", "ray_status"],
        "properties": {
            "attempt_no": {"type": "integer", "minimum": 1},
            "ray_submission_id": {"type": "string", "examples": [
                "mvp2-ppo-20251223-143201-7f3a--a01"]},
            "ray_status": _ref("RayStatus"),
            "failure_kind": _ref("FailureKind"),
            "message": {"type": ["string", "null"]},
            "exit_code": {"type": ["integer", "null"]},
            "submitted_at": _TS,
            "start_time": _TS,
            "end_time": _TS,
            "stop_requested": {"type": "boolean"},
        },
    },
    "Task": {
        "type": "object",
        "required": ["task_id", "state", "workload", "desired_resources"],
        "properties": {
            "task_id": {"type": "string"},
            "state": _ref("TaskState"),
            "workload": {"type": "string", "enum": ["ppo", "grpo", "sft"]},
            "user": {"type": ["string", "null"]},
            "desired_resources": {
                "type": "object",
                "properties": {"nnodes": {"type": "integer"},
                               "n_gpus_per_node": {"type": "integer"},
                               "total_gpus": {"type": "integer"}},
            },
            "latest_attempt": {"oneOf": [_ref("Attempt"), {"type": "null"}]},
            "error_summary": {"type": ["string", "null"]},
            "pending_reason": {"type": ["string", "null"]},
            "queue_position": {"type": ["integer", "null"],
                               "description": "1-based place among runnable tasks"},
            "next_run_at": _TS,
            "cancel_requested": {"type": "boolean"},
            "created_at": _TS,
            "updated_at": _TS,
        },
    },
    "TaskList": {
        "type": "object", "required": ["tasks", "next_cursor"],
        "properties": {
            "tasks": {"type": "array", "items": _ref("Task")},
            "next_cursor": {"type": ["string", "null"],
                            "description": "pass as ?cursor= for the next page; null at the end"},
        },
    },
    "AttemptList": {
        "type": "object", "required": ["task_id", "attempts"],
        "properties": {"task_id": {"type": "string"},
                       "attempts": {"type": "array", "items": _ref("Attempt")}},
    },
    "Event": {
        "type": "object", "required": ["id", "ts", "type", "payload"],
        "properties": {
            "id": {"type": "integer"},
            "ts": _TS,
            "type": {"type": "string", "description": "STATE_TRANSITION, SUBMIT, "
                     "RAY_STATUS_SYNC, RETRY_SCHEDULED, CANCEL_REQUESTED, ..."},
            "payload": {"type": "object", "description": "for transitions: from, to, reason"},
        },
    },
    "EventList": {
        "type": "object", "required": ["task_id", "events"],
        "properties": {"task_id": {"type": "string"},
                       "events": {"type": "array", "items": _ref("Event")}},
    },
    "CancelResult": {
        "type": "object", "required": ["task_id", "state"],
        "properties": {"task_id": {"type": "string"}, "state": _ref("TaskState"),
                       "cancel_requested": {"type": "boolean"}},
    },
    "Queue": {
        "type": "object", "required": ["pending", "running"],
        "properties": {"pending": {"type": "array", "items": _ref("Task")},
                       "running": {"type": "array", "items": _ref("Task")}},
    },
    "Health": {
        "type": "object", "required": ["status", "scheduler"],
        "properties": {
            "status": {"enum": ["ok", "degraded", "scheduler stopped"],
                       "description": "degraded: the database cannot be written now "
                                      "(disk full, read-only, locked); the service resumes "
                                      "by itself once it can"},
            "reason": {"type": "string", "description": "why degraded"},
            "scheduler": {"type": ["object", "null"], "properties": {
                "alive": {"type": "boolean", "description": "scheduler thread running"},
                "ticks": {"type": "integer"},
                "errors": {"type": "integer", "description": "ticks that raised"},
                "last_tick_duration_s": {"type": ["number", "null"]},
                "last_error": {"type": ["string", "null"]},
            }},
        },
    },
}

_RESPONSES = {
    name: _json(_ref("Error"), text)
    for name, text in {
        "BadRequest": "Invalid input; details name each offending field",
        "Unauthorized": "Missing, malformed or wrong bearer token",
        "NotFound": "No such task, attempt or logs",
        "Conflict": "The task is already terminal",
        "PayloadTooLarge": "Body over the configured size limit",
        "RequestTimeout": "Body not received within the body timeout",
        "UnsupportedMediaType": "Body is not YAML",
        "InternalError": "Unexpected server error (no details leaked)",
        "Unavailable": "The database cannot be used now (disk full, read-only, locked: "
                       "storage_unavailable), or too many connections; retry after "
                       "Retry-After seconds",
    }.items()
}


def _op(summary: str, ok: dict[str, dict[str, Any]], *errors: str,
        params: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    responses = dict(ok)
    responses["401"] = _err("Unauthorized")
    for code, name in (e.split(":") for e in errors):
        responses[code] = _err(name)
    responses["500"] = _err("InternalError")
    responses["503"] = _err("Unavailable")
    op: dict[str, Any] = {"summary": summary, "responses": responses, **extra}
    if params:
        op["parameters"] = params
    return op


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def _jobspec_schema(settings: Settings | None) -> dict[str, Any]:
    """The JobSpec document a POST body parses to, for the configured allowed roots."""
    roots = (settings or Settings()).resolved_allowed_roots
    schema = {k: v for k, v in jobspec_json_schema(roots).items() if k != "$schema"}
    schema["description"] = ("The YAML body's document. YAML limits: a flat mapping; no "
                             "anchors, aliases, merge keys, tags or complex keys.")
    return schema


def build_openapi(settings: Settings | None = None) -> dict[str, Any]:
    """The document as a JSON-ready dict (a deep copy: callers may change it).

    ``settings`` gives the allowed roots the JobSpec schema's paths follow (default: the
    default settings' shared root).
    """
    yaml_body = _ref("JobSpec")
    paths: dict[str, Any] = {
        "/api/v2/tasks": {
            "post": _op(
                "Submit a task (JobSpec YAML)",
                {"201": _json(_ref("Submitted"), "Accepted and queued")},
                "400:BadRequest", "408:RequestTimeout", "413:PayloadTooLarge",
                "415:UnsupportedMediaType",
                requestBody={"required": True, "content": {
                    t: {"schema": yaml_body}
                    for t in ("application/yaml", "text/yaml", "application/x-yaml")
                }},
            ),
            "get": _op(
                "List tasks, newest first",
                {"200": _json(_ref("TaskList"), "One page of tasks")},
                "400:BadRequest",
                params=[
                    _query("state", _ref("TaskState"), "only tasks in this state"),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 500,
                                     "default": 50}, "page size"),
                    _query("cursor", {"type": "string"}, "next_cursor of the previous page"),
                ],
            ),
        },
        "/api/v2/tasks/{task_id}": {"get": _op(
            "Aggregated view of one task",
            {"200": _json(_ref("Task"), "The task")}, "404:NotFound",
            params=[_TASK_ID_PARAM],
        )},
        "/api/v2/tasks/{task_id}/attempts": {"get": _op(
            "All attempts of a task",
            {"200": _json(_ref("AttemptList"), "Attempts, oldest first")}, "404:NotFound",
            params=[_TASK_ID_PARAM],
        )},
        "/api/v2/tasks/{task_id}/events": {"get": _op(
            "The task's history: every transition, submit, sync and retry",
            {"200": _json(_ref("EventList"), "Events, oldest first")}, "404:NotFound",
            params=[_TASK_ID_PARAM],
        )},
        "/api/v2/tasks/{task_id}:cancel": {"post": _op(
            "Cancel a task",
            {"200": _json(_ref("CancelResult"), "Canceled at once (was not on the cluster)"),
             "202": _json(_ref("CancelResult"),
                          "Stop requested on Ray; the scheduler finishes the cancel")},
            "404:NotFound", "409:Conflict",
            params=[_TASK_ID_PARAM],
        )},
        "/api/v2/tasks/{task_id}/logs": {"get": _op(
            "Driver log of an attempt (live from Ray, else the archive)",
            {"200": {"description": "Last lines of the log",
                     "content": {"text/plain": {"schema": {"type": "string"}}}}},
            "400:BadRequest", "404:NotFound",
            params=[
                _TASK_ID_PARAM,
                _query("attempt", {"oneOf": [{"const": "latest"},
                                             {"type": "integer", "minimum": 1}],
                                   "default": "latest"}, "attempt number or latest"),
                _query("tail", {"type": "integer", "minimum": 1, "maximum": 100000,
                                "default": 2000}, "number of last lines"),
            ],
        )},
        "/api/v2/queue": {"get": _op(
            "Runnable tasks in queue order, and tasks on the cluster",
            {"200": _json(_ref("Queue"), "The queue")},
        )},
        "/api/v2/openapi.json": {"get": _op(
            "This document", {"200": _json({"type": "object"}, "OpenAPI 3.1 document")},
        )},
        "/metrics": {"get": _op(
            "Prometheus metrics",
            {"200": {"description": "Prometheus text exposition format",
                     "content": {"text/plain": {"schema": {"type": "string"}}}}},
        )},
        "/healthz": {"get": {
            "summary": "Liveness of the process (no auth)",
            "security": [],
            "responses": {"200": _json(_ref("Health"), "Alive (ok or degraded)"),
                          "503": _json(_ref("Health"), "The scheduler thread stopped")},
        }},
    }
    return copy.deepcopy({
        "openapi": "3.1.0",
        "info": {"title": "Argus task service", "version": VERSION,
                 "description": "Queue verl training tasks on a shared Ray cluster."},
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
            "schemas": {**_SCHEMAS, "JobSpec": _jobspec_schema(settings)},
            "responses": _RESPONSES,
        },
    })
