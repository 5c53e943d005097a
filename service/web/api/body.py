"""Request bodies: the size limit, the read deadline, and ``Expect: 100-continue``.

* A body over the limit is refused with 413 as soon as that is known: from its
  ``Content-Length`` before anything is read, or once the bytes read pass the limit.
* A compressed body (``Content-Encoding`` other than ``identity``) is refused with 415:
  a JobSpec is a few KB, and a 64 KB gzip bomb is 64 MB of zeros to inflate on the event
  loop. The server does not decompress (``http_server``: ``auto_decompress=False``), so
  nothing inflates them, not even when it drains a refused body.
* A body must arrive within ``body_timeout_s`` of the first read (408 otherwise): a
  client sending one byte every two seconds cannot hold a connection and a handler for
  as long as it likes.
* A body the parser cannot read (a malformed chunk, the connection closed half-way) is
  the client's error: 400, never a 500 with a traceback.
* ``Expect: 100-continue``: the client waits for ``100 Continue`` before it sends the
  body. ``expect_continue`` (every route's expect handler) answers it only for a body
  the route may read; for a ``Content-Length`` over the limit it sends nothing, so the
  handler's 413 is the first and only answer and the body is never sent.

A JSON body (``read_json_object``: users, tokens, a task's priority, a webhook) is a
small object read under the same rules with its own, smaller limit; JSON nested too deep
for the parser is a 400 like any other malformed JSON. ``read_shape`` then holds it to its
shape (``service.web.shapes``, declared once: the OpenAPI document states the same
model): unknown fields, then each field's rule, every problem with its field in the 400.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http import HttpVersion11
from pydantic import BaseModel

from service.usecases.shapes import check_shape
from service.web.api.deps import deps_of
from service.web.api.middlewares import ApiError, error_response

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
JSON_BODY_LIMIT = 16 * 1024
JSON_CONTENT_TYPE = "application/json"
M = TypeVar("M", bound=BaseModel)


async def read_body(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, at most ``limit`` bytes, read within ``timeout_s``."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ApiError(415, f"Content-Encoding {encoding[:40]!r} is not accepted; send the "
                            "body uncompressed")
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(413, f"request body is {request.content_length} bytes; limit {limit}")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                chunk = await request.content.read(limit + 1 - len(body))
                if not chunk:
                    return bytes(body)
                body += chunk
                if len(body) > limit:
                    raise ApiError(413, f"request body exceeds the limit of {limit} bytes")
    except TimeoutError as exc:
        raise ApiError(408, f"request body not received within {timeout_s:g} s "
                            f"({len(body)} bytes arrived)") from exc
    except ApiError:
        raise
    except (ConnectionError, web.RequestPayloadError) as exc:
        # aiohttp's parser found the body malformed (a bad chunk, a bad encoding) or the
        # client went away before its end
        raise ApiError(400, f"unreadable request body: {payload_error(exc)}") from exc


async def read_json_object(request: web.Request, *, required: bool) -> dict[str, Any]:
    """The request's JSON object, at most ``JSON_BODY_LIMIT`` bytes (413), read within
    the body timeout (408); ``{}`` for an empty body when not ``required`` (400 when it
    is). A body that is not ``application/json`` is a 415; one that is not a JSON object
    (or not JSON at all) a 400."""
    raw = await read_body(request, JSON_BODY_LIMIT, deps_of(request).settings.api_body_timeout_s)
    if not raw.strip():
        if required:
            raise ApiError(400, "a JSON object is required",
                           details=[{"field": "body", "message": "empty"}])
        return {}
    if request.content_type != JSON_CONTENT_TYPE:
        raise ApiError(415, f"content type {request.content_type[:60]!r} is not accepted; "
                            f"send {JSON_CONTENT_TYPE}")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        message = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ApiError(400, "request body is not valid JSON",
                       details=[{"field": "body", "message": message[:200]}]) from exc
    if not isinstance(doc, dict):
        raise ApiError(400, "request body must be a JSON object",
                       details=[{"field": "body", "message": f"got {type(doc).__name__}"}])
    return doc


async def read_shape(request: web.Request, shape: type[M], what: str, *,
                     required: bool = True, context: dict[str, Any] | None = None) -> M:
    """The request's JSON object held to ``shape`` (``read_json_object``'s rules first);
    a 400 "invalid ``what``" listing every problem."""
    found, details = check_shape(shape, await read_json_object(request, required=required),
                                 context)
    if found is None:
        raise ApiError(400, f"invalid {what}", details=details)
    return found


def payload_error(exc: BaseException) -> str:
    """What aiohttp says is wrong with a body, without the bytes it quotes: its messages
    read ``400, message:\n  Can not decode content-encoding: gzip`` or ``...chunk size:
    \n\n  b'zz'``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines and re.fullmatch(r"\d{3}, message:", lines[0]):
        lines = lines[1:]
    return (lines[0].rstrip(":") if lines else type(exc).__name__)[:120]


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """The expect handler of every route (it runs before the middlewares)."""
    expect = request.headers.get("Expect", "")
    if expect.lower() != "100-continue":
        return error_response(417, f"unsupported Expect header {expect[:100]!r}; only "
                                   "100-continue is understood", code="expectation_failed")
    limit = deps_of(request).settings.max_body_bytes
    too_large = request.content_length is not None and request.content_length > limit
    if request.version == HttpVersion11 and not too_large:
        await request.writer.write(CONTINUE)
        request.writer.output_size = 0  # the interim answer is not the response
    return None
