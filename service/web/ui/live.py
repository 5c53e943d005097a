"""Server-sent events: tell an open console page that something changed.

The stream sends ``event: change`` when the tasks changed (a task created, moved, or its
pending reason rewritten), and a comment line as a heartbeat. It waits on the process's
one ``ChangeFeed`` (``changes``): an open stream reads nothing from the database while
nothing changes. It compares with the change sequence the page was rendered at
(``?since=``), so a change between the render and the stream's start is sent as soon as
the stream opens. The page's script then fetches its live part again.

A stream lives ``MAX_STREAM_S`` at most (the browser's EventSource reconnects by
itself), and ends at once when the session stops being valid, so a revoked token stops
updates within ``RECHECK_S``. When the service shuts down, every stream ends at once
(``CLOSING``), so open pages never hold up a graceful stop.

One session and one user may hold only so many streams (``slots.StreamSlots``,
``v2.ui.max_streams_per_session`` / ``max_streams_per_user``): past that the stream is
answered 429 with the limit named, and the page falls back to its periodic refresh.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError

from service.web.ui.changes import ChangeFeed
from service.web.ui.pages import (
    BOOTSTRAP_FP,
    CLOSING,
    FEED,
    HEADERS,
    SIGNED,
    SLOTS,
    parse_marker,
    signed_in,
)
from service.web.ui.sessions import current, session_key

HEARTBEAT_S = 15.0
RECHECK_S = 10.0
MAX_STREAM_S = 300.0
REFUSED_RETRY_S = 30  # the page's own refresh interval


def _refused(refusal: str) -> web.Response:
    return web.Response(
        status=429, text=f"{refusal}; this page refreshes every {REFUSED_RETRY_S} s",
        headers={**HEADERS, "Retry-After": str(REFUSED_RETRY_S)})


async def live(request: web.Request) -> web.StreamResponse:
    """The stream; a session that already holds its share is refused before anything is
    read (a script re-opening streams in a loop costs the store nothing)."""
    key = session_key(request)
    if key is not None and (full := request.app[SLOTS].session_full(key)) is not None:
        return _refused(full)
    return await _live(request)


@signed_in
async def _live(request: web.Request) -> web.StreamResponse:
    signed = request[SIGNED]
    slots = request.app[SLOTS]
    user = signed.principal.name
    refusal = slots.acquire(signed.id_sha256, user)
    if refusal is not None:
        return _refused(refusal)
    try:
        # the starting point is read before the headers go out: a client that has seen
        # the stream open and then changes a task is told of that change
        feed = request.app[FEED]
        seq = parse_marker(request.query.get("since"))
        if seq is None:
            seq = await feed.latest()
        response = web.StreamResponse(headers={
            **HEADERS, "Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})
        await response.prepare(request)
        await response.write(b"retry: 2000\n\n")
        # the browser going away (a new page, a closed tab) ends the stream
        with contextlib.suppress(ConnectionResetError, ClientConnectionResetError):
            await _follow(request, response, feed, seq, request.app[CLOSING])
        return response
    finally:
        slots.release(signed.id_sha256, user)


async def _follow(request: web.Request, response: web.StreamResponse, feed: ChangeFeed,
                  seq: int, closing: asyncio.Event) -> None:
    """Write change events past ``seq`` until the stream's time is up, the service
    closes or the session ends. ``seq`` is the sequence the page was rendered at
    (``?since=``: a change made before the stream started is then sent at once), or
    the one read before the stream opened."""
    loop = asyncio.get_running_loop()
    started = last_beat = last_check = loop.time()
    while not closing.is_set():
        now = loop.time()
        left = MAX_STREAM_S - (now - started)
        if left <= 0:
            break
        if now - last_check >= RECHECK_S:
            last_check = now
            if await current(request, request.app[BOOTSTRAP_FP]) is None:
                await response.write(b"event: signedout\ndata: 1\n\n")
                break
        wait = min(left, RECHECK_S - (now - last_check), HEARTBEAT_S - (now - last_beat))
        seen = await feed.wait_past(seq, max(wait, 0.0))
        if closing.is_set():
            break
        if seen != seq:
            seq = seen
            await response.write(f"event: change\ndata: {seen}\n\n".encode())
            last_beat = loop.time()
        elif loop.time() - last_beat >= HEARTBEAT_S:
            await response.write(b": beat\n\n")
            last_beat = loop.time()
