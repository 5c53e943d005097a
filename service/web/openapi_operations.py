"""Each operation's ``operationId`` and tag, and the tags: the names a generated client
gets (``service.web.openapi`` puts them on the document)."""

from __future__ import annotations

INTERNAL_TAG = "operations"


# (path, method) -> (operationId, tag): generated clients name their functions and
# modules from these
OPERATIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("/api/v2/tasks", "post"): ("submitTask", "tasks"),
    ("/api/v2/tasks", "get"): ("listTasks", "tasks"),
    ("/api/v2/tasks/{task_id}", "get"): ("getTask", "tasks"),
    ("/api/v2/tasks/{task_id}", "patch"): ("setTaskPriority", "tasks"),
    ("/api/v2/tasks/{task_id}/attempts", "get"): ("listAttempts", "tasks"),
    ("/api/v2/tasks/{task_id}/events", "get"): ("listEvents", "tasks"),
    ("/api/v2/tasks/{task_id}:cancel", "post"): ("cancelTask", "tasks"),
    ("/api/v2/tasks/{task_id}/logs", "get"): ("getTaskLogs", "tasks"),
    ("/api/v2/tasks/{task_id}/metrics", "get"): ("getTaskMetrics", "tasks"),
    ("/api/v2/queue", "get"): ("getQueue", "queue"),
    ("/api/v2/me", "get"): ("getMe", "users"),
    ("/api/v2/users", "get"): ("listUsers", "users"),
    ("/api/v2/users", "post"): ("createUser", "users"),
    ("/api/v2/users/{name}", "get"): ("getUser", "users"),
    ("/api/v2/users/{name}", "delete"): ("deleteUser", "users"),
    ("/api/v2/users/{name}:disable", "post"): ("disableUser", "users"),
    ("/api/v2/users/{name}:enable", "post"): ("enableUser", "users"),
    ("/api/v2/users/{name}/tokens", "get"): ("listTokens", "tokens"),
    ("/api/v2/users/{name}/tokens", "post"): ("createToken", "tokens"),
    ("/api/v2/users/{name}/tokens/{token_id}:revoke", "post"): ("revokeToken", "tokens"),
    ("/api/v2/usage", "get"): ("getUsage", "usage"),
    ("/api/v2/pipelines", "post"): ("submitPipeline", "pipelines"),
    ("/api/v2/pipelines", "get"): ("listPipelines", "pipelines"),
    ("/api/v2/pipelines/{pipeline_id}", "get"): ("getPipeline", "pipelines"),
    ("/api/v2/pipelines/{pipeline_id}/cancel", "post"): ("cancelPipeline", "pipelines"),
    ("/api/v2/webhooks", "post"): ("createWebhook", "webhooks"),
    ("/api/v2/webhooks", "get"): ("listWebhooks", "webhooks"),
    ("/api/v2/webhooks/{hook_id}", "delete"): ("deleteWebhook", "webhooks"),
    ("/api/v2/webhooks/{hook_id}/deliveries", "get"): ("listWebhookDeliveries", "webhooks"),
    ("/api/v2/openapi.json", "get"): ("getOpenapiDocument", INTERNAL_TAG),
    ("/metrics", "get"): ("getMetrics", INTERNAL_TAG),
    ("/healthz", "get"): ("getHealth", INTERNAL_TAG),
    ("/readyz", "get"): ("getReadiness", INTERNAL_TAG),
}


TAGS = [
    {"name": "tasks", "description": "submit, follow and steer training tasks"},
    {"name": "queue", "description": "what waits, in admission order, and what runs"},
    {"name": "users", "description": "who you are; users (admins)"},
    {"name": "tokens", "description": "API tokens"},
    {"name": "usage", "description": "GPU time per user and task"},
    {"name": "pipelines", "description": "DAGs of tasks with conditions; outputs passed on "
                                         "(docs/pipelines.md)"},
    {"name": "webhooks", "description": "signed notifications when tasks end (docs/webhooks.md)"},
    {"name": INTERNAL_TAG, "description": "for operators and their tools (x-internal: not "
                                          "part of a generated client)"},
]
