"""What each route of the API does, for its OpenAPI operation: an id and a tag (the names
a generated client gets), a summary, its answers (a status, a shape of
``service.web.shapes``, a description), the errors it may answer, who may call it
beyond the route table's access (``owner``, ``self``), its query parameters and its body.
``service.web.openapi`` joins it to the route table (``service.web.routes.ROUTES``: method,
path, its path parameters, access); a route without an operation, or an operation
without a route, stops the document from being built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from service.jobspec.model import LABEL_FILTER
from service.web.shapes import accounts as a
from service.web.shapes import nodes as nd
from service.web.shapes import pipelines as pl
from service.web.shapes import tasks as t
from service.webhooks import schemas as wh

INTERNAL_TAG = "operations"
YAML_TYPES = ("application/yaml", "text/yaml", "application/x-yaml")
BODY_ERRORS = ("400:BadRequest", "408:RequestTimeout", "413:PayloadTooLarge",
               "415:UnsupportedMediaType")
Schema = type[BaseModel] | dict[str, Any]


@dataclass(frozen=True)
class Reply:
    shape: Schema
    description: str
    content_type: str = "application/json"
    headers: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Query:
    name: str
    schema: dict[str, Any]
    description: str


@dataclass(frozen=True)
class Header:
    """A request header an operation reads."""

    name: str
    schema: dict[str, Any]
    description: str


@dataclass(frozen=True)
class Op:
    id: str
    tag: str
    summary: str
    ok: Mapping[str, Reply]
    errors: tuple[str, ...] = ()
    access: str | None = None  # owner or self: the handler's check beyond the route's
    query: tuple[Query, ...] = ()
    headers: tuple[Header, ...] = ()
    body: Schema | None = None
    body_types: tuple[str, ...] = ("application/json",)
    body_required: bool = True
    probe: bool = False  # the probes: their own answers only (no auth, no error answers)


def ok(shape: Schema, description: str, status: str = "200") -> dict[str, Reply]:
    return {status: Reply(shape, description)}


def limit(maximum: int, default: int, about: str) -> Query:
    return Query("limit", {"type": "integer", "minimum": 1, "maximum": maximum,
                           "default": default}, about)


USER = Query("user", {"type": "string"},
             "only this user's tasks; me: the caller's; all (the default): everyone's")
REASON = Query("reason", {"$ref": "#/components/schemas/WaitKind"},
               "only waiting tasks whose reason is of this kind (new: not examined yet); "
               "the queue's blocked list is left out")
LABEL = Query("label", {"type": "array", "items": {
    "type": "string", "pattern": LABEL_FILTER}},
    "only tasks with this JobSpec label, key=value (repeatable: every one)")
CURSOR = Query("cursor", {"type": "string"}, "next_cursor of the previous page")
TEXT = {"type": "string"}
MAX_INT = 2**63 - 1

# a path parameter of the route table: its schema, what it is, an example
PATH_PARAMS: dict[str, dict[str, Any]] = {
    "task_id": {"schema": {"type": "string", "pattern": "^[^/:]+$"},
                "example": "mvp2-ppo-20251223-143201-7f3a"},
    "name": {"schema": {"type": "string", "pattern": f"^{a.USER_NAME_RE.pattern}$"},
             "description": "a user name, or me for the caller", "example": "alice"},
    "token_id": {"schema": {"type": "string", "pattern": "^[0-9a-f]{12}$"},
                 "example": "3f9a1c2b7d4e"},
    "hook_id": {"schema": {"type": "string", "pattern": "^[^/:]+$"},
                "example": "wh_3f9a1c2b7d4e"},
    "node": {"schema": {"type": "string", "pattern": "^[^/:]+$"},
             "description": "a node's name (its argus.node label)", "example": "ray-worker-0"},
    "pipeline_id": {"schema": {"type": "string", "pattern": "^[^/:]+$"},
                    "example": "mvp2-alice-pipeline-20251223-143201-7f3a"},
}

_LOG_HEADERS = {
    "X-Argus-Attempt": {"schema": {"type": "integer"},
                        "description": "the attempt whose log this is"},
    "X-Argus-Log-End": {"schema": {"type": "integer"},
                        "description": "the log's size in bytes: the offset to ask for next "
                                       "to get only what is new"}}
_LOG_QUERY = (
    Query("attempt", {"oneOf": [{"const": "latest"},
                                {"type": "integer", "minimum": 1, "maximum": MAX_INT}],
                      "default": "latest"}, "attempt number or latest"),
    Query("tail", {"type": "integer", "minimum": 1, "maximum": 100000, "default": 2000},
          "number of last lines"),
    Query("offset", {"type": "integer", "minimum": 0, "maximum": MAX_INT},
          "the UTF-8 bytes of the log from this offset (an earlier answer's "
          "X-Argus-Log-End) instead of its last lines; tail is then ignored"),
)
IDEMPOTENCY_KEY = Header(
    "Idempotency-Key", {"type": "string", "minLength": 1, "maxLength": 255,
                        "pattern": "^ *[!-~][ -~]*$"},
    "Makes a retry safe (draft-ietf-httpapi-idempotency-key-header): a new key per "
    "submit, e.g. a UUID, sent again with the same body on a retry. The same key and "
    "body (JSON compared canonically, YAML as sent) from the same user within 24 h answer "
    "the first answer again (Idempotent-Replayed: true); the same key with another body "
    "is a 422; while the first request is still being processed, a 409 with Retry-After. "
    "Printable ASCII, at most 255 characters, bare or as a quoted string")
_REPLAYED = {"Idempotent-Replayed": {
    "schema": {"type": "string", "const": "true"},
    "description": "present when this is the answer of an earlier request with the same "
                   "Idempotency-Key and body (nothing new was created)"}}
_KEY_ERRORS = ("409:Conflict", "422:UnprocessableContent")


def created(shape: Schema, description: str) -> dict[str, Reply]:
    """A submit's 201, with the replay marker of an idempotent retry."""
    return {"201": Reply(shape, description, headers=_REPLAYED)}


_TASKS = "/api/v2/tasks"
_TASK = "/api/v2/tasks/{task_id}"
_USER = "/api/v2/users/{name}"
_NODE = "/api/v2/nodes/{node}"

TASK_OPERATIONS: dict[tuple[str, str], Op] = {
    ("post", _TASKS): Op(
        "submitTask", "tasks",
        "Submit a task (a JobSpec as YAML, or the same fields as a JSON object)",
        created(t.Submitted, "Accepted and queued (or, replayed, accepted before)"),
        (*BODY_ERRORS, "403:Forbidden", *_KEY_ERRORS, "429:TooManyRequests"),
        headers=(IDEMPOTENCY_KEY,), body={"$ref": "#/components/schemas/JobSpec"},
        body_types=("application/json", *YAML_TYPES)),
    ("get", _TASKS): Op(
        "listTasks", "tasks", "List tasks, newest first", ok(t.TaskList, "One page of tasks"),
        ("400:BadRequest",), query=(
            Query("state", {"$ref": "#/components/schemas/TaskState"},
                  "only tasks in this state"),
            USER, REASON, LABEL, limit(500, 50, "page size"), CURSOR)),
    ("get", _TASK): Op("getTask", "tasks", "Aggregated view of one task",
                       ok(t.Task, "The task"), ("404:NotFound",)),
    ("patch", _TASK): Op(
        "setTaskPriority", "tasks",
        "Change the priority of a waiting (QUEUED or PENDING_RESOURCES) task",
        ok(t.Task, "The task, with its new priority and place"),
        (*BODY_ERRORS, "404:NotFound", "409:Conflict"), access="owner",
        body=t.PriorityChange),
    ("get", f"{_TASK}/attempts"): Op("listAttempts", "tasks", "All attempts of a task",
                                     ok(t.AttemptList, "Attempts, oldest first"),
                                     ("404:NotFound",)),
    ("get", f"{_TASK}/events"): Op(
        "listEvents", "tasks", "The task's history: every transition, submit, sync and retry",
        ok(t.EventList, "Events, oldest first"), ("404:NotFound",)),
    ("post", f"{_TASK}:cancel"): Op(
        "cancelTask", "tasks", "Cancel a task",
        {"200": Reply(t.CancelResult, "Canceled at once (was not on the cluster)"),
         "202": Reply(t.CancelResult, "Stop requested on Ray; the scheduler finishes the "
                                      "cancel")},
        ("404:NotFound", "409:Conflict"), access="owner"),
    ("get", f"{_TASK}/logs"): Op(
        "getTaskLogs", "tasks", "Driver log of an attempt (live from Ray, else the archive)",
        {"200": Reply(TEXT, "The last lines of the log, or with offset all after it",
                      "text/plain", _LOG_HEADERS)},
        ("400:BadRequest", "404:NotFound"), access="owner", query=_LOG_QUERY),
    ("get", f"{_TASK}/metrics"): Op(
        "getTaskMetrics", "tasks",
        "Training curves of a task (the numeric metrics of verl's step lines)",
        ok(t.Curves, "The metric names and the chosen curves"),
        ("400:BadRequest", "404:NotFound"), access="owner", query=(
            Query("keys", {"type": "string", "maxLength": 4096},
                  "comma-separated metric names (at most 16); default: a loss and a "
                  "reward"),)),
    ("get", "/api/v2/queue"): Op(
        "getQueue", "queue", "Runnable tasks in queue order, and tasks on the cluster",
        ok(t.Queue, "The queue (positions count every user's tasks)"), ("400:BadRequest",),
        query=(USER, REASON, limit(1000, 500, "waiting tasks per page"), CURSOR)),
}

ACCOUNT_OPERATIONS: dict[tuple[str, str], Op] = {
    ("get", "/api/v2/me"): Op(
        "getMe", "users", "Who the token signs in as: user, role, limits, the token itself",
        ok(a.Me, "The caller")),
    ("get", "/api/v2/users"): Op("listUsers", "users", "List users",
                                 ok(a.UserList, "Every user")),
    ("post", "/api/v2/users"): Op(
        "createUser", "users", "Create a user (then a token for them)",
        ok(a.User, "Created", "201"), (*BODY_ERRORS, "409:Conflict"), body=a.NewUser),
    ("get", _USER): Op("getUser", "users", "One user", ok(a.User, "The user"),
                       ("400:BadRequest", "404:NotFound"), access="self"),
    ("delete", _USER): Op(
        "deleteUser", "users", "Refused: users are never deleted (disable them)",
        {"405": Reply({"$ref": "#/components/responses/MethodNotAllowed"}, "")},
        ("400:BadRequest", "404:NotFound")),
    ("post", f"{_USER}:disable"): Op(
        "disableUser", "users",
        "Disable a user: tokens refused at once, tasks on the cluster run to their end, "
        "queued tasks wait until the user is enabled again",
        ok(a.UserStatus, "Disabled (or already was)"),
        ("400:BadRequest", "404:NotFound", "409:Conflict")),
    ("post", f"{_USER}:enable"): Op(
        "enableUser", "users", "Enable a user again",
        ok(a.UserStatus, "Enabled (or already was)"), ("400:BadRequest", "404:NotFound")),
    ("get", f"{_USER}/tokens"): Op(
        "listTokens", "tokens", "A user's tokens (never their secrets)",
        ok(a.TokenList, "Tokens, oldest first"), ("400:BadRequest", "404:NotFound"),
        access="self"),
    ("post", f"{_USER}/tokens"): Op(
        "createToken", "tokens", "Create a token; its secret is in this answer only",
        ok(a.NewToken, "Created", "201"), (*BODY_ERRORS, "404:NotFound", "409:Conflict"),
        access="self", body=a.NewTokenRequest, body_required=False),
    ("post", f"{_USER}/tokens/{{token_id}}:revoke"): Op(
        "revokeToken", "tokens", "Revoke a token (at once)",
        ok(a.RevokedToken, "Revoked (or already was)"), ("400:BadRequest", "404:NotFound"),
        access="self"),
    ("get", "/api/v2/usage"): Op(
        "getUsage", "usage",
        "GPU-seconds per user and per task in a window (attempts clipped to it; failed "
        "attempts included and marked; running ones counted up to now)",
        ok(a.Usage, "Usage"), ("400:BadRequest",), query=(
            Query("from", TEXT, "ISO-8601 or epoch seconds; default: the beginning"),
            Query("to", TEXT, "ISO-8601 or epoch seconds; default: now"), USER,
            Query("tasks", {"type": "integer", "minimum": 0, "maximum": 1000,
                            "default": 100}, "how many tasks to detail"))),
}

_PIPELINE = "/api/v2/pipelines/{pipeline_id}"
_HOOK = "/api/v2/webhooks/{hook_id}"

OTHER_OPERATIONS: dict[tuple[str, str], Op] = {
    ("post", "/api/v2/pipelines"): Op(
        "submitPipeline", "pipelines",
        "Submit a pipeline: a DAG of stages, each a JobSpec, created atomically",
        created(pl.PipelineCreated, "Created (or, replayed, created before)"),
        (*BODY_ERRORS, *_KEY_ERRORS, "429:TooManyRequests"), headers=(IDEMPOTENCY_KEY,),
        body=pl.PipelineDocument, body_types=(*YAML_TYPES, "application/json")),
    ("get", "/api/v2/pipelines"): Op(
        "listPipelines", "pipelines",
        "List pipelines, newest first (yours; an admin: everyone's)",
        ok(pl.PipelineList, "Pipelines"), ("400:BadRequest", "403:Forbidden"), query=(
            Query("user", TEXT, "me, all or a user name"), limit(500, 50, "how many"))),
    ("get", _PIPELINE): Op("getPipeline", "pipelines", "A pipeline with its stages and edges",
                           ok(pl.PipelineDetail, "The pipeline"), ("404:NotFound",),
                           access="owner"),
    ("post", f"{_PIPELINE}/cancel"): Op(
        "cancelPipeline", "pipelines", "Cancel every stage of a pipeline that has not ended",
        ok(pl.PipelineDetail, "Canceled (running stages are stopped by the scheduler)"),
        ("404:NotFound",), access="owner"),
    ("post", "/api/v2/webhooks"): Op(
        "createWebhook", "webhooks",
        "Register a webhook for the caller; its signing secret is in this answer only",
        ok(wh.CreatedWebhook, "Created", "201"), (*BODY_ERRORS, "409:Conflict"),
        body=wh.NewWebhook),
    ("get", "/api/v2/webhooks"): Op(
        "listWebhooks", "webhooks",
        "The caller's webhooks (an admin: everyone's), never their secrets",
        ok(wh.WebhookList, "Webhooks, oldest first"), ("400:BadRequest",), query=(USER,)),
    ("delete", _HOOK): Op(
        "deleteWebhook", "webhooks",
        "Delete a webhook and its deliveries (pending ones are not sent)",
        ok(wh.DeletedWebhook, "Deleted"), ("404:NotFound",), access="owner"),
    ("get", f"{_HOOK}/deliveries"): Op(
        "listWebhookDeliveries", "webhooks",
        "A webhook's recent deliveries, newest first: outcome, status code, tries, next "
        "retry", ok(wh.DeliveryList, "Deliveries"), ("400:BadRequest", "404:NotFound"),
        access="owner", query=(limit(500, 50, "how many"),)),
    ("get", "/api/v2/nodes"): Op(
        "listNodes", "nodes",
        "The cluster's nodes by name: alive or dead, GPUs, cordon (who, when, why), health",
        ok(nd.NodeList, "Every node Ray lists or that has a stored state")),
    ("get", f"{_NODE}/events"): Op(
        "listNodeEvents", "nodes",
        "A node's events, newest first: cordoned, drained, resumed, quarantined (who, when, "
        "why)", ok(nd.NodeEventList, "Events"), ("400:BadRequest", "404:NotFound"),
        query=(limit(1000, 100, "how many"),)),
    ("post", f"{_NODE}:cordon"): Op(
        "cordonNode", "nodes",
        "Cordon a node: no new attempt is placed there; what runs there goes on",
        ok(nd.NodeChanged, "Cordoned"), (*BODY_ERRORS, "404:NotFound", "409:Conflict"),
        body=nd.NodeChange),
    ("post", f"{_NODE}:drain"): Op(
        "drainNode", "nodes",
        "Drain a node: cordoned, and the attempts on it finish on their own, or with "
        "requeue are stopped and re-queued to resume from their checkpoint elsewhere",
        ok(nd.NodeChanged, "Drained"), (*BODY_ERRORS, "404:NotFound", "409:Conflict"),
        body=nd.NodeDrain),
    ("post", f"{_NODE}:resume"): Op(
        "resumeNode", "nodes",
        "Resume a cordoned or drained node (the health check's cordon too)",
        ok(nd.NodeChanged, "Back in admission; cordon: the state lifted"),
        (*BODY_ERRORS, "404:NotFound", "409:Conflict"), body=nd.NodeChange,
        body_required=False),
    ("get", "/api/v2/openapi.json"): Op(
        "getOpenapiDocument", INTERNAL_TAG, "This document (no token needed)",
        ok({"type": "object"}, "OpenAPI 3.1 document")),
    ("get", "/metrics"): Op(
        "getMetrics", INTERNAL_TAG, "Prometheus metrics",
        {"200": Reply(TEXT, "Prometheus text exposition format", "text/plain")}),
    ("get", "/healthz"): Op(
        "getHealth", INTERNAL_TAG, "Liveness of the process (no auth)",
        {"200": Reply(t.Health, "Alive (ok or degraded)"),
         "503": Reply(t.Health, "The scheduler thread stopped")}, probe=True),
    ("get", "/readyz"): Op(
        "getReadiness", INTERNAL_TAG,
        "Readiness: can the process answer requests in time now (no auth)",
        {"200": Reply(t.Readiness, "Ready"),
         "503": Reply(t.Readiness, "Not ready; reasons say why")}, probe=True),
}

OPERATIONS = {**TASK_OPERATIONS, **ACCOUNT_OPERATIONS, **OTHER_OPERATIONS}

TAGS = [
    {"name": "tasks", "description": "submit, follow and steer training tasks"},
    {"name": "queue", "description": "what waits, in admission order, and what runs"},
    {"name": "users", "description": "who you are; users (admins)"},
    {"name": "tokens", "description": "API tokens"},
    {"name": "usage", "description": "GPU time per user and task"},
    {"name": "pipelines", "description": "DAGs of tasks with conditions; outputs passed on "
                                         "(docs/pipelines.md)"},
    {"name": "webhooks", "description": "signed notifications when tasks end (docs/webhooks.md)"},
    {"name": "nodes", "description": "the cluster's nodes; cordon, drain, resume (admins; "
                                     "docs/operations.md)"},
    {"name": INTERNAL_TAG, "description": "for operators and their tools (x-internal: not "
                                          "part of a generated client)"},
]

# the error answers an operation names ("404:NotFound"): what each means
ERRORS = {
    "BadRequest": "Invalid input; details name each offending field",
    "Unauthorized": "Missing, malformed or wrong bearer token; or a revoked or expired "
                    "token, or a disabled user's (the message says which)",
    "Forbidden": "A valid token without the right (see x-argus-access), or a priority above "
                 "what the caller may ask for",
    "NotFound": "No such task, attempt, logs, user, token or node",
    "MethodNotAllowed": "Not possible on this resource (the message says why)",
    "Conflict": "The task is already terminal (or, for a priority change, no longer "
                "waiting); the user exists or is disabled; too many tokens or webhooks; the "
                "node is already cordoned or drained (by whom), or is not; a submit's "
                "Idempotency-Key whose first request is still being processed "
                "(idempotency_key_in_use: retry after Retry-After seconds)",
    "UnprocessableContent": "A submit's Idempotency-Key was used before with another "
                            "request (idempotency_key_reused): send a new key",
    "PayloadTooLarge": "Body over the configured size limit",
    "RequestTimeout": "Body not received within the body timeout",
    "UnsupportedMediaType": "Body is not of the accepted content type (YAML for a JobSpec, "
                            "JSON elsewhere), or is compressed",
    "TooManyRequests": "A per-user quota (max_waiting_tasks, max_spec_bytes_per_day: the "
                       "message and details name it) or too many connections from one "
                       "address; retry after Retry-After seconds",
    "InternalError": "Unexpected server error (no details leaked)",
    "Unavailable": "The database cannot be used now (disk full, read-only, locked: "
                   "storage_unavailable), or too many connections; retry after Retry-After "
                   "seconds",
}

# every shape of the document, requests and answers (the operations name most of them;
# Error is every error answer's)
SHAPES: tuple[type[BaseModel], ...] = tuple(dict.fromkeys((t.Error, *(
    s for op in OPERATIONS.values() for s in (op.body, *(r.shape for r in op.ok.values()))
    if isinstance(s, type)))))
