"""Server-sent events: tell an open console page that something changed.

The stream sends ``event: change`` when the tasks table changed (a task created, moved, or
its pending reason rewritten: ``Store.change_marker``, one indexed read per interval per
open page, never a Ray call), and a comment line as a heartbeat. It compares with the
marker the page was rendered at (``?since=``), so a change between the render and the
stream's start is sent as soon as the stream opens. The page's script then
fetches its live part again. A stream lives ``MAX_STREAM_S`` at most (the browser's
EventSource reconnects by itself), and ends at once when the session stops being valid,
so a revoked token stops updates within ``RECHECK_S``. When the service shuts down, every
stream ends at once (``CLOSING``), so open pages never hold up a graceful stop.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError

from service.api.deps import deps_of
from service.ui.pages import BOOTSTRAP_FP, CLOSING, HEADERS, parse_marker, signed_in
from service.ui.sessions import current

POLL_S = 1.0
HEARTBEAT_S = 15.0
RECHECK_S = 10.0
MAX_STREAM_S = 300.0


@signed_in
async def live(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={
        **HEADERS, "Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})
    await response.prepare(request)
    await response.write(b"retry: 2000\n\n")
    closing = request.app[CLOSING]
    # the browser going away (a new page, a closed tab) ends the stream: nothing to answer
    with contextlib.suppress(ConnectionResetError, ClientConnectionResetError):
        await _follow(request, response, closing)
    return response


async def _follow(request: web.Request, response: web.StreamResponse,
                  closing: asyncio.Event) -> None:
    """Write change events until the stream's time is up, the service closes or the
    session ends."""
    deps = deps_of(request)
    # from the marker the page was rendered at (``?since=``): a change made before the
    # stream started is then sent at once; without one, from now
    marker = parse_marker(request.query.get("since")) or await deps.store.change_marker()
    loop = asyncio.get_running_loop()
    started = last_beat = last_check = loop.time()
    while loop.time() - started < MAX_STREAM_S and not closing.is_set():
        try:
            await asyncio.wait_for(closing.wait(), POLL_S)
            break
        except TimeoutError:
            pass
        now = loop.time()
        if now - last_check >= RECHECK_S:
            last_check = now
            if await current(request, request.app[BOOTSTRAP_FP]) is None:
                await response.write(b"event: signedout\ndata: 1\n\n")
                break
        seen = await deps.store.change_marker()
        if seen != marker:
            marker = seen
            await response.write(f"event: change\ndata: {seen[0]}\n\n".encode())
            last_beat = now
        elif now - last_beat >= HEARTBEAT_S:
            await response.write(b": beat\n\n")
            last_beat = now
