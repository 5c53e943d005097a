"""One HTTP request to the API over ``urllib`` (standard library: the package installs
nothing and starts fast), and the mapping of an answer to a result or an exception."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from argus_client.errors import (
    ArgusConnectionError,
    ArgusError,
    NotArgusError,
    UsageError,
    error_for,
)

Opener = Callable[..., Any]  # urllib.request.urlopen's shape: (request, timeout=) -> response
API_PREFIX = "/api/v2"
GATEWAY = frozenset({502, 503, 504})  # a proxy's: the service behind it is down
BASE_HINT = "ARGUS_URL is the service's base URL, such as http://argus-host:8080"


def check_url(url: str) -> str:
    """``url`` without a trailing slash, or ``UsageError`` for one urllib cannot use."""
    parts = urllib.parse.urlsplit(url)
    if "://" not in url:
        raise UsageError(f"ARGUS_URL {url!r} has no scheme",
                         hint=f"add http:// (or https://): http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"ARGUS_URL {url!r} is not an http(s) URL", hint=BASE_HINT)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise UsageError(f"ARGUS_URL {url!r} has an invalid port", hint=BASE_HINT) from None
    return url.rstrip("/")


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class Transport:
    """Sends requests with the bearer token; raises the SDK's errors."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0,
                 opener: Opener | None = None) -> None:
        self.url = check_url(url)
        self.token = token
        self.timeout = timeout
        self._open = opener or urllib.request.urlopen

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                body: bytes | None = None, content_type: str | None = None,
                headers: Mapping[str, str] | None = None) -> Response:
        url = self.url + urllib.parse.quote(path, safe="/:")
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        req = urllib.request.Request(url, data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json, text/plain")
        if content_type:
            req.add_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with self._open(req, timeout=self.timeout) as resp:
                return Response(resp.status, dict(resp.headers.items()), resp.read())
        except urllib.error.HTTPError as exc:
            raise self._failure(method, path, exc.code, dict(exc.headers.items()),
                                exc.read()) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            # ValueError: a URL urllib cannot use (check_url catches the common ones)
            reason = getattr(exc, "reason", exc)
            raise ArgusConnectionError(f"cannot reach {self.url}: {reason}") from None

    def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = self.request(method, path, **kw)
        try:
            return resp.json()
        except ValueError:
            raise self.not_argus(method, path, f"answered {resp.status} with no JSON") from None

    def not_argus(self, method: str, path: str, what: str) -> NotArgusError:
        return NotArgusError(f"ARGUS_URL {self.url} does not look like an Argus API "
                             f"({method} {path} {what})", hint=self._url_hint())

    def _url_hint(self) -> str:
        """What to fix in ARGUS_URL: the ``/api/v2`` suffix when it has one."""
        path = urllib.parse.urlsplit(self.url).path
        for suffix in (API_PREFIX, "/api"):
            if path.endswith(suffix):
                return (f"drop the {suffix} suffix (argus adds {API_PREFIX} itself): "
                        f"ARGUS_URL={self.url.removesuffix(suffix)}")
        return BASE_HINT

    def _failure(self, method: str, path: str, status: int, headers: Mapping[str, str],
                 raw: bytes) -> ArgusError:
        """The error of a non-2xx answer: the API's own (its JSON error object), else the
        answer of something that is not Argus (a proxy's 502/503/504: the service behind
        it is unreachable, worth a retry; anything else: a wrong ARGUS_URL)."""
        retry_after = _seconds(headers.get("Retry-After"))
        try:
            err = json.loads(raw)["error"]
            error = error_for(status, str(err.get("code") or f"http_{status}"),
                              str(err["message"]), list(err.get("details") or []),
                              retry_after)
        except (ValueError, KeyError, TypeError, AttributeError):
            error = None
        if error is not None:
            if status == 404 and self._url_hint() != BASE_HINT:  # /api/v2/api/v2/...
                return self.not_argus(method, path, "answered 404")
            return error
        if status in GATEWAY:
            return ArgusConnectionError(
                f"cannot reach the Argus API behind {self.url}: {method} {path} answered "
                f"{status} from a proxy", hint="the service may be restarting; try again")
        return self.not_argus(method, path, f"answered {status}")


def _seconds(value: str | None) -> float | None:
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None
