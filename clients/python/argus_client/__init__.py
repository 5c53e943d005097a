"""The Python SDK of the Argus task service (standard library only).

    from argus_client import ArgusClient
    client = ArgusClient()                        # $ARGUS_URL, $ARGUS_API_TOKEN
    task = client.wait(client.submit("job.yaml").task_id, on_update=print)

Names load on first use (PEP 562): ``argus --help`` and ``argus completion`` start
without the HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "argus_client.client": ("ArgusClient", "WaitTimeout"),
    "argus_client.errors": ("ApiError", "ArgusConnectionError", "ArgusError", "AuthError",
                            "Conflict", "InvalidRequest", "NotArgusError", "NotFound",
                            "PermissionDenied", "RateLimited", "ServerError"),
    "argus_client.models": ("Attempt", "CancelResult", "Event", "LogChunk", "Me", "NewToken",
                            "Progress", "Queue", "Submitted", "Task", "TaskPage", "Token",
                            "TokenList", "Usage", "User"),
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted([*_WHERE, "ConnectionError"])


def __getattr__(name: str) -> Any:
    if name == "ConnectionError":  # the short name of ArgusConnectionError
        name = "ArgusConnectionError"
    if name not in _WHERE:
        raise AttributeError(f"module 'argus_client' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
