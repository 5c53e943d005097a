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

from argus_client.errors import ArgusConnectionError, NotArgusError, error_for

Opener = Callable[..., Any]  # urllib.request.urlopen's shape: (request, timeout=) -> response


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
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._open = opener or urllib.request.urlopen

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                body: bytes | None = None, content_type: str | None = None) -> Response:
        url = self.url + urllib.parse.quote(path, safe="/:")
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url, data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json, text/plain")
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with self._open(req, timeout=self.timeout) as resp:
                return Response(resp.status, dict(resp.headers.items()), resp.read())
        except urllib.error.HTTPError as exc:
            raise self._failure(method, path, exc.code, dict(exc.headers.items()),
                                exc.read()) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            # ValueError: a URL urllib cannot use at all (no scheme, a bad port)
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
                             f"({method} {path} {what})")

    def _failure(self, method: str, path: str, status: int, headers: Mapping[str, str],
                 raw: bytes) -> Exception:
        retry_after = _seconds(headers.get("Retry-After"))
        try:
            err = json.loads(raw)["error"]
            return error_for(status, str(err.get("code") or f"http_{status}"),
                             str(err["message"]), list(err.get("details") or []), retry_after)
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        if status >= 500:  # a proxy in front of the service (502, 504): worth a retry
            text = raw[:200].decode(errors="replace").strip()
            return error_for(status, f"http_{status}", f"HTTP {status}: {text}", None,
                             retry_after)
        return self.not_argus(method, path, f"answered {status}")


def _seconds(value: str | None) -> float | None:
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None
