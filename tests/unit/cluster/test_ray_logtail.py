"""Log-tail streams against a local websocket server shaped like Ray's dashboard
(``/api/jobs/<id>/logs/tail``: the log from its start, then what is written). Polls with
deadlines; no sleeps that hope."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from service.cluster.boundary import LogChunk
from service.cluster.logtail import LogTails

DEADLINE_S = 10.0


@dataclass
class Dashboard:
    """Scripted job logs: ``write`` appends and every open tail stream gets it."""

    url: str = ""
    logs: dict[str, str] = field(default_factory=dict)
    streams: list[tuple[str, web.WebSocketResponse]] = field(default_factory=list)
    connects: int = 0
    loop: asyncio.AbstractEventLoop | None = None

    def write(self, sid: str, text: str) -> None:
        assert self.loop is not None
        self.logs[sid] = self.logs.get(sid, "") + text

        async def send() -> None:
            for name, ws in list(self.streams):
                if name == sid and not ws.closed:
                    await ws.send_str(text)

        asyncio.run_coroutine_threadsafe(send(), self.loop).result(5)

    def end(self, sid: str) -> None:
        async def close() -> None:
            for name, ws in list(self.streams):
                if name == sid:
                    await ws.close()

        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)

    async def tail(self, request: web.Request) -> web.StreamResponse:
        sid = request.match_info["sid"]
        if sid not in self.logs:
            return web.Response(status=404, text=f"Job {sid} does not exist")
        self.connects += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        text = self.logs[sid]
        for i in range(0, len(text), 7):  # the log so far, in small batches
            await ws.send_str(text[i:i + 7])
        self.streams.append((sid, ws))
        async for _ in ws:
            pass
        return ws


@pytest.fixture
def dashboard() -> Iterator[Dashboard]:
    dash = Dashboard()
    app = web.Application()
    app.router.add_get("/api/jobs/{sid}/logs/tail", dash.tail)
    started = threading.Event()
    box: dict[str, object] = {}

    def serve() -> None:
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        dash.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        dash.loop = loop
        box["runner"] = runner
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    yield dash
    assert dash.loop is not None
    asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), dash.loop).result(10)
    dash.loop.call_soon_threadsafe(dash.loop.stop)
    thread.join(10)


def until(what: str, check: Callable[[], object]) -> object:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_streams_what_is_new_from_the_offset(dashboard: Dashboard) -> None:
    dashboard.write("j1", "line one\nline two\n")
    tails = LogTails(5.0)
    try:
        assert tails.read(dashboard.url, "j1", 0, 1000) == LogChunk("", 0, 0)  # connecting
        first = until("the log so far", lambda: (c := tails.read(
            dashboard.url, "j1", 0, 1000)) and c.text == "line one\nline two\n" and c)
        assert first.end == 18 and first.size == 18
        dashboard.write("j1", "line three\n")
        more = until("the new line", lambda: (c := tails.read(
            dashboard.url, "j1", 18, 1000)) and c.text and c)
        assert more == LogChunk("line three\n", 29, 29)
        capped = tails.read(dashboard.url, "j1", 20, 4)  # at most max_chars
        assert capped == LogChunk("ne t", 24, 29)
        assert dashboard.connects == 1  # one stream for all these reads
    finally:
        tails.close()


def test_a_new_stream_skips_to_the_stored_offset(dashboard: Dashboard) -> None:
    dashboard.write("j2", "old old old\n" * 50 + "new line\n")
    tails = LogTails(5.0)
    try:
        offset = len("old old old\n" * 50)  # where a restarted service left off
        chunk = until("the text past the offset", lambda: (c := tails.read(
            dashboard.url, "j2", offset, 1000)) and c.text and c)
        assert chunk.text == "new line\n" and chunk.end == offset + 9
    finally:
        tails.close()


def test_an_unknown_job_falls_back_to_whole_reads(dashboard: Dashboard) -> None:
    tails = LogTails(5.0)
    try:
        tails.read(dashboard.url, "nope", 0, 1000)
        until("the stream to give up", lambda: tails.read(dashboard.url, "nope", 0, 1000)
              is None)
        assert tails.read(dashboard.url, "nope", 0, 1000) is None  # not tried again
    finally:
        tails.close()


def test_an_ended_stream_hands_out_its_rest_then_starts_anew(dashboard: Dashboard) -> None:
    dashboard.write("j3", "a\n")
    tails = LogTails(5.0)
    try:
        until("the first line", lambda: (c := tails.read(dashboard.url, "j3", 0, 100))
              and c.text)
        dashboard.write("j3", "b\n")
        dashboard.end("j3")
        rest = until("the rest", lambda: (c := tails.read(dashboard.url, "j3", 2, 100))
                     and c.text and c)
        assert rest.text == "b\n"
        until("a second stream", lambda: tails.read(dashboard.url, "j3", 4, 100) is not None
              and dashboard.connects == 2)
    finally:
        tails.close()
