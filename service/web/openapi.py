"""The OpenAPI 3.1 document of the API, served at ``GET /api/v2/openapi.json`` (without
a token: it holds no secret and no deployment's paths) and committed as
``clients/openapi.json`` (``scripts/openapi_export.py`` writes it; a test keeps the two
equal).

Written by hand as data (no framework generates it), and kept honest by a test that
compares it with the routes the app registers, both ways. Every operation has an
``operationId`` and one tag (``OPERATIONS``); the operational routes (``/metrics``,
the probes, the document itself) are tagged ``operations`` and marked ``x-internal``, so
generators that honour it leave them out of clients. Every operation states its
``security`` (a bearer token, or none for the probes and the document) and, in
``x-argus-access``, who may call it: any user, admins only, the task's owner or an
admin, or the user named in the path or an admin; a test checks that against the route
table. The schemas are in ``service.web.openapi_schemas``.
"""

from __future__ import annotations

import copy
from typing import Any

from service.web import openapi_pipelines
from service.web.openapi_operations import INTERNAL_TAG, OPERATIONS, TAGS
from service.web.openapi_schemas import RESPONSES, SCHEMAS, err, json_content, ref
from service.webhooks.schemas import SCHEMAS as WEBHOOK_SCHEMAS

VERSION = "2.4.0"


# x-argus-access values, and what each means
ACCESS = {
    "public": "anyone, without a token",
    "user": "any enabled user",
    "admin": "admins only (403 for other users)",
    "owner": "any user may ask; only the task's owner or an admin gets it (403 otherwise)",
    "self": "the user named in the path (me: the caller) or an admin (403 otherwise)",
}

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
_HOOK_ID_PARAM = {
    "name": "hook_id", "in": "path", "required": True,
    "schema": {"type": "string", "pattern": "^[^/:]+$"}, "example": "wh_3f9a1c2b7d4e",
}


def _op(summary: str, ok: dict[str, dict[str, Any]], *errors: str, access: str = "user",
        params: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    responses = dict(ok)
    if access != "public":
        responses["401"] = err("Unauthorized")
    if access in ("admin", "owner", "self"):
        responses["403"] = err("Forbidden")
    for code, name in (e.split(":") for e in errors):
        responses[code] = err(name)
    responses["500"] = err("InternalError")
    responses["503"] = err("Unavailable")
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


_REASON_QUERY = {
    "name": "reason", "in": "query", "required": False, "schema": ref("WaitKind"),
    "description": "only waiting tasks whose reason is of this kind (new: not examined yet); "
                   "the queue's blocked list is left out",
}


def _webhook_paths() -> dict[str, Any]:
    """``/api/v2/webhooks``: a hook is its owner's (or an admin's) to read and delete."""
    return {
        "/api/v2/webhooks": {
            "post": _op(
                "Register a webhook for the caller; its signing secret is in this answer only",
                {"201": json_content(ref("CreatedWebhook"), "Created")},
                "400:BadRequest", "408:RequestTimeout", "409:Conflict",
                "413:PayloadTooLarge", "415:UnsupportedMediaType",
                requestBody={"required": True, "content": {
                    "application/json": {"schema": ref("NewWebhook")}}},
            ),
            "get": _op("The caller's webhooks (an admin: everyone's), never their secrets",
                       {"200": json_content(ref("WebhookList"), "Webhooks, oldest first")},
                       "400:BadRequest", params=[_USER_QUERY]),
        },
        "/api/v2/webhooks/{hook_id}": {"delete": _op(
            "Delete a webhook and its deliveries (pending ones are not sent)",
            {"200": json_content(ref("DeletedWebhook"), "Deleted")}, "404:NotFound",
            access="owner", params=[_HOOK_ID_PARAM],
        )},
        "/api/v2/webhooks/{hook_id}/deliveries": {"get": _op(
            "A webhook's recent deliveries, newest first: outcome, status code, tries, "
            "next retry",
            {"200": json_content(ref("DeliveryList"), "Deliveries")}, "400:BadRequest",
            "404:NotFound", access="owner",
            params=[_HOOK_ID_PARAM, _query("limit", {"type": "integer", "minimum": 1,
                                                     "maximum": 500, "default": 50},
                                           "how many")],
        )},
    }


def build_openapi() -> dict[str, Any]:
    """The document as a JSON-ready dict (a deep copy: callers may change it). The same
    for every deployment: path rules are prose, not the configured roots."""
    paths: dict[str, Any] = {
        "/api/v2/tasks": {
            "post": _op(
                "Submit a task (a JobSpec as YAML, or the same fields as a JSON object)",
                {"201": json_content(ref("Submitted"), "Accepted and queued")},
                "400:BadRequest", "403:Forbidden", "408:RequestTimeout", "413:PayloadTooLarge",
                "415:UnsupportedMediaType", "429:TooManyRequests",
                requestBody={"required": True, "content": {
                    t: {"schema": ref("JobSpec")} for t in (
                        "application/json", "application/yaml", "text/yaml",
                        "application/x-yaml")}},
            ),
            "get": _op(
                "List tasks, newest first",
                {"200": json_content(ref("TaskList"), "One page of tasks")},
                "400:BadRequest",
                params=[
                    _query("state", ref("TaskState"), "only tasks in this state"),
                    _USER_QUERY,
                    _REASON_QUERY,
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 500,
                                     "default": 50}, "page size"),
                    _query("cursor", {"type": "string"}, "next_cursor of the previous page"),
                ],
            ),
        },
        "/api/v2/tasks/{task_id}": {
            "get": _op(
                "Aggregated view of one task",
                {"200": json_content(ref("Task"), "The task")}, "404:NotFound",
                params=[_TASK_ID_PARAM],
            ),
            "patch": _op(
                "Change the priority of a waiting (QUEUED or PENDING_RESOURCES) task",
                {"200": json_content(ref("Task"), "The task, with its new priority and place")},
                "400:BadRequest", "404:NotFound", "408:RequestTimeout", "409:Conflict",
                "413:PayloadTooLarge", "415:UnsupportedMediaType", access="owner",
                params=[_TASK_ID_PARAM],
                requestBody={"required": True, "content": {
                    "application/json": {"schema": ref("PriorityChange")}}},
            ),
        },
        "/api/v2/tasks/{task_id}/attempts": {"get": _op(
            "All attempts of a task",
            {"200": json_content(ref("AttemptList"), "Attempts, oldest first")}, "404:NotFound",
            params=[_TASK_ID_PARAM],
        )},
        "/api/v2/tasks/{task_id}/events": {"get": _op(
            "The task's history: every transition, submit, sync and retry",
            {"200": json_content(ref("EventList"), "Events, oldest first")}, "404:NotFound",
            params=[_TASK_ID_PARAM],
        )},
        "/api/v2/tasks/{task_id}:cancel": {"post": _op(
            "Cancel a task",
            {"200": json_content(ref("CancelResult"), "Canceled at once (was not on the cluster)"),
             "202": json_content(ref("CancelResult"),
                          "Stop requested on Ray; the scheduler finishes the cancel")},
            "404:NotFound", "409:Conflict", access="owner",
            params=[_TASK_ID_PARAM],
        )},
        "/api/v2/tasks/{task_id}/logs": {"get": _op(
            "Driver log of an attempt (live from Ray, else the archive)",
            {"200": {"description": "The last lines of the log, or with offset all after it",
                     "headers": {
                         "X-Argus-Attempt": {"schema": {"type": "integer"},
                                             "description": "the attempt whose log this is"},
                         "X-Argus-Log-End": {"schema": {"type": "integer"}, "description":
                                             "the log's size in bytes: the offset to ask "
                                             "for next to get only what is new"}},
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
                _query("offset", {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                       "the UTF-8 bytes of the log from this offset (an earlier answer's "
                       "X-Argus-Log-End) instead of its last lines; tail is then ignored"),
            ],
        )},
        "/api/v2/tasks/{task_id}/metrics": {"get": _op(
            "Training curves of a task (the numeric metrics of verl's step lines)",
            {"200": json_content(ref("Curves"), "The metric names and the chosen curves")},
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
            {"200": json_content(ref("Queue"), "The queue (positions count every user's tasks)")},
            "400:BadRequest", params=[
                _USER_QUERY,
                _REASON_QUERY,
                _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000,
                                 "default": 500}, "waiting tasks per page"),
                _query("cursor", {"type": "string"}, "next_cursor of the previous page")],
        )},
        "/api/v2/me": {"get": _op(
            "Who the token signs in as: user, role, limits, the token itself",
            {"200": json_content(ref("Me"), "The caller")},
        )},
        "/api/v2/users": {
            "get": _op("List users", {"200": json_content(ref("UserList"), "Every user")},
                       access="admin"),
            "post": _op(
                "Create a user (then a token for them)",
                {"201": json_content(ref("User"), "Created")},
                "400:BadRequest", "408:RequestTimeout", "409:Conflict", "413:PayloadTooLarge",
                "415:UnsupportedMediaType", access="admin",
                requestBody={"required": True, "content": {
                    "application/json": {"schema": ref("NewUser")}}},
            ),
        },
        "/api/v2/users/{name}": {
            "get": _op("One user", {"200": json_content(ref("User"), "The user")},
                       "400:BadRequest", "404:NotFound", access="self",
                       params=[_NAME_PARAM]),
            "delete": _op(
                "Refused: users are never deleted (disable them)",
                {"405": err("MethodNotAllowed")}, "400:BadRequest", "404:NotFound",
                access="admin",
                params=[_NAME_PARAM],
            ),
        },
        "/api/v2/users/{name}:disable": {"post": _op(
            "Disable a user: tokens refused at once, tasks on the cluster run to their "
            "end, queued tasks wait until the user is enabled again",
            {"200": json_content(ref("UserStatus"), "Disabled (or already was)")},
            "400:BadRequest", "404:NotFound", "409:Conflict", access="admin",
            params=[_NAME_PARAM],
        )},
        "/api/v2/users/{name}:enable": {"post": _op(
            "Enable a user again",
            {"200": json_content(ref("UserStatus"), "Enabled (or already was)")},
            "400:BadRequest", "404:NotFound", access="admin", params=[_NAME_PARAM],
        )},
        "/api/v2/users/{name}/tokens": {
            "get": _op("A user's tokens (never their secrets)",
                       {"200": json_content(ref("TokenList"), "Tokens, oldest first")},
                       "400:BadRequest", "404:NotFound", access="self",
                       params=[_NAME_PARAM]),
            "post": _op(
                "Create a token; its secret is in this answer only",
                {"201": json_content(ref("NewToken"), "Created")},
                "400:BadRequest", "404:NotFound", "408:RequestTimeout", "409:Conflict",
                "413:PayloadTooLarge", "415:UnsupportedMediaType", access="self",
                params=[_NAME_PARAM],
                requestBody={"required": False, "content": {
                    "application/json": {"schema": ref("NewTokenRequest")}}},
            ),
        },
        "/api/v2/users/{name}/tokens/{token_id}:revoke": {"post": _op(
            "Revoke a token (at once)",
            {"200": json_content(ref("RevokedToken"), "Revoked (or already was)")},
            "400:BadRequest", "404:NotFound", access="self",
            params=[_NAME_PARAM, _TOKEN_ID_PARAM],
        )},
        "/api/v2/usage": {"get": _op(
            "GPU-seconds per user and per task in a window (attempts clipped to it; failed "
            "attempts included and marked; running ones counted up to now)",
            {"200": json_content(ref("Usage"), "Usage")}, "400:BadRequest",
            params=[
                _query("from", {"type": "string"}, "ISO-8601 or epoch seconds; default: "
                                                   "the beginning"),
                _query("to", {"type": "string"}, "ISO-8601 or epoch seconds; default: now"),
                _USER_QUERY,
                _query("tasks", {"type": "integer", "minimum": 0, "maximum": 1000,
                                 "default": 100}, "how many tasks to detail"),
            ],
        )},
        **_webhook_paths(),
        "/api/v2/openapi.json": {"get": _op(
            "This document (no token needed)",
            {"200": json_content({"type": "object"}, "OpenAPI 3.1 document")},
            access="public",
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
            "responses": {"200": json_content(ref("Health"), "Alive (ok or degraded)"),
                          "503": json_content(ref("Health"), "The scheduler thread stopped")},
        }},
        "/readyz": {"get": {
            "summary": "Readiness: can the process answer requests in time now (no auth)",
            "security": [],
            "x-argus-access": "public",
            "responses": {"200": json_content(ref("Readiness"), "Ready"),
                          "503": json_content(ref("Readiness"), "Not ready; reasons say why")},
        }},
    }
    paths.update(openapi_pipelines.paths(_op, _query))
    schemas = {**SCHEMAS, **WEBHOOK_SCHEMAS, **openapi_pipelines.SCHEMAS}
    schemas["Task"] = {**schemas["Task"], "properties": {
        **schemas["Task"]["properties"], **openapi_pipelines.TASK_FIELDS}}
    for (path, method), (operation_id, tag) in OPERATIONS.items():
        op = paths[path][method]
        op["operationId"], op["tags"] = operation_id, [tag]
        if tag == INTERNAL_TAG:
            op["x-internal"] = True
    return copy.deepcopy({
        "openapi": "3.1.0",
        "info": {"title": "Argus task service", "version": VERSION,
                 "description": "Queue verl training tasks on a shared Ray cluster. "
                                "Every operation's x-argus-access says who may call it: "
                                + "; ".join(f"{k}: {v}" for k, v in ACCESS.items())},
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "tags": TAGS,
        "paths": paths,
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
            "responses": RESPONSES,
        },
    })
