"""Driver logs followed over Ray's log-tail websocket: what ``RayCluster.log_since`` reads.

Ray's Jobs API serves a driver log whole (``get_job_logs``), or streams it: the dashboard's
``/api/jobs/<id>/logs/tail`` websocket sends the log from its first line on, then each
batch of lines as the driver writes them (``JobSubmissionClient.tail_job_logs`` is its
client). Reading the whole log every few seconds would move a long run's log again and
again, so each followed job gets one stream here: the text arrives once, is kept from the
offset last asked for on (older text is dropped at each read), and ``read`` hands out what
came past an offset. A new stream (first read, a restarted service, a moved head) replays
the log up to the asked offset once, without keeping it.

``read`` returns None when no stream can answer (its connection failed: a job Ray does
not know, a proxy without websockets): the adapter then reads that job's log whole. An
offset older than what a stream keeps starts a new stream. Streams run on one
event loop in a daemon thread; one that ended (the job ended, the dashboard went away) is
dropped once its text has been read, and one not read for ``IDLE_S`` is closed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field

import aiohttp

from service.cluster.boundary import LogChunk

log = logging.getLogger(__name__)

IDLE_S = 300.0  # a stream nobody read for this long is closed
HEARTBEAT_S = 30.0


@dataclass
class _Tail:
    url: str
    base: int  # log offset (characters) of ``buf[0]``
    buf: str = ""
    seen: int = 0  # characters the stream has delivered, from the log's start
    ended: bool = False  # the stream closed (the job ended, or the connection broke)
    failed: bool = False  # it never connected: fall back to whole reads
    last_read: float = field(default_factory=time.monotonic)
    task: asyncio.Future | None = None

    def feed(self, text: str) -> None:
        start, self.seen = self.seen, self.seen + len(text)
        if self.seen > self.base + len(self.buf):
            self.buf += text[max(0, self.base + len(self.buf) - start):]


class LogTails:
    """One log-tail stream per followed job (thread-safe; see the module doc)."""

    def __init__(self, connect_timeout_s: float) -> None:
        self._timeout = connect_timeout_s
        self._lock = threading.Lock()
        self._tails: dict[str, _Tail] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None

    def read(self, job_server_url: str, sid: str, offset: int, max_chars: int
             ) -> LogChunk | None:
        """At most ``max_chars`` of ``sid``'s log from ``offset`` on, as streamed so far;
        None: no stream can say (read the log whole instead)."""
        now = time.monotonic()
        with self._lock:
            self._close_idle(now)
            tail = self._tails.get(sid)
            if tail is not None and (tail.url != job_server_url or offset < tail.base):
                self._drop(sid)  # another head, or text this stream no longer keeps
                tail = None
            if tail is None:
                self._tails[sid] = self._start(job_server_url, sid, offset)
                return LogChunk("", offset, offset)  # it replays up to offset first
            tail.last_read = now
            if tail.failed:
                return None  # kept (until idle) so that this job is not tried again
            tail.buf = tail.buf[offset - tail.base:] if offset <= tail.base + len(tail.buf) \
                else ""
            tail.base = max(offset, tail.base)
            text = tail.buf[:max_chars]
            if tail.ended and len(text) == len(tail.buf):
                self._drop(sid)  # all it had: the next read starts a new stream
            return LogChunk(text, offset + len(text), max(tail.seen, offset))

    def close(self) -> None:
        with self._lock:
            for sid in list(self._tails):
                self._drop(sid)
            loop, self._loop = self._loop, None
        if loop is not None:
            session = self._session
            if session is not None:
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)

    # -- inside the lock ------------------------------------------------------------------
    def _start(self, url: str, sid: str, offset: int) -> _Tail:
        tail = _Tail(url=url, base=offset)
        tail.task = asyncio.run_coroutine_threadsafe(self._follow(sid, tail), self._ensure())
        return tail

    def _drop(self, sid: str) -> None:
        tail = self._tails.pop(sid, None)
        if tail is not None and tail.task is not None:
            tail.task.cancel()

    def _close_idle(self, now: float) -> None:
        for sid in [s for s, t in self._tails.items() if now - t.last_read > IDLE_S]:
            self._drop(sid)

    def _ensure(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="ray-log-tails",
                             daemon=True).start()
            self._session = asyncio.run_coroutine_threadsafe(_session(), loop).result(5)
            self._loop = loop
        return self._loop

    # -- on the streams' loop -------------------------------------------------------------
    async def _follow(self, sid: str, tail: _Tail) -> None:
        assert self._session is not None  # made with the loop
        url = f"{tail.url.rstrip('/')}/api/jobs/{sid}/logs/tail"
        try:
            ws = await asyncio.wait_for(
                self._session.ws_connect(url, heartbeat=HEARTBEAT_S), self._timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.info("log tail of %s unavailable (%s): reading it whole", sid, exc)
            with self._lock:
                tail.failed = True
            return
        try:
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.TEXT:
                    with self._lock:
                        tail.feed(msg.data)
                elif msg.type is aiohttp.WSMsgType.ERROR:
                    break
        finally:
            await ws.close()
            with self._lock:
                tail.ended = True


async def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession()  # made on the streams' loop, which it belongs to
