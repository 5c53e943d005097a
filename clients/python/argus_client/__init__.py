"""The Python SDK of the Argus task service (standard library only).

    from argus_client import ArgusClient
    client = ArgusClient()                        # $ARGUS_URL, $ARGUS_API_TOKEN
    task = client.wait(client.submit("job.yaml").task_id,
                       on_update=lambda t: print(t.state))   # called on a change only

Names load on first use (PEP 562): ``argus --help`` and ``argus completion`` start
without the HTTP stack.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_HOMES = {
    "argus_client.client": ("ArgusClient", "WaitTimeout"),
    "argus_client.errors": ("ApiError", "ArgusConnectionError", "ArgusError", "AuthError",
                            "Conflict", "InvalidRequest", "NoLogYet", "NotArgusError",
                            "NotFound", "PermissionDenied", "RateLimited", "ServerError",
                            "UsageError"),
    "argus_client.models": ("Attempt", "CancelResult", "Curve", "Deliveries",
                            "DeletedWebhook", "Delivery", "Event", "LogChunk", "Me",
                            "Metrics", "NewToken", "NewWebhook", "Node", "NodeChanged",
                            "NodeEvent", "NodeEventList", "NodeList", "Pipeline",
                            "PipelineEdge",
                            "PipelineList", "PipelineStage", "PipelineSubmitted", "Progress",
                            "Queue", "Submitted", "Task", "TaskPage", "Token", "TokenList",
                            "Usage", "User", "Webhook", "WebhookList"),
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}
# Old names still importable one by one, but not by ``import *``: ``ConnectionError``
# would shadow the builtin of the same name in the importing module.
_DEPRECATED = {"ConnectionError": "ArgusConnectionError"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's (read only when asked)
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("argus-client")
        except PackageNotFoundError:  # pragma: no cover - run from a bare checkout
            return "unknown"
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        warnings.warn(f"argus_client.{name} is deprecated: use {new}", DeprecationWarning,
                      stacklevel=2)
        name = new
    if name not in _WHERE:
        raise AttributeError(f"module 'argus_client' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
