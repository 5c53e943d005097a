"""Following a task or a pipeline to its end (``wait``, ``submit --wait``, ``pipeline
wait``): a line on stderr at each change, the exit code from how it ended."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from argus_client.cli.context import Ctx, isatty
from argus_client.cli.exits import Exit
from argus_client.retry import OnRetry


def retry_note(ctx: Ctx) -> OnRetry:
    return lambda exc, delay: ctx.note(f"{exc}; trying again in {delay:.0f}s")


def follow(ctx: Ctx, wait: Callable[..., Any], *, line: Callable[[Any], str],
           show: Callable[[dict[str, Any]], str], quiet: bool, show_end: bool) -> int:
    """``wait(timeout=, interval=, on_update=, on_retry=)`` (the SDK's ``wait`` or
    ``wait_pipeline`` of one id) with the command's ``--timeout`` and ``--interval``,
    ``line`` of each change on stderr (not ``quiet``); ``show_end``: then what ended, as
    ``show`` renders it, on stdout. 0 if it SUCCEEDED, 6 if it failed or was canceled,
    7 at the deadline."""
    from argus_client.client import WaitTimeout

    live = LiveLine(ctx.err, enabled=not quiet, render=line)
    try:
        ended = wait(timeout=ctx.args.timeout, interval=ctx.args.interval,
                     on_update=live.show, on_retry=retry_note(ctx))
    except WaitTimeout as exc:
        live.end()
        if show_end:
            ctx.emit(exc.task.raw, show)
        ctx.note(str(exc))
        return Exit.TIMEOUT
    live.end()
    if show_end:
        ctx.emit(ended.raw, show)
    return Exit.OK if ended.state == "SUCCEEDED" else Exit.TASK_FAILED


class LiveLine:
    """The progress of a wait on stderr. On a terminal: one line redrawn in place, and a
    new line at each change of state (the history of states stays on screen); else (a
    log, a pipe) a line each time it changes. ``render``: the line of what is followed
    (a task, a pipeline)."""

    def __init__(self, stream: TextIO, *, enabled: bool,
                 render: Callable[[Any], str]) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and isatty(stream)
        self.render = render
        self.last: str | None = None
        self.state: str | None = None

    def show(self, followed: Any) -> None:
        line = self.render(followed)
        if not self.enabled or line == self.last:
            return
        if self.tty:
            new_state = self.state is not None and followed.state != self.state
            self.stream.write(("\n" if new_state else "\r\x1b[K") + line)
        else:
            self.stream.write(f"{line}\n")
        self.stream.flush()
        self.last, self.state = line, followed.state

    def end(self) -> None:
        if self.tty and self.last is not None:
            self.stream.write("\n")
            self.stream.flush()
