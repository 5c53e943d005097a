"""The Python SDK of the Argus task service (standard library only)."""

from argus_client.client import ArgusClient, WaitTimeout
from argus_client.errors import (
    ApiError,
    ArgusConnectionError,
    ArgusError,
    AuthError,
    Conflict,
    InvalidRequest,
    NotArgusError,
    NotFound,
    PermissionDenied,
    RateLimited,
    ServerError,
)
from argus_client.models import (
    Attempt,
    CancelResult,
    Event,
    LogChunk,
    Me,
    NewToken,
    Progress,
    Queue,
    Submitted,
    Task,
    TaskPage,
    Token,
    TokenList,
    Usage,
    User,
)

ConnectionError = ArgusConnectionError  # the short name; it shadows the builtin only here

__all__ = [
    "ApiError", "ArgusClient", "ArgusConnectionError", "ArgusError", "Attempt", "AuthError",
    "CancelResult", "Conflict", "ConnectionError", "Event", "InvalidRequest", "LogChunk",
    "Me", "NewToken", "NotArgusError", "NotFound", "PermissionDenied", "Progress", "Queue",
    "RateLimited", "ServerError", "Submitted", "Task", "TaskPage", "Token", "TokenList",
    "Usage", "User",
    "WaitTimeout",
]
