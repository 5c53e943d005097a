"""An HTTP proxy in front of Ray's job server that records submits and can hold them.

The service talks to Ray through it (``ray.address`` = the proxy). Every job submission
(``POST /api/jobs/``) is recorded with its ``submission_id`` once it is forwarded to Ray,
so a test can prove no attempt reached Ray twice. ``hold_submits()`` makes the next
submissions wait inside the proxy: the service sits in SUBMITTING for as long as the test
wants (to kill it right there), and ``release_submits()`` forwards them to Ray afterwards,
as a request already on the wire when the service died would arrive.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter

import aiohttp
from aiohttp import web

_HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}


class JobServerProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.forwarded_submits: Counter[str] = Counter()
        self.waiting_submits = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._gate: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="job-proxy")
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def hold_submits(self) -> None:
        self._call(self._make_gate)

    def release_submits(self) -> None:
        self._call(self._open_gate)

    def _call(self, fn) -> None:
        async def run() -> None:
            fn()
        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _make_gate(self) -> None:
        self._gate = asyncio.Event()

    def _open_gate(self) -> None:
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        self._open_gate()
        if self._runner is not None:
            await self._runner.cleanup()
        await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        is_submit = request.method == "POST" and request.path.rstrip("/") == "/api/jobs"
        if is_submit and self._gate is not None:
            gate = self._gate
            with self._lock:
                self.waiting_submits += 1
            await gate.wait()  # the client may be long gone by now: forward anyway
            with self._lock:
                self.waiting_submits -= 1
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        async with self._session.request(request.method, self.upstream + request.path_qs,
                                         data=body, headers=headers) as resp:
            payload = await resp.read()
            if is_submit:
                sid = json.loads(body).get("submission_id", "")
                with self._lock:
                    self.forwarded_submits[sid] += 1
            out_headers = {k: v for k, v in resp.headers.items()
                           if k.lower() not in _HOP_HEADERS | {"content-encoding"}}
            return web.Response(body=payload, status=resp.status, headers=out_headers)
