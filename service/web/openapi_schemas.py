"""The component schemas and error responses of the OpenAPI document (data).

Nullable values are ``anyOf: [{$ref}, {type: null}]`` or ``type: [T, "null"]``; an enum is
never nullable itself (a generator would make one class per use). The JobSpec is one
schema per workload under a ``discriminator`` on ``workload``; its paths follow a rule
written in prose, not the deployment's own directories, so the document is the same for
every install (``clients/openapi.json``).
"""

from __future__ import annotations

from typing import Any

from service.domain.reasons import RUN_HISTORY, TIME_LIMITS, UNKNOWN, WaitKind
from service.domain.states import FailureKind, RayStatus, TaskState
from service.domain.workloads import WORKLOAD_NAMES, WORKLOADS
from service.jobspec.model import NOTES, TRAINER_DEVICES
from service.jobspec.schema import jobspec_json_schema
from service.policy.dependencies import OnUnsatisfiable
from service.policy.priorities import MAX_PRIORITY, MIN_PRIORITY
from service.web.openapi_accounts import ACCOUNT_SCHEMAS
from service.web.openapi_common import TS, err, json_content, nullable, ref

PRIORITY = {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY,
             "description": "higher is admitted first; a user may ask for up to the "
                            "configured max_user_priority, an admin for up to "
                            f"{MAX_PRIORITY}"}

# the helpers are re-exported: the document's other parts import them from here
__all__ = [
    "PRIORITY",
    "RESPONSES",
    "SCHEMAS",
    "TS",
    "err",
    "jobspec_schemas",
    "json_content",
    "nullable",
    "ref",
]

SCHEMAS: dict[str, Any] = {
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
    "WaitKind": {"type": "string", "enum": [k.value for k in WaitKind],
                 "description": "the kind of a waiting task's reason (service/domain/reasons.py)"},
    "EstimateBasis": {"type": "string", "enum": [TIME_LIMITS, RUN_HISTORY, UNKNOWN]},
    "RayStatus": {"type": "string", "enum": [s.value for s in RayStatus]},
    "FailureKind": {"type": "string", "enum": [k.value for k in FailureKind]},
    "Workload": {"type": "string", "enum": list(WORKLOAD_NAMES)},
    "Role": {"type": "string", "enum": ["admin", "user"]},
    "TokenState": {"type": "string", "enum": ["active", "revoked", "expired"]},
    "Submitted": {
        "type": "object", "required": ["task_id", "state"],
        "properties": {"task_id": {"type": "string"},
                       "state": {**ref("TaskState"),
                                 "description": "QUEUED, or BLOCKED when it has after "
                                                "(dependencies)"}},
    },
    "Attempt": {
        "type": "object",
        "required": ["attempt_no", "ray_submission_id", "ray_status"],
        "properties": {
            "attempt_no": {"type": "integer", "minimum": 1},
            "ray_submission_id": {"type": "string", "examples": [
                "mvp2-ppo-20251223-143201-7f3a--a01"]},
            "ray_status": nullable(ref("RayStatus")),
            "failure_kind": nullable(ref("FailureKind")),
            "message": {"type": ["string", "null"],
                        "description": "Ray's message (a failed job's quotes its driver "
                                       "log's tail): the task's owner and admins only; "
                                       "null for anyone else"},
            "message_hidden": {"type": "boolean",
                               "description": "true when message was withheld from the "
                                              "caller (not the task's owner nor an admin)"},
            "exit_code": {"type": ["integer", "null"]},
            "submitted_at": TS,
            "start_time": TS,
            "end_time": TS,
            "stop_requested": {"type": "boolean"},
        },
    },
    "Task": {
        "type": "object",
        "required": ["task_id", "state", "workload", "desired_resources"],
        "properties": {
            "task_id": {"type": "string"},
            "state": ref("TaskState"),
            "workload": ref("Workload"),
            "user": {"type": ["string", "null"]},
            "desired_resources": {
                "type": "object",
                "properties": {"nnodes": {"type": "integer"},
                               "n_gpus_per_node": {"type": "integer"},
                               "total_gpus": {"type": "integer"}},
            },
            "latest_attempt": nullable(ref("Attempt")),
            "error_summary": {"type": ["string", "null"],
                              "description": "why the task ended as it did; to the task's "
                                            "owner and admins with the line it quotes from "
                                            "the job's output, to anyone else in Argus's "
                                            "words and the failure kind only"},
            "pending_reason": {"type": ["string", "null"]},
            "reason_kind": {**nullable(ref("WaitKind")),
                            "description": "the kind of pending_reason while the task is "
                                           "runnable (new: not examined yet); else null"},
            "queue_position": {"type": ["integer", "null"],
                               "description": "1-based place among runnable tasks, in "
                                              "admission order (priority, then FIFO)"},
            "priority": PRIORITY,
            "max_runtime_s": {"type": ["number", "null"],
                              "description": "each attempt's time limit in seconds from its "
                                             "start (stopped past it: TIME_LIMIT); null: none"},
            **{note.name: {"type": ["string", "null"], "maxLength": note.max_length,
                           "description": f"the JobSpec's {note.name}: {note.about}"}
               for note in NOTES},
            "next_run_at": TS,
            "estimated_start": {**TS, "description": "when the scheduler's last plan "
                                "expects a waiting task to start (v2.scheduler.reservations "
                                "on): from run history to the minute, else the time limits' "
                                "bound; null: no estimate (estimate_basis says why)"},
            "estimate_basis": {**nullable(ref("EstimateBasis")),
                               "description": "what estimated_start comes from: time_limits "
                                              "(every run before it ends at its limit), "
                                              "run_history (runs end as their like did "
                                              "lately), unknown (the plan has no start for "
                                              "it: no limit to plan from, or too deep in "
                                              "the queue); null: the task does not wait"},
            "estimated_start_bound": {**TS, "description": "the start the time limits give "
                                      "(every run before it ending at its limit), as the "
                                      "plan stands: newer work of a higher priority may "
                                      "still move it; null: no estimate"},
            "cancel_requested": {"type": "boolean"},
            "created_at": TS,
            "updated_at": TS,
            "progress": {**nullable(ref("Progress")),
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
            "eta_at": TS,
            "last_step_at": TS,
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
        "properties": {"priority": PRIORITY},
    },
    "TaskList": {
        "type": "object", "required": ["tasks", "next_cursor"],
        "properties": {
            "tasks": {"type": "array", "items": ref("Task")},
            "next_cursor": {"type": ["string", "null"],
                            "description": "pass as ?cursor= for the next page; null at the end"},
        },
    },
    "AttemptList": {
        "type": "object", "required": ["task_id", "attempts"],
        "properties": {"task_id": {"type": "string"},
                       "attempts": {"type": "array", "items": ref("Attempt")}},
    },
    "Event": {
        "type": "object", "required": ["id", "ts", "type", "payload"],
        "properties": {
            "id": {"type": "integer"},
            "ts": TS,
            "type": {"type": "string", "description": "STATE_TRANSITION, SUBMIT, "
                     "RAY_STATUS_SYNC, RETRY_SCHEDULED, CANCEL_REQUESTED, PRIORITY_CHANGED, ..."},
            "payload": {"type": "object",
                        "description": "for transitions: from, to, reason; fields that "
                                       "quote the job or its owner's JobSpec (message, "
                                       "resolved) only to the task's owner and admins"},
        },
    },
    "EventList": {
        "type": "object", "required": ["task_id", "events"],
        "properties": {"task_id": {"type": "string"},
                       "events": {"type": "array", "items": ref("Event")}},
    },
    "CancelResult": {
        "type": "object", "required": ["task_id", "state"],
        "properties": {"task_id": {"type": "string"}, "state": ref("TaskState"),
                       "cancel_requested": {"type": "boolean"}},
    },
    "Queue": {
        "type": "object", "required": ["pending", "running", "fair_share", "next_cursor"],
        "properties": {"pending": {"type": "array", "items": ref("Task"),
                                   "description": "one page of the waiting tasks"},
                       "running": {"type": "array", "items": ref("Task")},
                       "blocked": {"type": "array", "items": ref("Task"),
                                   "description": "first page only: the oldest 100 tasks "
                                                  "waiting on other tasks (after), apart "
                                                  "from those waiting for GPUs"},
                       "next_cursor": {"type": ["string", "null"],
                                       "description": "the next page of pending tasks "
                                                      "(?cursor=); null: the last"},
                       "fair_share": {
                           "type": "array", "items": ref("FairShare"),
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
    **ACCOUNT_SCHEMAS,
    "Health": {
        "type": "object", "required": ["status", "scheduler"],
        "properties": {
            "status": {"type": "string", "enum": ["ok", "degraded", "scheduler stopped"],
                       "description": "degraded: the database cannot be written now "
                                      "(disk full, read-only, locked); the service resumes "
                                      "by itself once it can"},
            "reason": {"type": "string", "description": "why degraded"},
            "scheduler": nullable(ref("SchedulerHealth")),
        },
    },
}

SCHEMAS["SchedulerHealth"] = {
    "type": "object", "properties": {
        "alive": {"type": "boolean", "description": "scheduler thread running"},
        "ticks": {"type": "integer"},
        "errors": {"type": "integer", "description": "ticks that raised"},
        "last_tick_duration_s": {"type": ["number", "null"]},
        "last_error": {"type": ["string", "null"]},
    },
}
SCHEMAS["Readiness"] = {
    "type": "object", "required": ["status", "reasons", "read_s", "work_s"],
    "properties": {
        "status": {"type": "string", "enum": ["ready", "not ready"]},
        "reasons": {"type": "array", "items": {"type": "string"}},
        "read_s": {"type": ["number", "null"],
                   "description": "a probe read's latency through the read lane (null: "
                                  "past the deadline or failed)"},
        "work_s": {"type": ["number", "null"],
                   "description": "a no-op's latency through the work lane"},
    },
}

RESPONSES = {
    name: json_content(ref("Error"), text)
    for name, text in {
        "BadRequest": "Invalid input; details name each offending field",
        "Unauthorized": "Missing, malformed or wrong bearer token; or a revoked or expired "
                        "token, or a disabled user's (the message says which)",
        "Forbidden": "A valid token without the right (see x-argus-access), or a "
                     "priority above what the caller may ask for",
        "NotFound": "No such task, attempt, logs, user or token",
        "MethodNotAllowed": "Not possible on this resource (the message says why)",
        "Conflict": "The task is already terminal (or, for a priority change, no longer "
                    "waiting); the user exists or is disabled; too many tokens or webhooks",
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






PATH_RULE = ("an absolute, normalised path (no '..', no '//', a narrow character set) "
             "under one of the deployment's allowed roots (v2.jobspec.allowed_roots, "
             "default: the shared root); in the users' trees (<shared_root>/users/<name>/) "
             "only the submitter's own")


def _refer_to_path(schema: dict[str, Any], path: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each use of ``path`` made a reference to ``JobSpecPath``."""
    own = {k: v for k, v in schema.items() if k != "description"}
    if own == path:  # code_path: the same rule with its own description
        return {**ref("JobSpecPath"), **({"description": schema["description"]}
                                         if "description" in schema else {})}
    if "anyOf" in schema:
        return {**schema, "anyOf": [_refer_to_path(s, path) for s in schema["anyOf"]]}
    return schema


def jobspec_schemas() -> dict[str, Any]:
    """``JobSpec`` (a discriminated union on ``workload``) and one closed schema per
    workload (``JobSpecPpo``...): the common fields with the workload's own rules (is
    ``val_file`` required, does it take a ``trainer_device``). Paths: any normalised
    absolute path here, the deployment's roots in prose (``PATH_RULE``)."""
    base = jobspec_json_schema(("/",))
    path = base["properties"]["train_file"]
    common = {k: _refer_to_path(v, path) for k, v in base["properties"].items()}
    schemas: dict[str, Any] = {"JobSpecPath": {
        "type": "string", "pattern": path["pattern"], "maxLength": path["maxLength"],
        "description": PATH_RULE}}
    mapping = {}
    for name in WORKLOAD_NAMES:
        workload = WORKLOADS[name]
        title = f"JobSpec{name.capitalize()}"
        properties = {**common,
                      "workload": {"type": "string", "const": name},
                      "val_file": ref("JobSpecPath") if workload.needs_val_file
                      else nullable(ref("JobSpecPath")),
                      "trainer_device": nullable(ref("TrainerDevice")) if workload.takes_device
                      else {"type": "null", "description": "sft only"},
                      "on_unsatisfiable": {
                          **nullable(ref("OnUnsatisfiable")),
                          "description": common["on_unsatisfiable"].get("description", "")}}
        required = [*base["required"], *(["val_file"] if workload.needs_val_file else [])]
        schemas[title] = {"type": "object", "additionalProperties": False,
                          "required": required, "properties": properties,
                          "description": f"A {name} task"}
        mapping[name] = f"#/components/schemas/{title}"
    schemas["TrainerDevice"] = {"type": "string", "enum": list(TRAINER_DEVICES)}
    schemas["OnUnsatisfiable"] = {"type": "string", "enum": [o.value for o in OnUnsatisfiable]}
    schemas["JobSpec"] = {
        "oneOf": [ref(f"JobSpec{n.capitalize()}") for n in WORKLOAD_NAMES],
        "discriminator": {"propertyName": "workload", "mapping": mapping},
        "description": "A JobSpec: YAML (a flat mapping; no anchors, aliases, merge keys, "
                       "tags or complex keys) or a JSON object with the same fields.",
    }
    return schemas


SCHEMAS.update(jobspec_schemas())
