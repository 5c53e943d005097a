"""Blocking calls from coroutines, on a few dedicated threads, at a low cost per call.

``loop.run_in_executor`` with a ``ThreadPoolExecutor`` chains two futures through
callbacks and takes a condition and a semaphore per call; for the API's short SQLite
reads that hand-off cost more server CPU than the read itself (GET one task, in
``bench/bench_api.py``: ~90 us more per request than through an ``Offload``). An
``Offload`` is a FIFO queue served by ``threads`` threads that live as long as it does
(started by its first call): a thread takes the next call without any per-call set-up,
and hands the result back to the event loop with one ``call_soon_threadsafe``.

A call whose coroutine was cancelled before the call started is skipped; one already
running runs to its end (a write is never cut in half) and its result is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class Offload:
    """``await offload.run(fn, *args)``: ``fn(*args)`` on one of this offload's threads."""

    def __init__(self, name: str, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.name = name
        self._size = threads
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if not self._threads:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((loop, future, fn, args))
        return await future

    def close(self, timeout: float | None = 30.0) -> None:
        """Let the queued calls finish, stop the threads; later calls are refused."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads, self._threads = self._threads, []
        # From now on ``run`` finds no thread and may start none: it raises.
        for _ in threads:
            self._calls.put(None)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name} is closed")
            if self._threads:
                return
            for i in range(self._size):
                thread = threading.Thread(target=self._serve, name=f"{self.name}-{i}",
                                          daemon=True)
                thread.start()
                self._threads.append(thread)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            loop, future, fn, args = call
            if future.cancelled():
                continue  # nobody waits for it any more and it has not started
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the awaiting coroutine
                error = exc
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to tell
                loop.call_soon_threadsafe(_settle, future, result, error)
            del call, future, fn, args, result, error  # keep no reference while waiting
