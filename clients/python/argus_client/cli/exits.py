"""The exit codes of ``argus`` (documented in docs/client.md; scripts rely on them)."""

from __future__ import annotations

from enum import IntEnum

from argus_client.errors import (
    ArgusConnectionError,
    ArgusError,
    AuthError,
    NotArgusError,
    NotFound,
)


class Exit(IntEnum):
    OK = 0
    ERROR = 1  # the API refused the request (invalid, conflict, quota) or failed (5xx)
    USAGE = 2  # a bad command line, or no token in the environment
    NOT_FOUND = 3  # no such task, attempt, log, user or token
    AUTH = 4  # 401 (token missing, wrong, revoked, expired) or 403 (not allowed)
    CONNECTION = 5  # nothing answered, or not an Argus API at ARGUS_URL
    TASK_FAILED = 6  # wait: the task ended FAILED or CANCELED
    TIMEOUT = 7  # wait: the task had not ended by --timeout


def exit_for(exc: ArgusError) -> Exit:
    if isinstance(exc, NotFound):
        return Exit.NOT_FOUND
    if isinstance(exc, AuthError):
        return Exit.AUTH
    if isinstance(exc, ArgusConnectionError | NotArgusError):
        return Exit.CONNECTION
    return Exit.ERROR
