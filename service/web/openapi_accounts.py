"""The OpenAPI component schemas of users, tokens and usage (data; merged into
``service.web.openapi_schemas.SCHEMAS`` in the document's order)."""

from __future__ import annotations

from typing import Any

from service.domain.users import MAX_TOKEN_LIFETIME_S, MIN_TOKEN_LIFETIME_S
from service.web.openapi_common import TS, nullable, ref

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
    "state": ref("TokenState"),
    "created_at": TS,
    "last_used_at": {**TS, "description": "recorded at most once a minute"},
    "expires_at": {**TS, "description": "null: never"},
    "revoked_at": TS,
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
        "ray_status": nullable(ref("RayStatus")),
        "failure_kind": nullable(ref("FailureKind")),
        "failed": {"type": "boolean"},
        "running": {"type": "boolean"},
        "start_time": TS, "end_time": TS,
        "counted_from": {**TS, "description": "start, clipped to the window"},
        "counted_to": {**TS, "description": "end (now while running), clipped"},
        "gpu_seconds": {"type": "number"},
    },
}

ACCOUNT_SCHEMAS: dict[str, Any] = {
    "User": {
        "type": "object", "required": ["name", "role", "enabled"],
        "properties": {"name": _USER_NAME, "role": ref("Role"),
                       "enabled": {"type": "boolean"}, "created_at": TS,
                       "disabled_at": TS, "limits": ref("Limits")},
    },
    "UserList": {"type": "object", "required": ["users"],
                 "properties": {"users": {"type": "array", "items": ref("User")}}},
    "NewUser": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "properties": {"name": _USER_NAME, "role": {**ref("Role"), "default": "user"}},
    },
    "UserStatus": {
        "type": "object", "required": ["user", "changed", "effect"],
        "properties": {
            "user": ref("User"), "changed": {"type": "boolean"},
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
            "name": {"type": "string"}, "role": ref("Role"),
            "enabled": {"type": "boolean"}, "limits": nullable(ref("Limits")),
            "token": nullable(ref("MeToken")),
        },
    },
    "MeToken": {
        "type": "object", "description": "the token of the request",
        "properties": {
                "bootstrap": {"type": "boolean",
                              "description": "the token from the service's environment"},
                **_TOKEN_PROPS,
                "prefix": {"type": ["string", "null"],
                           "description": "null for the bootstrap token (it has no id)"}},
    },
    "Limits": _LIMITS,
    "Token": {"type": "object", "required": ["token_id", "prefix", "user", "label", "state"],
              "properties": _TOKEN_PROPS},
    "TokenList": {"type": "object", "required": ["user", "tokens"],
                  "properties": {"user": {"type": "string"},
                                 "tokens": {"type": "array", "items": ref("Token")}}},
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
            "from": TS, "to": TS, "generated_at": TS,
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
}
