"""The HTTP server around the API app: connection limits and aiohttp's own errors.

``aiohttp.web.run_app`` serves an app with what the app cannot set itself: how long a
client may take, how many may connect, and what a request that never reaches the app
(the HTTP parser refused it) is answered. Here:

* **Headers**: a connection must deliver a request's complete headers within
  ``header_timeout_s`` of being opened (or of its previous response, on a keep-alive
  connection), else it is closed. This is aiohttp's keep-alive timer, which runs from
  the moment a connection is made and closes any connection still waiting for a
  complete request; so the same limit also ends an idle keep-alive connection.
* **Bodies**: ``body_timeout_s`` is enforced where a handler reads a body
  (``api.body.read_body``: 408). A body the handler does not read is drained for at
  most ``lingering_s`` after the answer, then the connection is closed.
* **Connections**: beyond ``max_connections`` open connections, a new one is answered
  ``503`` (the JSON error shape) and closed at once. One client address may hold at most
  ``max_connections_per_address`` of them (0: no limit); past that its new connection is
  answered ``429`` and closed, so one party (half-sent requests reconnecting, a page's
  streams) never fills the global cap for everyone else. Of an address's connections, at
  most ``max_half_open_per_address`` may be *half-open* (their first request's headers not
  yet complete): a new connection past that is refused with ``429`` too, so half-sent
  requests reconnecting from one address hold few places and cost little, while that
  address's working connections (keep-alive, streams) are still accepted.
* **No decompression**: aiohttp would inflate a ``gzip`` or ``deflate`` body on the
  event loop, even while draining one that was refused; bodies are refused compressed
  instead (``api.body``).
* **Parser errors** (a bad method, a malformed chunk, a header line over
  ``max_field_size``, a URL with raw non-ASCII bytes ...) answer the API's JSON error
  shape instead of aiohttp's text, with a message of our own (aiohttp's echoes the
  offending bytes), and are logged as one line, not a traceback: anyone who can reach
  the port can send them.

The hooks are aiohttp's ``RequestHandler`` (one per connection; ``handle_error`` builds
the answer to a request the parser refused or a handler that raised past every
middleware) and the ``Server`` that makes them; ``ArgusRunner`` is an ``AppRunner``
that serves the app through them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import BadHttpMethod, HttpProcessingError, LineTooLong

from service.config import Settings
from service.web.api.body import payload_error
from service.web.api.middlewares import error_response

log = logging.getLogger("argus.http")


@dataclass(frozen=True)
class ServerLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 512
    max_connections_per_address: int = 128  # 0: no limit
    max_half_open_per_address: int = 16  # 0: no limit
    lingering_s: float = 2.0  # drain an unread body this long after the answer
    max_line_size: int = 8190  # request line (aiohttp's default)
    max_field_size: int = 8190  # one header line (aiohttp's default)
    max_headers: int = 128  # header lines per request

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerLimits:
        return cls(header_timeout_s=settings.api_header_timeout_s,
                   body_timeout_s=settings.api_body_timeout_s,
                   max_connections=settings.api_max_connections,
                   max_connections_per_address=settings.api_max_connections_per_address,
                   max_half_open_per_address=settings.api_max_half_open_per_address)


def _refusal(status: int, reason: str, message: str) -> bytes:
    """The whole answer to a connection refused at once, as bytes on the wire."""
    resp = error_response(status, message, code="too_many_connections",
                          headers={"Retry-After": "1"})
    body = resp.body if isinstance(resp.body, bytes) else b""
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; "
            f"charset=utf-8\r\nContent-Length: {len(body)}\r\nRetry-After: 1\r\n"
            f"Connection: close\r\n\r\n")
    return head.encode("ascii") + body


@functools.cache
def _too_many_connections(limit: int) -> bytes:
    """The 503 answer to a connection over the global cap."""
    return _refusal(503, "Service Unavailable",
                    f"too many connections (limit {limit}); retry later")


@functools.cache
def _too_many_from_address(limit: int) -> bytes:
    """The 429 answer to a connection over its address's share."""
    return _refusal(429, "Too Many Requests",
                    f"too many connections from your address (limit {limit}, "
                    "max_connections_per_address); close some and retry")


@functools.cache
def _too_many_half_open(limit: int) -> bytes:
    """The 429 answer to a connection over its address's share of half-open ones."""
    return _refusal(429, "Too Many Requests",
                    f"too many connections from your address still sending their request "
                    f"headers (limit {limit}, max_half_open_per_address); finish or close "
                    "them and retry")


def parser_error_message(exc: BaseException | None, status: int) -> str:
    """What to tell a client whose request aiohttp refused, without echoing its bytes."""
    if isinstance(exc, LineTooLong):
        return "request line or a header line is too long"
    if isinstance(exc, BadHttpMethod):
        return "invalid HTTP method"
    if isinstance(exc, HttpProcessingError):
        # aiohttp's messages start with what is wrong ("Invalid character in chunk
        # size:", "Invalid char in url query:") and then quote the bytes: keep the first
        text = (exc.message or "").splitlines()
        first = text[0].strip().rstrip(":") if text else ""
        if ": b'" in first or ': b"' in first:
            first = first.split(": b", 1)[0]
        return f"malformed request: {first[:120]}" if first else "malformed request"
    if status == 504:
        return "request handler timed out"
    return "internal server error"


class ArgusRequestHandler(web.RequestHandler):
    """aiohttp's per-connection protocol with the connection cap and JSON errors."""

    def __init__(self, manager: web.Server, *, max_connections: int, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._max_connections = max_connections
        self._address: str | None = None  # counted in the server's per-address table
        self._half_open = False  # counted as half-open (no complete request yet)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        manager = self._manager
        answer = None
        if manager is not None and len(manager.connections) > self._max_connections:
            answer = _too_many_connections(self._max_connections)
            if isinstance(manager, ArgusServer):
                manager.refused()
        elif isinstance(manager, ArgusServer):
            peer = transport.get_extra_info("peername")
            self._address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
            if not manager.opened(self._address):
                answer = _too_many_from_address(manager.per_address)
            else:
                self._half_open = True
                if not manager.half_opened(self._address):
                    answer = _too_many_half_open(manager.half_open_per_address)
        if answer is not None:
            if isinstance(transport, asyncio.WriteTransport):
                transport.write(answer)
            self.force_close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # the parser counts each complete request (its headers) as it sees one
        if self._half_open and self._request_count:
            self._headers_done(self._manager)

    def _headers_done(self, manager: web.Server | None) -> None:
        self._half_open = False
        if self._address is not None and isinstance(manager, ArgusServer):
            manager.headers_done(self._address)

    def connection_lost(self, exc: BaseException | None) -> None:
        manager = self._manager  # (super() forgets it)
        super().connection_lost(exc)
        if self._half_open:
            self._headers_done(manager)
        if self._address is not None and isinstance(manager, ArgusServer):
            manager.closed(self._address)
            self._address = None

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        """A malformed body (a bad chunk, a bad gzip stream) raises again while aiohttp
        drains the rest of it after the answer went out; that is the client's error, told
        in one line rather than as a traceback."""
        exc = kwargs.get("exc_info")
        if isinstance(exc, web.RequestPayloadError | HttpProcessingError):
            log.info("closed a connection from %s: unreadable request body (%s)",
                     self.peername, payload_error(exc))
            return
        super().log_exception(*args, **kwargs)

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        text = parser_error_message(exc, status)
        if status >= 500:
            self.log_exception("error handling a request from %s", request.remote,
                               exc_info=exc)
        else:
            log.info("refused a request from %s: %s", request.remote, text)
        if request.writer.output_size > 0:  # an answer has started: nothing to add
            raise ConnectionError("a response was already sent; cannot send the error")
        resp = error_response(status, text)
        resp.force_close()
        return resp


def _release(counts: Counter[str], address: str) -> None:
    """One fewer for ``address``; an address at zero leaves the counter."""
    counts[address] -= 1
    if counts[address] <= 0:
        del counts[address]


class ArgusServer(web.Server):
    """``web.Server`` whose connections are ``ArgusRequestHandler``s.

    Connections refused over the cap are logged at most once per ``REFUSAL_LOG_S``, with
    their count: a flood of them must not become a flood of log lines.
    """

    REFUSAL_LOG_S = 10.0

    def __init__(self, *args: Any, max_connections: int, handler_kwargs: dict[str, Any],
                 max_connections_per_address: int = 0, max_half_open_per_address: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_connections = max_connections
        self.per_address = max_connections_per_address
        self.half_open_per_address = max_half_open_per_address
        self._half_open: Counter[str] = Counter()
        self._handler_kwargs = handler_kwargs
        self.refused_total = 0
        self.refused_per_address_total = 0
        self._by_address: Counter[str] = Counter()
        self._refused_unlogged = 0
        self._refusal_logged_at = float("-inf")

    def opened(self, address: str) -> bool:
        """Count a connection from ``address``; False when that passes the address's
        share (the connection is still counted until it is lost)."""
        self._by_address[address] += 1
        if self.per_address and self._by_address[address] > self.per_address:
            self.refused_per_address_total += 1
            self._log_refusal(f"from {address} over the limit of {self.per_address} "
                              "per address")
            return False
        return True

    def half_opened(self, address: str) -> bool:
        """Count a connection from ``address`` that has sent no complete request yet;
        False when that passes the address's share of them (still counted until its
        headers are done or it is lost)."""
        self._half_open[address] += 1
        if self.half_open_per_address and self._half_open[address] > self.half_open_per_address:
            self.refused_per_address_total += 1
            self._log_refusal(f"from {address} over the limit of "
                              f"{self.half_open_per_address} half-open per address")
            return False
        return True

    def headers_done(self, address: str) -> None:
        _release(self._half_open, address)

    def half_open_from(self, address: str) -> int:
        return self._half_open[address]

    def closed(self, address: str) -> None:
        _release(self._by_address, address)

    def open_from(self, address: str) -> int:
        return self._by_address[address]

    def refused(self) -> None:
        """Count a connection refused over the cap (and log, now and then)."""
        self.refused_total += 1
        self._log_refusal(f"over the limit of {self._max_connections} open connections")

    def _log_refusal(self, why: str) -> None:
        self._refused_unlogged += 1
        now = time.monotonic()
        if now - self._refusal_logged_at >= self.REFUSAL_LOG_S:
            log.warning("refused %d connection(s); the last %s", self._refused_unlogged, why)
            self._refused_unlogged = 0
            self._refusal_logged_at = now

    def __call__(self) -> ArgusRequestHandler:
        return ArgusRequestHandler(self, loop=asyncio.get_running_loop(),
                                   max_connections=self._max_connections,
                                   **self._handler_kwargs)


class ArgusRunner(web.AppRunner):
    """``AppRunner`` that serves its app through an ``ArgusServer`` under ``limits``."""

    def __init__(self, app: web.Application, limits: ServerLimits, *,
                 access_log_class: type[AbstractAccessLogger] = web.AccessLogger,
                 access_log: logging.Logger | None = None, **kwargs: Any) -> None:
        super().__init__(app, access_log_class=access_log_class, **kwargs)
        self.limits = limits
        self._handler_kwargs: dict[str, Any] = {
            "keepalive_timeout": limits.header_timeout_s,
            "lingering_time": limits.lingering_s,
            "max_line_size": limits.max_line_size,
            "max_field_size": limits.max_field_size,
            "max_headers": limits.max_headers,
            "auto_decompress": False,  # bodies are refused compressed (api.body)
            "access_log_class": access_log_class,
            "access_log": access_log,
        }

    async def _make_server(self) -> web.Server:
        # The app's own start-up (on_startup, freezing) and the request handling it
        # gives the server, then a server that makes our connection handlers.
        plain = await super()._make_server()
        return ArgusServer(plain.request_handler, request_factory=plain.request_factory,
                           handler_cancellation=plain.handler_cancellation,
                           max_connections=self.limits.max_connections,
                           max_connections_per_address=(
                               self.limits.max_connections_per_address),
                           max_half_open_per_address=self.limits.max_half_open_per_address,
                           handler_kwargs=self._handler_kwargs)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
SHUTDOWN_TIMEOUT_S = 5.0  # in-flight requests finish within this after a stop signal


async def serve_forever(runner: ArgusRunner, host: str, port: int, *, backlog: int = 128,
                        started: Callable[[ArgusRunner], None] | None = None,
                        stop: asyncio.Event | None = None) -> None:
    """Set up ``runner``, listen on ``host:port`` until ``stop`` is set (by SIGTERM or
    SIGINT, whose handlers this installs) or the task is cancelled, then clean up (the
    app's cleanup hooks run).

    The signal only sets an event: the cleanup runs here, in this task, while the loop and
    the app's background tasks (the console's change feed, webhook deliveries) still run,
    so each cleanup context stops its own task and every hook after it (the scheduler
    loop's stop, the store's close) runs. aiohttp's own signal handling raises
    ``GracefulExit`` out of the loop instead; ``asyncio.run`` then cancels every task
    before the cleanup, whose contexts meet their tasks already cancelled and fail
    (``CleanupError: [CancelledError(), CancelledError()]``), and the hooks after them
    never run."""
    stop = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, _stopping, stop, signum)
    try:
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port, backlog=backlog)
            await site.start()
            if started is not None:
                started(runner)
            await stop.wait()
        finally:
            await runner.cleanup()
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)


def _stopping(stop: asyncio.Event, signum: int) -> None:
    if not stop.is_set():
        log.info("%s: stopping (in-flight requests get %.0f s, then the loops stop and the "
                 "store closes)", signal.Signals(signum).name, SHUTDOWN_TIMEOUT_S)
    stop.set()


def run(app: web.Application, host: str, port: int, limits: ServerLimits, *,
        access_log_class: type[AbstractAccessLogger] = web.AccessLogger,
        access_log: logging.Logger | None = None) -> None:
    """Serve ``app`` until SIGTERM/SIGINT, then shut down gracefully (like
    ``web.run_app``, without its ``GracefulExit``: see ``serve_forever``)."""
    runner = ArgusRunner(app, limits, handle_signals=False, access_log_class=access_log_class,
                         access_log=access_log, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    asyncio.run(serve_forever(runner, host, port))
