"""What the SDK raises: one hierarchy, every API error carrying its HTTP status and the
API's error ``code`` (``not_found``, ``quota_exceeded``...), message and details."""

from __future__ import annotations

from typing import Any


class ArgusError(Exception):
    """Base of every error the SDK raises; ``hint``: what to do about it, when known."""

    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class UsageError(ArgusError):
    """Nothing was sent: the call's own input is wrong (a URL without ``http://``, no
    token, a JobSpec file that cannot be read)."""


class ArgusConnectionError(ArgusError):
    """The server could not be reached (refused, DNS, timeout, TLS, or a proxy in front
    of it answering 502/503/504 with no Argus error): nothing of Argus answered."""


class NotArgusError(ArgusError):
    """Something answered at the URL, but not the Argus API (a wrong ``ARGUS_URL``):
    any answer that is not Argus's JSON."""


class ApiError(ArgusError):
    """The API answered with an error."""

    def __init__(self, status: int, code: str, message: str,
                 details: list[dict[str, Any]] | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []
        self.retry_after_s = retry_after_s

    def to_json(self) -> dict[str, Any]:
        """The API's own error object (what ``--json`` prints)."""
        return {"error": {"status": self.status, "code": self.code, "message": self.message,
                          "details": self.details, "hint": self.hint}}


class InvalidRequest(ApiError):
    """400 (and 413, 415): the request or the JobSpec is invalid; ``details`` name fields."""


class AuthError(ApiError):
    """401: no token, a wrong, revoked or expired one, or a disabled user's."""


class PermissionDenied(AuthError):
    """403: a valid token without the right to do this."""


class NotFound(ApiError):
    """404: no such task, attempt, log, user, token, pipeline or webhook."""


class NoLogYet(NotFound):
    """404 from ``logs``: the task exists but has not started (no attempt yet, or its
    attempt has written no log yet); ``state`` is the task's."""

    def __init__(self, status: int, code: str, message: str, state: str) -> None:
        super().__init__(status, code, message)
        self.state = state


class Conflict(ApiError):
    """409: the task is already terminal or no longer waiting; the user exists..."""


class RateLimited(ApiError):
    """429: a quota or the connection limit; ``retry_after_s`` says when to try again."""


class ServerError(ApiError):
    """5xx: the service failed or is unavailable now (``retry_after_s`` when it says)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest, 401: AuthError, 403: PermissionDenied, 404: NotFound,
    409: Conflict, 413: InvalidRequest, 415: InvalidRequest, 429: RateLimited,
}


def error_for(status: int, code: str, message: str, details: list[dict[str, Any]] | None = None,
              retry_after_s: float | None = None) -> ApiError:
    """The exception class that fits ``status``."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(status, code, message, details, retry_after_s)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: nothing answered, a 5xx, or a 429 (the service asks to come back)."""
    return isinstance(exc, ArgusConnectionError | ServerError | RateLimited)
