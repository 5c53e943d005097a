"""The exit codes of ``argus`` (documented in docs/client.md; scripts rely on them)."""

from __future__ import annotations

from enum import IntEnum

from argus_client.errors import (
    ArgusConnectionError,
    ArgusError,
    AuthError,
    NoLogYet,
    NotArgusError,
    NotFound,
    UsageError,
)


class Exit(IntEnum):
    OK = 0
    ERROR = 1  # the API refused the request (invalid, conflict, quota) or failed (5xx)
    USAGE = 2  # a bad command line, no token, a URL without http://, a file not readable
    NOT_FOUND = 3  # no such task, attempt, log, user, token, pipeline or webhook
    AUTH = 4  # 401 (token missing, wrong, revoked, expired) or 403 (not allowed)
    CONNECTION = 5  # nothing answered, or not an Argus API at ARGUS_URL
    TASK_FAILED = 6  # wait: the task (pipeline) ended FAILED or CANCELED
    TIMEOUT = 7  # wait: the task (pipeline) had not ended by --timeout
    NO_LOG_YET = 8  # logs: the task has not started (no attempt, or no log yet)


def exit_for(exc: ArgusError) -> Exit:
    if isinstance(exc, NoLogYet):
        return Exit.NO_LOG_YET
    if isinstance(exc, NotFound):
        return Exit.NOT_FOUND
    if isinstance(exc, AuthError):
        return Exit.AUTH
    if isinstance(exc, ArgusConnectionError | NotArgusError):
        return Exit.CONNECTION
    if isinstance(exc, UsageError):
        return Exit.USAGE
    return Exit.ERROR
