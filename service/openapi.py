"""The OpenAPI 3.1 document of the API, served at ``GET /api/v2/openapi.json``.

Written by hand as data (no framework generates it), and kept honest by a test that
compares it with the routes the app registers, both ways. Every operation states its
``security`` (a bearer token, or none for ``/healthz``) and, in ``x-argus-access``, who
may call it: any user, admins only, the task's owner or an admin, or the user named in
the path or an admin; a test checks that against the route table.
"""

from __future__ import annotations

import copy
from typing import Any

from service.config import Settings
from service.jobspec import jobspec_json_schema
from service.layout import users_root
from service.priorities import MAX_PRIORITY, MIN_PRIORITY
from service.states import FailureKind, RayStatus, TaskState
from service.users import MAX_TOKEN_LIFETIME_S, MIN_TOKEN_LIFETIME_S

VERSION = "2.3.0"

# x-argus-access values, and what each means
ACCESS = {
    "public": "anyone, without a token",
    "user": "any enabled user",
    "admin": "admins only (403 for other users)",
    "owner": "any user may ask; only the task's owner or an admin gets it (403 otherwise)",
    "self": "the user named in the path (me: the caller) or an admin (403 otherwise)",
}

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

_NAME_PARAM = {
    "name": "name", "in": "path", "required": True,
    "schema": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,31}$"},
    "description": "a user name, or me for the caller", "example": "alice",
}
_TOKEN_ID_PARAM = {
    "name": "token_id", "in": "path", "required": True,
    "schema": {"type": "string", "pattern": "^[0-9a-f]{12}$"}, "example": "3f9a1c2b7d4e",
}
_PRIORITY = {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY,
             "description": "higher is admitted first; a user may ask for up to the "
                            "configured max_user_priority, an admin for up to "
                            f"{MAX_PRIORITY}"}
_USER_NAME = {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,31}$",
              "description": "no '--', no '-' at the end; all, me and mine are reserved"}
_LIMITS = {
    "type": "object", "description": "0: no limit",
    "properties": {"max_running_tasks": {"type": "integer", "minimum": 0},
                   "max_gpus": {"type": "integer", "minimum": 0},
                   "max_waiting_tasks": {"type": "integer", "minimum": 0,
                                         "description": "tasks waiting at once (admins: "
                                                        "exempt)"},
                   "max_spec_bytes_per_day": {"type": "integer", "minimum": 0,
                                              "description": "JobSpec bytes stored per "
                                                             "day (admins: exempt)"}},
}
_TOKEN_PROPS: dict[str, Any] = {
    "token_id": {"type": "string", "description": "public: finds the token"},
    "prefix": {"type": "string", "examples": ["argus_3f9a1c2b7d4e"],
               "description": "what lists show of the token (the secret is never shown)"},
    "user": {"type": "string"},
    "label": {"type": "string"},
    "state": {"enum": ["active", "revoked", "expired"]},
    "created_at": _TS,
    "last_used_at": {**_TS, "description": "recorded at most once a minute"},
    "expires_at": {**_TS, "description": "null: never"},
    "revoked_at": _TS,
}
_USAGE_USER = {
    "type": "object",
    "properties": {
        "user": {"type": ["string", "null"]},
        "gpu_seconds": {"type": "number"},
        "gpu_hours": {"type": "number"},
        "failed_gpu_seconds": {"type": "number",
                               "description": "the part spent in attempts that failed"},
        "tasks": {"type": "integer"},
        "attempts": {"type": "integer"},
        "running_attempts": {"type": "integer", "description": "counted up to now"},
    },
}
_USAGE_ATTEMPT = {
    "type": "object",
    "properties": {
        "attempt_no": {"type": "integer"},
        "ray_status": _ref("RayStatus"),
        "failure_kind": _ref("FailureKind"),
        "failed": {"type": "boolean"},
        "running": {"type": "boolean"},
        "start_time": _TS, "end_time": _TS,
        "counted_from": {**_TS, "description": "start, clipped to the window"},
        "counted_to": {**_TS, "description": "end (now while running), clipped"},
        "gpu_seconds": {"type": "number"},
    },
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
        "properties": {"task_id": {"type": "string"},
                       "state": {"enum": ["QUEUED", "BLOCKED"],
                                 "description": "BLOCKED: it has after (dependencies)"}},
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
                               "description": "1-based place among runnable tasks, in "
                                              "admission order (priority, then FIFO)"},
            "priority": _PRIORITY,
            "max_runtime_s": {"type": ["number", "null"],
                              "description": "each attempt's time limit in seconds from its "
                                             "start (stopped past it: TIME_LIMIT); null: none"},
            "next_run_at": _TS,
            "estimated_start": {**_TS, "description": "when the scheduler's plan expects a "
                                "waiting task to start (v2.scheduler.reservations on, from "
                                "the time limits); null: no reservation"},
            "cancel_requested": {"type": "boolean"},
            "created_at": _TS,
            "updated_at": _TS,
            "progress": {"oneOf": [_ref("Progress"), {"type": "null"}],
                         "description": "one task (GET) and the queue's running tasks: how "
                                        "far the latest attempt got; null before its first "
                                        "step line"},
        },
    },
    "Progress": {
        "type": "object",
        "required": ["attempt_no", "step", "total_steps", "fraction", "resumed_from",
                     "rate_steps_per_s", "eta_s", "eta_at", "last_step_at"],
        "description": "read from the attempt's driver log (verl's step:N lines)",
        "properties": {
            "attempt_no": {"type": "integer"},
            "step": {"type": ["integer", "null"], "description": "verl's global step"},
            "total_steps": {"type": ["integer", "null"],
                            "description": "from the log (Total training steps), else the "
                                           "JobSpec's total_training_steps"},
            "fraction": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "resumed_from": {"type": ["integer", "null"],
                             "description": "the checkpoint step this attempt resumed from"},
            "rate_steps_per_s": {"type": ["number", "null"],
                                 "description": "this attempt's own steps; while RUNNING"},
            "eta_s": {"type": ["number", "null"], "description": "while RUNNING"},
            "eta_at": _TS,
            "last_step_at": _TS,
        },
    },
    "Curves": {
        "type": "object", "required": ["task_id", "keys", "series"],
        "properties": {
            "task_id": {"type": "string"},
            "keys": {"type": "array", "items": {"type": "string"},
                     "description": "every metric the task's attempts logged"},
            "series": {"type": "array", "items": {
                "type": "object", "required": ["key", "steps", "values", "attempts"],
                "description": "one metric over all attempts on one step axis (a later "
                               "attempt replaces the earlier ones from its first step); "
                               "downsampled to v2.progress.max_points per attempt",
                "properties": {
                    "key": {"type": "string"},
                    "steps": {"type": "array", "items": {"type": "integer"}},
                    "values": {"type": "array", "items": {"type": "number"}},
                    "attempts": {"type": "array", "items": {"type": "integer"}},
                }}},
        },
    },
    "PriorityChange": {
        "type": "object", "required": ["priority"], "additionalProperties": False,
        "properties": {"priority": _PRIORITY},
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
                     "RAY_STATUS_SYNC, RETRY_SCHEDULED, CANCEL_REQUESTED, PRIORITY_CHANGED, ..."},
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
        "type": "object", "required": ["pending", "running", "fair_share", "next_cursor"],
        "properties": {"pending": {"type": "array", "items": _ref("Task"),
                                   "description": "one page of the waiting tasks"},
                       "running": {"type": "array", "items": _ref("Task")},
                       "next_cursor": {"type": ["string", "null"],
                                       "description": "the next page of pending tasks "
                                                      "(?cursor=); null: the last"},
                       "fair_share": {
                           "type": "array", "items": _ref("FairShare"),
                           "description": "each user's share at the scheduler's last "
                                          "tick, the one served next first"}},
    },
    "FairShare": {
        "type": "object",
        "required": ["user", "gpus", "share", "weight", "weighted_share"],
        "properties": {
            "user": {"type": ["string", "null"]},
            "gpus": {"type": "number", "description": "GPUs held (with a half-life: "
                                                      "decayed usage in GPU units)"},
            "share": {"type": "number", "description": "gpus / the cluster's GPUs"},
            "weight": {"type": "number"},
            "weighted_share": {"type": "number", "description": "share / weight"}},
    },
    "User": {
        "type": "object", "required": ["name", "role", "enabled"],
        "properties": {"name": _USER_NAME, "role": {"enum": ["admin", "user"]},
                       "enabled": {"type": "boolean"}, "created_at": _TS,
                       "disabled_at": _TS, "limits": _LIMITS},
    },
    "UserList": {"type": "object", "required": ["users"],
                 "properties": {"users": {"type": "array", "items": _ref("User")}}},
    "NewUser": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "properties": {"name": _USER_NAME, "role": {"enum": ["admin", "user"],
                                                    "default": "user"}},
    },
    "UserStatus": {
        "type": "object", "required": ["user", "changed", "effect"],
        "properties": {
            "user": _ref("User"), "changed": {"type": "boolean"},
            "active_tasks": {"type": "integer",
                             "description": "on the cluster: they run to their end"},
            "queued_tasks": {"type": "integer",
                             "description": "not started while the user is disabled"},
            "effect": {"type": "string"},
        },
    },
    "Me": {
        "type": "object", "required": ["name", "role", "token"],
        "properties": {
            "name": {"type": "string"}, "role": {"enum": ["admin", "user"]},
            "enabled": {"type": "boolean"}, "limits": {"oneOf": [_LIMITS, {"type": "null"}]},
            "token": {"type": ["object", "null"], "properties": {
                "bootstrap": {"type": "boolean",
                              "description": "the token from the service's environment"},
                **_TOKEN_PROPS,
                "prefix": {"type": ["string", "null"],
                           "description": "null for the bootstrap token (it has no id)"}}},
        },
    },
    "Token": {"type": "object", "required": ["token_id", "prefix", "user", "label", "state"],
              "properties": _TOKEN_PROPS},
    "TokenList": {"type": "object", "required": ["user", "tokens"],
                  "properties": {"user": {"type": "string"},
                                 "tokens": {"type": "array", "items": _ref("Token")}}},
    "NewTokenRequest": {
        "type": "object", "additionalProperties": False,
        "properties": {
            "label": {"type": "string", "minLength": 1, "maxLength": 64,
                      "default": "default"},
            "expires_at": {"type": "string", "format": "date-time",
                           "description": "ISO-8601; or give expires_in_s; neither: never"},
            "expires_in_s": {"type": "number", "minimum": MIN_TOKEN_LIFETIME_S,
                             "maximum": MAX_TOKEN_LIFETIME_S},
        },
    },
    "NewToken": {
        "type": "object", "required": ["token_id", "token"],
        "properties": {**_TOKEN_PROPS,
                       "token": {"type": "string", "description": "the secret, shown once"},
                       "note": {"type": "string"}},
    },
    "RevokedToken": {"type": "object", "required": ["token_id", "state", "changed"],
                     "properties": {**_TOKEN_PROPS, "changed": {
                         "type": "boolean", "description": "false: it was revoked before"}}},
    "Usage": {
        "type": "object", "required": ["from", "to", "users", "tasks", "tasks_total"],
        "properties": {
            "from": _TS, "to": _TS, "generated_at": _TS,
            "users": {"type": "array", "items": _USAGE_USER},
            "tasks": {"type": "array", "description": "the tasks that used the most GPU "
                      "time in the window, most first", "items": {
                          "type": "object", "properties": {
                              "task_id": {"type": "string"},
                              "user": {"type": ["string", "null"]},
                              "gpus": {"type": "integer"},
                              "gpu_seconds": {"type": "number"},
                              "failed_gpu_seconds": {"type": "number"},
                              "attempts": {"type": "array", "items": _USAGE_ATTEMPT}}}},
            "tasks_total": {"type": "integer"},
        },
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

_SCHEMAS["Readiness"] = {
    "type": "object", "required": ["status", "reasons", "read_s", "work_s"],
    "properties": {
        "status": {"enum": ["ready", "not ready"]},
        "reasons": {"type": "array", "items": {"type": "string"}},
        "read_s": {"type": ["number", "null"],
                   "description": "a probe read's latency through the read lane (null: "
                                  "past the deadline or failed)"},
        "work_s": {"type": ["number", "null"],
                   "description": "a no-op's latency through the work lane"},
    },
}

_RESPONSES = {
    name: _json(_ref("Error"), text)
    for name, text in {
        "BadRequest": "Invalid input; details name each offending field",
        "Unauthorized": "Missing, malformed or wrong bearer token; or a revoked or expired "
                        "token, or a disabled user's (the message says which)",
        "Forbidden": "A valid token without the right (see x-argus-access), or a "
                     "priority above what the caller may ask for",
        "NotFound": "No such task, attempt, logs, user or token",
        "MethodNotAllowed": "Not possible on this resource (the message says why)",
        "Conflict": "The task is already terminal (or, for a priority change, no longer "
                    "waiting); the user exists or is disabled; too many tokens",
        "PayloadTooLarge": "Body over the configured size limit",
        "RequestTimeout": "Body not received within the body timeout",
        "UnsupportedMediaType": "Body is not of the accepted content type (YAML for a "
                                "JobSpec, JSON elsewhere), or is compressed",
        "TooManyRequests": "A per-user quota (max_waiting_tasks, max_spec_bytes_per_day: "
                           "the message and details name it) or too many connections "
                           "from one address; retry after Retry-After seconds",
        "InternalError": "Unexpected server error (no details leaked)",
        "Unavailable": "The database cannot be used now (disk full, read-only, locked: "
                       "storage_unavailable), or too many connections; retry after "
                       "Retry-After seconds",
    }.items()
}




def _op(summary: str, ok: dict[str, dict[str, Any]], *errors: str, access: str = "user",
        params: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    responses = dict(ok)
    if access != "public":
        responses["401"] = _err("Unauthorized")
    if access in ("admin", "owner", "self"):
        responses["403"] = _err("Forbidden")
    for code, name in (e.split(":") for e in errors):
        responses[code] = _err(name)
    responses["500"] = _err("InternalError")
    responses["503"] = _err("Unavailable")
    op: dict[str, Any] = {
        "summary": summary, "responses": responses,
        "security": [] if access == "public" else [{"bearerAuth": []}],
        "x-argus-access": access, **extra,
    }
    if params:
        op["parameters"] = params
    return op


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


_USER_QUERY = {
    "name": "user", "in": "query", "required": False, "schema": {"type": "string"},
    "description": "only this user's tasks; me: the caller's; all (the default): everyone's",
}


def _jobspec_schema(settings: Settings | None) -> dict[str, Any]:
    """The JobSpec document a POST body parses to, for the configured allowed roots."""
    settings = settings or Settings()
    roots = settings.resolved_allowed_roots
    schema = {k: v for k, v in jobspec_json_schema(
        roots, users_root(settings.shared_root)).items() if k != "$schema"}
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
                "400:BadRequest", "403:Forbidden", "408:RequestTimeout", "413:PayloadTooLarge",
                "415:UnsupportedMediaType", "429:TooManyRequests",
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
                    _USER_QUERY,
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 500,
                                     "default": 50}, "page size"),
                    _query("cursor", {"type": "string"}, "next_cursor of the previous page"),
                ],
            ),
        },
        "/api/v2/tasks/{task_id}": {
            "get": _op(
                "Aggregated view of one task",
                {"200": _json(_ref("Task"), "The task")}, "404:NotFound",
                params=[_TASK_ID_PARAM],
            ),
            "patch": _op(
                "Change the priority of a waiting (QUEUED or PENDING_RESOURCES) task",
                {"200": _json(_ref("Task"), "The task, with its new priority and place")},
                "400:BadRequest", "404:NotFound", "408:RequestTimeout", "409:Conflict",
                "413:PayloadTooLarge", "415:UnsupportedMediaType", access="owner",
                params=[_TASK_ID_PARAM],
                requestBody={"required": True, "content": {
                    "application/json": {"schema": _ref("PriorityChange")}}},
            ),
        },
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
            "404:NotFound", "409:Conflict", access="owner",
            params=[_TASK_ID_PARAM],
        )},
        "/api/v2/tasks/{task_id}/logs": {"get": _op(
            "Driver log of an attempt (live from Ray, else the archive)",
            {"200": {"description": "Last lines of the log",
                     "content": {"text/plain": {"schema": {"type": "string"}}}}},
            "400:BadRequest", "404:NotFound", access="owner",
            params=[
                _TASK_ID_PARAM,
                _query("attempt", {"oneOf": [{"const": "latest"},
                                             {"type": "integer", "minimum": 1,
                                              "maximum": 2**63 - 1}],
                                   "default": "latest"}, "attempt number or latest"),
                _query("tail", {"type": "integer", "minimum": 1, "maximum": 100000,
                                "default": 2000}, "number of last lines"),
            ],
        )},
        "/api/v2/tasks/{task_id}/metrics": {"get": _op(
            "Training curves of a task (the numeric metrics of verl's step lines)",
            {"200": _json(_ref("Curves"), "The metric names and the chosen curves")},
            "400:BadRequest", "404:NotFound", access="owner",
            params=[
                _TASK_ID_PARAM,
                _query("keys", {"type": "string", "maxLength": 4096},
                       "comma-separated metric names (at most 16); default: a loss and a "
                       "reward"),
            ],
        )},
        "/api/v2/queue": {"get": _op(
            "Runnable tasks in queue order, and tasks on the cluster",
            {"200": _json(_ref("Queue"), "The queue (positions count every user's tasks)")},
            "400:BadRequest", params=[
                _USER_QUERY,
                _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000,
                                 "default": 500}, "waiting tasks per page"),
                _query("cursor", {"type": "string"}, "next_cursor of the previous page")],
        )},
        "/api/v2/me": {"get": _op(
            "Who the token signs in as: user, role, limits, the token itself",
            {"200": _json(_ref("Me"), "The caller")},
        )},
        "/api/v2/users": {
            "get": _op("List users", {"200": _json(_ref("UserList"), "Every user")},
                       access="admin"),
            "post": _op(
                "Create a user (then a token for them)",
                {"201": _json(_ref("User"), "Created")},
                "400:BadRequest", "408:RequestTimeout", "409:Conflict", "413:PayloadTooLarge",
                "415:UnsupportedMediaType", access="admin",
                requestBody={"required": True, "content": {
                    "application/json": {"schema": _ref("NewUser")}}},
            ),
        },
        "/api/v2/users/{name}": {
            "get": _op("One user", {"200": _json(_ref("User"), "The user")},
                       "400:BadRequest", "404:NotFound", access="self",
                       params=[_NAME_PARAM]),
            "delete": _op(
                "Refused: users are never deleted (disable them)",
                {"405": _err("MethodNotAllowed")}, "400:BadRequest", "404:NotFound",
                access="admin",
                params=[_NAME_PARAM],
            ),
        },
        "/api/v2/users/{name}:disable": {"post": _op(
            "Disable a user: tokens refused at once, tasks on the cluster run to their "
            "end, queued tasks wait until the user is enabled again",
            {"200": _json(_ref("UserStatus"), "Disabled (or already was)")},
            "400:BadRequest", "404:NotFound", "409:Conflict", access="admin",
            params=[_NAME_PARAM],
        )},
        "/api/v2/users/{name}:enable": {"post": _op(
            "Enable a user again",
            {"200": _json(_ref("UserStatus"), "Enabled (or already was)")},
            "400:BadRequest", "404:NotFound", access="admin", params=[_NAME_PARAM],
        )},
        "/api/v2/users/{name}/tokens": {
            "get": _op("A user's tokens (never their secrets)",
                       {"200": _json(_ref("TokenList"), "Tokens, oldest first")},
                       "400:BadRequest", "404:NotFound", access="self",
                       params=[_NAME_PARAM]),
            "post": _op(
                "Create a token; its secret is in this answer only",
                {"201": _json(_ref("NewToken"), "Created")},
                "400:BadRequest", "404:NotFound", "408:RequestTimeout", "409:Conflict",
                "413:PayloadTooLarge", "415:UnsupportedMediaType", access="self",
                params=[_NAME_PARAM],
                requestBody={"required": False, "content": {
                    "application/json": {"schema": _ref("NewTokenRequest")}}},
            ),
        },
        "/api/v2/users/{name}/tokens/{token_id}:revoke": {"post": _op(
            "Revoke a token (at once)",
            {"200": _json(_ref("RevokedToken"), "Revoked (or already was)")},
            "400:BadRequest", "404:NotFound", access="self",
            params=[_NAME_PARAM, _TOKEN_ID_PARAM],
        )},
        "/api/v2/usage": {"get": _op(
            "GPU-seconds per user and per task in a window (attempts clipped to it; failed "
            "attempts included and marked; running ones counted up to now)",
            {"200": _json(_ref("Usage"), "Usage")}, "400:BadRequest",
            params=[
                _query("from", {"type": "string"}, "ISO-8601 or epoch seconds; default: "
                                                   "the beginning"),
                _query("to", {"type": "string"}, "ISO-8601 or epoch seconds; default: now"),
                _USER_QUERY,
                _query("tasks", {"type": "integer", "minimum": 0, "maximum": 1000,
                                 "default": 100}, "how many tasks to detail"),
            ],
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
            "x-argus-access": "public",
            "responses": {"200": _json(_ref("Health"), "Alive (ok or degraded)"),
                          "503": _json(_ref("Health"), "The scheduler thread stopped")},
        }},
        "/readyz": {"get": {
            "summary": "Readiness: can the process answer requests in time now (no auth)",
            "security": [],
            "x-argus-access": "public",
            "responses": {"200": _json(_ref("Readiness"), "Ready"),
                          "503": _json(_ref("Readiness"), "Not ready; reasons say why")},
        }},
    }
    from service import openapi_pipelines  # it builds on this module's helpers
    paths.update(openapi_pipelines.paths())
    schemas = {**_SCHEMAS, **openapi_pipelines.SCHEMAS, "JobSpec": _jobspec_schema(settings)}
    schemas["Task"] = {**schemas["Task"], "properties": {
        **schemas["Task"]["properties"], **openapi_pipelines.TASK_FIELDS}}
    return copy.deepcopy({
        "openapi": "3.1.0",
        "info": {"title": "Argus task service", "version": VERSION,
                 "description": "Queue verl training tasks on a shared Ray cluster. "
                                "Every operation's x-argus-access says who may call it: "
                                + "; ".join(f"{k}: {v}" for k, v in ACCESS.items())},
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
            "responses": _RESPONSES,
        },
    })
