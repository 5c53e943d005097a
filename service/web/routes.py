"""The route table of the API: which handler answers which route, and who may call it.
``service.web.app`` registers it; ``service.web.openapi`` generates the document's paths
from it (with each route's operation, ``service.web.operations``).
"""

from __future__ import annotations

import re

from service.web.api import accounts as a
from service.web.api import handlers as h
from service.web.api import health as hl
from service.web.api import logs as lg
from service.web.api import nodes as nd
from service.web.api import pipelines as pl
from service.web.api import webhooks as wh
from service.web.api.auth import Access
from service.web.api.middlewares import Handler

API = "/api/v2"
TASK_ID = "{task_id:[^/:]+}"
NAME = "{name:[^/:]+}"
TOKEN_ID = "{token_id:[^/:]+}"
HOOK_ID = "{hook_id:[^/:]+}"
PIPELINE_ID = "{pipeline_id:[^/:]+}"
NODE = "{node:[^/:]+}"

P, U, ADMIN = Access.PUBLIC, Access.USER, Access.ADMIN

# (method, path, handler, access): the whole API, in one table (the OpenAPI test compares
# it). Cancel, logs and a priority change (PATCH) are for the task's owner or an admin, a
# user's own records for that user or an admin, a webhook's deliveries and its deletion
# for its owner or an admin: their handlers check that on top of ``access``.
ROUTES: tuple[tuple[str, str, Handler, Access], ...] = (
    ("POST", f"{API}/tasks", h.submit_task, U),
    ("GET", f"{API}/tasks", h.list_tasks, U),
    ("GET", f"{API}/tasks/{TASK_ID}", h.get_task, U),
    ("PATCH", f"{API}/tasks/{TASK_ID}", h.set_task_priority, U),
    ("GET", f"{API}/tasks/{TASK_ID}/attempts", h.list_attempts, U),
    ("GET", f"{API}/tasks/{TASK_ID}/events", h.list_events, U),
    ("POST", f"{API}/tasks/{TASK_ID}:cancel", h.cancel_task, U),
    ("GET", f"{API}/tasks/{TASK_ID}/logs", lg.task_logs, U),
    ("GET", f"{API}/tasks/{TASK_ID}/metrics", h.task_metrics, U),
    ("GET", f"{API}/queue", h.queue, U),
    ("POST", f"{API}/pipelines", pl.create_pipeline, U),
    ("GET", f"{API}/pipelines", pl.list_pipelines, U),
    ("GET", f"{API}/pipelines/{PIPELINE_ID}", pl.get_pipeline, U),
    ("POST", f"{API}/pipelines/{PIPELINE_ID}/cancel", pl.cancel_pipeline, U),
    ("GET", f"{API}/me", a.me, U),
    ("GET", f"{API}/users", a.list_users, ADMIN),
    ("POST", f"{API}/users", a.create_user, ADMIN),
    ("GET", f"{API}/users/{NAME}", a.get_user, U),
    ("DELETE", f"{API}/users/{NAME}", a.delete_user, ADMIN),
    ("POST", f"{API}/users/{NAME}:disable", a.disable_user, ADMIN),
    ("POST", f"{API}/users/{NAME}:enable", a.enable_user, ADMIN),
    ("GET", f"{API}/users/{NAME}/tokens", a.list_tokens, U),
    ("POST", f"{API}/users/{NAME}/tokens", a.create_token, U),
    ("POST", f"{API}/users/{NAME}/tokens/{TOKEN_ID}:revoke", a.revoke_token, U),
    ("GET", f"{API}/usage", a.usage, U),
    ("POST", f"{API}/webhooks", wh.create_webhook, U),
    ("GET", f"{API}/webhooks", wh.list_webhooks, U),
    ("DELETE", f"{API}/webhooks/{HOOK_ID}", wh.delete_webhook, U),
    ("GET", f"{API}/webhooks/{HOOK_ID}/deliveries", wh.list_deliveries, U),
    ("GET", f"{API}/nodes", nd.list_nodes, U),
    ("GET", f"{API}/nodes/{NODE}/events", nd.node_events, U),
    ("POST", f"{API}/nodes/{NODE}:cordon", nd.cordon_node, ADMIN),
    ("POST", f"{API}/nodes/{NODE}:drain", nd.drain_node, ADMIN),
    ("POST", f"{API}/nodes/{NODE}:resume", nd.resume_node, ADMIN),
    ("GET", f"{API}/openapi.json", hl.openapi, P),
    ("GET", "/metrics", hl.metrics, U),
    ("GET", "/healthz", hl.healthz, P),
    ("GET", "/readyz", hl.readyz, P),
)


def path_template(path: str) -> str:
    """A route's path as aiohttp names its resource: ``{task_id:[^/:]+}`` -> ``{task_id}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)
