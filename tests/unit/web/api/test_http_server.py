"""The server around the app (``service.web.http_server``), spoken to over real sockets.

aiohttp's test client cannot send what these tests need (a bad method, a header line of
9 KB, raw bytes, half a request, 20 connections that never finish), so each test starts
an ``ArgusRunner`` on a free port and writes bytes itself. Limits are small so that a
timeout takes a fraction of a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from aiohttp import web

from service.cluster.fake import FakeCluster
from service.config import ConfigError, Settings
from service.config_load import settings_from_mapping
from service.engine.artifacts import Artifacts
from service.store.writer import Store
from service.web.app import create_app
from service.web.http_server import ArgusRunner, ArgusServer, ServerLimits, parser_error_message

TOKEN = "t0ken"
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
LIMITS = ServerLimits(header_timeout_s=0.5, body_timeout_s=0.5, max_connections=8,
                      lingering_s=0.2)


@dataclass
class Server:
    port: int
    runner: ArgusRunner
    store: Store

    async def exchange(self, data: bytes, *, wait_s: float = 5.0) -> bytes:
        """Send ``data``, then read until the server closes (or ``wait_s`` passes)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(data)
            await writer.drain()
            return await read_all(reader, wait_s)
        finally:
            writer.close()

    def connections(self) -> int:
        server = self.runner.server
        return 0 if server is None else len(server.connections)


async def read_all(reader: asyncio.StreamReader, wait_s: float) -> bytes:
    out = b""
    try:
        async with asyncio.timeout(wait_s):
            while chunk := await reader.read(65536):
                out += chunk
    except TimeoutError:
        out += b"<still open>"
    except ConnectionResetError:
        out += b"<reset>"
    return out


def status_and_json(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower(), raw[:300]
    return status, json.loads(body)


def assert_error(raw: bytes, status: int, code: str) -> str:
    got, body = status_and_json(raw)
    assert got == status, raw[:400]
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code, body
    return body["error"]["message"]


async def poll(predicate, timeout_s: float = 5.0) -> bool:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)
    return True


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, limits: ServerLimits) -> AsyncIterator[Server]:
    settings = Settings(shared_root=str(tmp_path / "shared"), max_body_bytes=4096,
                        api_body_timeout_s=limits.body_timeout_s)
    store = Store(str(tmp_path / "db.sqlite3"))
    app = create_app(settings, store, FakeCluster(), Artifacts(settings.shared_root),
                     token=TOKEN)
    runner = ArgusRunner(app, limits, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Server(port, runner, store)
    finally:
        await runner.cleanup()
        store.close()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path, LIMITS) as running:
        yield running


# -- requests aiohttp's parser refuses: the JSON error shape, one log line -----------------

PARSER_ERRORS = {
    "bad method": b"G@T /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "header line over 8 KB": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 9000
                             + b"\r\n\r\n",
    "request line over 8 KB": b"GET /healthz?" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
    "too many headers": b"GET /healthz HTTP/1.1\r\n" + b"".join(
        b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n",
    "bad chunk size": b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\n" + AUTH
                      + b"Content-Type: application/yaml\r\nTransfer-Encoding: chunked\r\n\r\n"
                      + b"zz\r\nabc\r\n0\r\n\r\n",
    "raw non-ASCII in the query": "GET /api/v2/tasks?limit=\uff11 HTTP/1.1\r\nHost: x\r\n".encode()
                                  + AUTH + b"\r\n",
    "bad HTTP version": b"GET /healthz HTTP/9.9\r\n\r\n",
    "both Content-Length and chunked": b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\n"
                                       b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"
                                       b"\r\n3\r\nabc\r\n0\r\n\r\n",
    "bad Content-Length": b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "TLS hello on the plain port": bytes.fromhex("160301020001") + b"\x00" * 40,
}


@pytest.mark.parametrize("raw", PARSER_ERRORS.values(), ids=PARSER_ERRORS.keys())
async def test_parser_errors_answer_json_and_log_one_line(server, raw, caplog):
    caplog.set_level(logging.DEBUG)
    answer = await server.exchange(raw)
    message = assert_error(answer, 400, "bad_request")
    assert "\\x" not in message and "aaaa" not in message, "the bytes are not echoed"
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"
    assert len([r for r in caplog.records if r.name == "argus.http"]) == 1


def test_parser_error_messages():
    from aiohttp.http_exceptions import BadHttpMessage, BadHttpMethod, LineTooLong

    assert parser_error_message(LineTooLong("x" * 9000, "8190"), 400) == (
        "request line or a header line is too long")
    assert parser_error_message(BadHttpMethod("G@T"), 400) == "invalid HTTP method"
    msg = parser_error_message(BadHttpMessage("Invalid header value char:\n\n  b'\\xff'"), 400)
    assert msg == "malformed request: Invalid header value char"
    msg = parser_error_message(BadHttpMessage("Bad thing: b'secret'"), 400)
    assert msg == "malformed request: Bad thing"
    assert parser_error_message(None, 500) == "internal server error"


async def test_an_exception_past_every_middleware_is_a_json_500(tmp_path, caplog):
    @web.middleware
    async def broken(request, handler):
        raise RuntimeError("boom")

    async def ok(request: web.Request) -> web.Response:
        return web.Response()

    app = web.Application(middlewares=[broken])
    app.router.add_get("/x", ok)
    runner = ArgusRunner(app, LIMITS, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        srv = Server(runner.addresses[0][1], runner, None)  # type: ignore[arg-type]
        answer = await srv.exchange(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    finally:
        await runner.cleanup()
    assert assert_error(answer, 500, "internal_error") == "internal server error"
    assert b"boom" not in answer and b"Traceback" not in answer
    assert any(r.exc_info for r in caplog.records), "a real bug is logged with its traceback"


# -- timeouts ---------------------------------------------------------------------------


async def test_incomplete_headers_are_closed_after_the_header_timeout(server):
    loop = asyncio.get_running_loop()
    started = loop.time()
    answer = await server.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n", wait_s=5)
    assert answer == b"", "closed without an answer"
    assert 0.4 <= loop.time() - started < 3


async def test_headers_one_byte_at_a_time_do_not_reset_the_timeout(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    loop = asyncio.get_running_loop()
    started = loop.time()
    closed_after = None
    for byte in b"GET /healthz HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n":
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            closed_after = loop.time() - started
            break
        if reader.at_eof() or (await read_all(reader, 0.05)) != b"<still open>":
            closed_after = loop.time() - started
            break
    writer.close()
    assert closed_after is not None and closed_after < 3, "the drip-feeding client was cut"


async def test_an_idle_keep_alive_connection_is_closed(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    loop = asyncio.get_running_loop()
    started = loop.time()
    answer = await read_all(reader, 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200")
    assert loop.time() - started < 3, "kept open past the idle limit"


async def test_a_slow_body_gets_408_within_the_body_timeout(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\n" + AUTH
                 + b"Content-Type: application/yaml\r\nContent-Length: 100\r\n\r\nwork")
    await writer.drain()
    loop = asyncio.get_running_loop()
    started = loop.time()
    answer = await read_all(reader, 5)
    writer.close()
    assert "not received within 0.5 s" in assert_error(answer, 408, "request_timeout")
    assert loop.time() - started < 3
    assert await poll(lambda: server.connections() == 0)


async def test_many_slow_clients_are_all_released(server):
    """20 connections (over the cap of 8) that never finish their headers: the ones over
    the cap are refused at once, the others are closed by the header timeout."""
    conns = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(20)]
    for _, writer in conns:
        writer.write(b"GET /healthz HTTP/1.1\r\nHo")
    answers = await asyncio.gather(*(read_all(r, 5) for r, _ in conns))
    for _, writer in conns:
        writer.close()
    refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
    assert len(refused) >= 20 - LIMITS.max_connections
    assert all(a == b"" for a in answers if a not in refused)
    assert await poll(lambda: server.connections() == 0)


# -- the connection cap -------------------------------------------------------------------


async def test_connections_over_the_cap_get_503_and_the_cap_frees(server, caplog):
    held = [await asyncio.open_connection("127.0.0.1", server.port)
            for _ in range(LIMITS.max_connections)]
    assert await poll(lambda: server.connections() == LIMITS.max_connections)
    for _ in range(3):
        answer = await server.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        message = assert_error(answer, 503, "too_many_connections")
    assert f"limit {LIMITS.max_connections}" in message
    assert b"Retry-After: 1" in answer and b"Connection: close" in answer
    assert server.runner.server.refused_total == 3  # type: ignore[union-attr]
    lines = [r for r in caplog.records if "over the limit" in r.getMessage()]
    assert len(lines) == 1, "refusals are logged now and then, not one line each"
    for _, writer in held:
        writer.close()
    assert await poll(lambda: server.connections() == 0)
    answer = await server.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close"
                                   b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200")


async def test_one_address_cannot_fill_the_cap_for_everyone(tmp_path):
    """Past its share, an address's new connections get 429 and close; another address
    is still served, and the share frees when the connections close."""
    limits = replace(LIMITS, max_connections=8, max_connections_per_address=3,
                     header_timeout_s=30)
    async with serving(tmp_path, limits) as server:
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
        assert await poll(lambda: server.connections() == 3)
        for _ in range(3):
            answer = await server.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            message = assert_error(answer, 429, "too_many_connections")
        assert "max_connections_per_address" in message and "limit 3" in message
        # another client (another address) is served while this one is at its share
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port,
                                                       local_addr=("127.0.0.2", 0))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await read_all(reader, 5)).startswith(b"HTTP/1.1 200")
        writer.close()
        assert server.runner.server.refused_per_address_total == 3  # type: ignore[union-attr]
        for _, w in held:
            w.close()
        assert await poll(lambda: server.runner.server.open_from("127.0.0.1") == 0)  # type: ignore[union-attr]
        answer = await server.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                       b"Connection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200")


async def test_one_address_holds_few_half_open_connections(tmp_path):
    """Connections still sending their first request's headers count against their
    address's half-open share: past it a new one gets 429 (an address with working
    connections is not refused), and the share frees as headers complete or connections
    close."""
    limits = replace(LIMITS, max_connections=16, max_connections_per_address=10,
                     max_half_open_per_address=2, header_timeout_s=30)
    async with serving(tmp_path, limits) as server:
        manager = server.runner.server
        assert isinstance(manager, ArgusServer)
        half = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        for _, writer in half:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
        assert await poll(lambda: manager.half_open_from("127.0.0.1") == 2)
        answer = await server.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        message = assert_error(answer, 429, "too_many_connections")
        assert "max_half_open_per_address" in message and "limit 2" in message
        assert await poll(lambda: manager.half_open_from("127.0.0.1") == 2)
        # another address is served meanwhile
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port,
                                                       local_addr=("127.0.0.2", 0))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await read_all(reader, 5)).startswith(b"HTTP/1.1 200")
        writer.close()
        # one finishes its request: it is no longer half-open, and stays open (keep-alive)
        first_reader, first_writer = half[0]
        first_writer.write(b"\r\n")
        assert (await first_reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert await poll(lambda: manager.half_open_from("127.0.0.1") == 1)
        assert manager.open_from("127.0.0.1") == 2
        answer = await server.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                       b"Connection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200")
        # a half-open one that closes frees its place too
        half[1][1].close()
        assert await poll(lambda: manager.half_open_from("127.0.0.1") == 0)
        first_writer.close()
        assert await poll(lambda: manager.open_from("127.0.0.1") == 0)


# -- limits from the configuration ---------------------------------------------------------


def test_limits_come_from_v2_api():
    settings = settings_from_mapping({"v2": {"api": {
        "header_timeout_s": 5, "body_timeout_s": 12.5, "max_connections": 100,
        "max_connections_per_address": 20, "max_half_open_per_address": 4}}})
    assert ServerLimits.from_settings(settings) == ServerLimits(
        header_timeout_s=5.0, body_timeout_s=12.5, max_connections=100,
        max_connections_per_address=20, max_half_open_per_address=4)
    assert ServerLimits.from_settings(Settings()) == ServerLimits()


@pytest.mark.parametrize("api, message", [
    ({"header_timeout_s": 0}, "v2.api.header_timeout_s: must be >= 0.1"),
    ({"body_timeout_s": "x"}, "v2.api.body_timeout_s: must be a number"),
    ({"max_connections": 0}, "v2.api.max_connections: must be >= 1"),
    ({"max_connections": 1.5}, "v2.api.max_connections: must be an integer"),
    ({"max_connections_per_address": -1},
     "v2.api.max_connections_per_address: must be >= 0"),
    ({"max_half_open_per_address": 1.5},
     "v2.api.max_half_open_per_address: must be an integer"),
])
def test_bad_limits_are_refused(api, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        settings_from_mapping({"v2": {"api": api}})


# -- requests the app sees, in bytes no client library sends ---------------------------------


@pytest.mark.parametrize("token", [b"\xff\xfe", b"t0k\xe9n", "\u0442\u043e\u043a".encode(),
                                   b"\x80" * 100])
async def test_any_authorization_bytes_are_a_wrong_token(server, token, caplog):
    caplog.set_level(logging.DEBUG)
    answer = await server.exchange(b"GET /api/v2/queue HTTP/1.1\r\nHost: x\r\nConnection: "
                                   b"close\r\nAuthorization: Bearer " + token + b"\r\n\r\n")
    assert assert_error(answer, 401, "unauthorized") == "invalid token"
    assert not [r for r in caplog.records if r.exc_info]


async def test_expect_continue_is_not_sent_for_a_body_over_the_limit(server):
    answer = await server.exchange(
        b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Content-Type: application/"
        b"yaml\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n", wait_s=3)
    assert b"100 Continue" not in answer
    assert "5000000 bytes; limit 4096" in assert_error(answer, 413, "payload_too_large")


async def test_expect_continue_for_a_body_within_the_limit(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + AUTH
                 + b"Content-Type: application/yaml\r\nContent-Length: 8\r\n"
                 b"Expect: 100-continue\r\n\r\n")
    await writer.drain()
    interim = await reader.readuntil(b"\r\n\r\n")
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"a: [b\n\n\n")
    answer = await read_all(reader, 5)
    writer.close()
    assert_error(answer, 400, "bad_request")  # the body was read and judged


async def test_an_unknown_expectation_is_417(server):
    answer = await server.exchange(
        b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Content-Type: application/"
        b"yaml\r\nContent-Length: 3\r\nExpect: 200-ok\r\n\r\nabc", wait_s=3)
    assert "200-ok" in assert_error(answer, 417, "expectation_failed")


@pytest.mark.parametrize("encoding, body", [
    (b"gzip", b"workload: ppo\n"),  # not gzip at all
    (b"deflate", b"\x78\x9c" + b"\xff" * 20),  # a broken stream
    (b"gzip", gzip.compress(b"#" * (8 << 20))),  # a bomb: 8 MiB of comments in 8 KB
    (b"br", b"x"),
])
async def test_compressed_bodies_are_refused_uninflated(server, encoding, body, caplog):
    caplog.set_level(logging.DEBUG)
    loop = asyncio.get_running_loop()
    started = loop.time()
    answer = await server.exchange(
        b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + AUTH
        + b"Content-Type: application/yaml\r\nContent-Encoding: " + encoding
        + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    message = assert_error(answer, 415, "unsupported_media_type")
    assert "send the body uncompressed" in message
    assert loop.time() - started < 1.0, "nothing was inflated"
    assert await poll(lambda: server.connections() == 0)
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a bad body"


async def test_a_bad_chunk_mid_body_costs_no_traceback(server, caplog):
    """The handler reads the first chunk; the next one is malformed. aiohttp's parser
    does not pass that to the reader (the body timeout answers); whatever it logs is
    one line."""
    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\n" + AUTH
                 + b"Content-Type: application/yaml\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"3\r\nabc\r\n")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(b"zz\r\nabc\r\n0\r\n\r\n")
    await writer.drain()
    answer = await read_all(reader, 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 4"), answer[:200]
    assert await poll(lambda: server.connections() == 0)
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_client_gone_mid_body_costs_no_traceback(server, caplog):
    caplog.set_level(logging.DEBUG)
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /api/v2/tasks HTTP/1.1\r\nHost: x\r\n" + AUTH
                 + b"Content-Type: application/yaml\r\nContent-Length: 1000\r\n\r\nwork")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    assert await poll(lambda: server.connections() == 0)
    assert not [r for r in caplog.records if r.exc_info]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
