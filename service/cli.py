"""``argus``: the user's command line for the task service (standard library only).

    argus [--url URL] [--token-env NAME] [--json] COMMAND ...

Commands: submit FILE|-, status ID, attempts ID, events ID, logs ID [--attempt N] [--tail N]
[--follow], cancel ID, priority ID N, queue [--user U], list [--state S] [--user U] [--limit N]
[--cursor C], wait ID [--timeout S] [--quiet] (a live progress line on stderr); and
(``service.cli_accounts``) me, user ..., token ..., usage. ``--user`` of list and queue:
``mine`` (the default), ``all``, or a user's name.

The server URL comes from ``--url``, else ``$ARGUS_URL``, else http://127.0.0.1:8080; the
token from the environment variable ``ARGUS_API_TOKEN`` (or the one named by
``--token-env``), never from the command line. Output is a readable table, or the raw
JSON with ``--json``. Exit codes: 0 ok, 1 API or connection error (and, for ``wait``, a
task that ended other than SUCCEEDED or did not end in time), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from service.cli_progress import progress_cell, progress_summary, wait_line
from service.terminal import safe_for_terminal

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TOKEN_ENV = "ARGUS_API_TOKEN"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELED"})
FOLLOW_TAIL = 100_000
Opener = Callable[..., Any]  # urllib.request.urlopen's shape: (request, timeout=) -> response


class ApiFailure(Exception):
    """The server answered with an error (or could not be reached: status 0)."""

    def __init__(self, status: int, message: str, details: list[Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details or []


class Client:
    """A tiny JSON/text client of the ``/api/v2`` API on top of urllib."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0,
                 opener: Opener = urllib.request.urlopen) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._open = opener

    def call(self, method: str, path: str, *, query: dict[str, Any] | None = None,
             body: bytes | None = None, content_type: str | None = None) -> tuple[str, bytes]:
        """One request; returns (content type, body) or raises ApiFailure."""
        url = self.url + urllib.parse.quote(path, safe="/:")
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url, data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json, text/plain")
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with self._open(req, timeout=self.timeout) as resp:
                return resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as exc:
            raise _failure(exc.code, exc.read()) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiFailure(0, f"cannot reach {self.url}: {reason}") from None

    def json(self, method: str, path: str, **kw: Any) -> Any:
        _, raw = self.call(method, path, **kw)
        return json.loads(raw)

    def text(self, path: str, **kw: Any) -> str:
        _, raw = self.call("GET", path, **kw)
        return raw.decode("utf-8", errors="replace")


def _failure(status: int, raw: bytes) -> ApiFailure:
    try:
        err = json.loads(raw)["error"]
        return ApiFailure(status, str(err["message"]), list(err.get("details") or []))
    except (ValueError, KeyError, TypeError):
        return ApiFailure(status, f"HTTP {status}: {raw[:200].decode(errors='replace')}")


# -- output -----------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [headers, *cells]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _latest(task: dict[str, Any], key: str) -> Any:
    return (task.get("latest_attempt") or {}).get(key)


def _gpus(task: dict[str, Any]) -> str:
    r = task.get("desired_resources") or {}
    return f"{r.get('nnodes', '?')}x{r.get('n_gpus_per_node', '?')}"


def show_task(task: dict[str, Any]) -> str:
    rows = [
        ("task_id", task.get("task_id")),
        ("user", task.get("user")),
        ("state", task.get("state")),
        ("priority", task.get("priority")),
        ("max_runtime_s", task.get("max_runtime_s")),
        ("workload", task.get("workload")),
        ("resources", _gpus(task) + " GPUs"),
        ("queue_position", task.get("queue_position")),
        ("pending_reason", task.get("pending_reason")),
        ("next_run_at", task.get("next_run_at")),
        ("estimated_start", task.get("estimated_start")),
        ("attempt", _latest(task, "attempt_no")),
        ("ray_submission_id", _latest(task, "ray_submission_id")),
        ("ray_status", _latest(task, "ray_status")),
        ("start_time", _latest(task, "start_time")),
        ("end_time", _latest(task, "end_time")),
        ("progress", progress_summary(task.get("progress") or {})),
        ("error_summary", task.get("error_summary")),
    ]
    from service import cli_pipeline  # it builds on this module

    rows += cli_pipeline.task_rows(task)
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in rows)


def tasks_table(tasks: Sequence[dict[str, Any]]) -> str:
    return table(
        ["TASK_ID", "USER", "STATE", "WORKLOAD", "GPUS", "ATTEMPT", "INFO"],
        [[t.get("task_id"), t.get("user"), t.get("state"), t.get("workload"), _gpus(t),
          _latest(t, "attempt_no"), t.get("pending_reason") or t.get("error_summary")]
         for t in tasks],
    )


# -- commands ---------------------------------------------------------------------------


class Ctx:
    def __init__(self, client: Client, args: argparse.Namespace, out: TextIO,
                 sleep: Callable[[float], None], clock: Callable[[], float],
                 err: TextIO | None = None) -> None:
        self.client, self.args, self.out = client, args, out
        self.sleep, self.clock = sleep, clock
        self.err = sys.stderr if err is None else err
        self.as_json: bool = bool(getattr(args, "json", False))

    def emit(self, data: Any, render: Callable[[Any], str]) -> None:
        text = json.dumps(data, indent=2) if self.as_json else render(data)
        self.out.write(text + "\n")


def _task_path(task_id: str, suffix: str = "") -> str:
    return f"/api/v2/tasks/{task_id}{suffix}"


def cmd_submit(ctx: Ctx) -> int:
    path = ctx.args.file
    try:
        body = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise ApiFailure(0, f"cannot read {path}: {exc.strerror}") from None
    data = ctx.client.json("POST", "/api/v2/tasks", body=body,
                           content_type="application/yaml")
    ctx.emit(data, lambda d: f"{d['task_id']}  {d['state']}")
    return 0


def cmd_status(ctx: Ctx) -> int:
    ctx.emit(ctx.client.json("GET", _task_path(ctx.args.task_id)), show_task)
    return 0


def cmd_attempts(ctx: Ctx) -> int:
    data = ctx.client.json("GET", _task_path(ctx.args.task_id, "/attempts"))
    ctx.emit(data, lambda d: table(
        ["ATTEMPT", "RAY_SUBMISSION_ID", "RAY_STATUS", "FAILURE_KIND", "START", "END", "MESSAGE"],
        [[a.get("attempt_no"), a.get("ray_submission_id"), a.get("ray_status"),
          a.get("failure_kind"), a.get("start_time"), a.get("end_time"),
          (a.get("message") or "").splitlines()[0][:80] if a.get("message") else None]
         for a in d["attempts"]],
    ))
    return 0


def _event_text(event: dict[str, Any]) -> str:
    payload = dict(event.get("payload") or {})
    if event.get("type") == "STATE_TRANSITION":
        head = f"{payload.pop('from', '?')} -> {payload.pop('to', '?')}"
    else:
        head = ""
    rest = " ".join(f"{k}={v}" for k, v in sorted(payload.items()))
    return f"{head}  {rest}".strip()


def cmd_events(ctx: Ctx) -> int:
    data = ctx.client.json("GET", _task_path(ctx.args.task_id, "/events"))
    ctx.emit(data, lambda d: table(
        ["TIME", "EVENT", "DETAILS"],
        [[e.get("ts"), e.get("type"), _event_text(e)[:120]] for e in d["events"]],
    ))
    return 0


def cmd_cancel(ctx: Ctx) -> int:
    data = ctx.client.json("POST", _task_path(ctx.args.task_id, ":cancel"))
    ctx.emit(data, lambda d: f"{d['task_id']}  {d['state']}"
             + ("  (stop requested)" if d.get("cancel_requested") else ""))
    return 0


def cmd_priority(ctx: Ctx) -> int:
    a = ctx.args
    data = ctx.client.json("PATCH", _task_path(a.task_id),
                           body=json.dumps({"priority": a.priority}).encode(),
                           content_type="application/json")
    ctx.emit(data, lambda d: f"{d['task_id']}  priority {d['priority']}" + (
        f"  (queue position {d['queue_position']})" if d.get("queue_position") else ""))
    return 0


def user_query(value: str | None) -> str:
    """``--user`` of list and queue: ``mine`` (the default) asks for ``me``."""
    return "me" if value in (None, "", "mine") else value


def _whose(value: str | None) -> str:
    query = user_query(value)
    if query == "all":
        return ""
    whose = "your" if query == "me" else f"{query}'s"
    return f"\n(only {whose} tasks; --user all for everyone's)"


def cmd_queue(ctx: Ctx) -> int:
    query = {"user": user_query(ctx.args.user), "cursor": None}
    data = ctx.client.json("GET", "/api/v2/queue", query=query)
    while data.get("next_cursor"):  # the queue comes a page at a time
        query["cursor"] = data["next_cursor"]
        page = ctx.client.json("GET", "/api/v2/queue", query=query)
        data = {**page, "pending": data["pending"] + page["pending"]}
    ctx.emit(data, lambda d: "PENDING\n" + table(
        ["POS", "PRI", "TASK_ID", "USER", "STATE", "GPUS", "EST_START", "REASON"],
        [[t.get("queue_position"), t.get("priority"), t.get("task_id"), t.get("user"),
          t.get("state"), _gpus(t), t.get("estimated_start") or "-", t.get("pending_reason")]
         for t in d["pending"]],
    ) + "\n\nRUNNING\n" + table(
        ["TASK_ID", "USER", "STATE", "GPUS", "RAY_SUBMISSION_ID", "RAY_STATUS", "PROGRESS"],
        [[t.get("task_id"), t.get("user"), t.get("state"), _gpus(t),
          _latest(t, "ray_submission_id"), _latest(t, "ray_status"),
          progress_cell(t.get("progress"))] for t in d["running"]],
    ) + _fair_share(d.get("fair_share") or []) + _whose(ctx.args.user))
    return 0


def _fair_share(rows: list[dict[str, Any]]) -> str:
    """The users' fair shares (served next first), as the scheduler last saw them."""
    if not rows:
        return ""
    return "\n\nFAIR SHARE (among equal priorities, the smallest weighted share goes first)\n" \
        + table(["USER", "GPUS", "SHARE", "WEIGHT", "WEIGHTED"],
                [[r.get("user"), r.get("gpus"), r.get("share"), r.get("weight"),
                  r.get("weighted_share")] for r in rows])


def cmd_list(ctx: Ctx) -> int:
    a = ctx.args
    data = ctx.client.json("GET", "/api/v2/tasks",
                           query={"state": a.state, "limit": a.limit, "cursor": a.cursor,
                                  "user": user_query(a.user)})
    ctx.emit(data, lambda d: tasks_table(d["tasks"]) + _whose(a.user) + (
        f"\n(more: --cursor {d['next_cursor']})" if d.get("next_cursor") else ""))
    return 0


def cmd_logs(ctx: Ctx) -> int:
    a = ctx.args
    path = _task_path(a.task_id, "/logs")
    query = {"attempt": a.attempt or "latest", "tail": a.tail}
    # a log is the job's own output: on a terminal, its control sequences are shown, not
    # obeyed (--raw: as they are)
    isatty = getattr(ctx.out, "isatty", None)
    show = safe_for_terminal if not a.raw and isatty is not None and isatty() else str
    if not a.follow:
        ctx.out.write(show(ctx.client.text(path, query=query)))
        return 0
    query["tail"] = FOLLOW_TAIL
    seen = ""
    while True:
        state = ctx.client.json("GET", _task_path(a.task_id))["state"]
        try:
            text = ctx.client.text(path, query=query)
        except ApiFailure as exc:
            if exc.status != 404:  # 404: no attempt / no log yet
                raise
            text = seen
        ctx.out.write(show(text[len(seen):] if text.startswith(seen) else text))
        ctx.out.flush()
        seen = text
        if state in TERMINAL:
            return 0
        ctx.sleep(a.interval)


def cmd_wait(ctx: Ctx) -> int:
    a = ctx.args
    deadline = ctx.clock() + a.timeout
    live = _LiveLine(ctx.err, enabled=not a.quiet)
    while True:
        task = ctx.client.json("GET", _task_path(a.task_id))
        live.show(wait_line(task))
        if task["state"] in TERMINAL or ctx.clock() >= deadline:
            break
        ctx.sleep(min(a.interval, max(0.0, deadline - ctx.clock())))
    live.end()
    ctx.emit(task, show_task)
    if task["state"] not in TERMINAL:
        print(f"argus: {a.task_id} still {task['state']} after {a.timeout:g}s", file=sys.stderr)
        return 1
    return 0 if task["state"] == "SUCCEEDED" else 1


class _LiveLine:
    """``argus wait``'s progress on stderr: on a terminal one line redrawn in place; else
    (a log, a pipe) a line each time it changes."""

    def __init__(self, stream: TextIO, *, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and stream.isatty()
        self.last: str | None = None

    def show(self, line: str) -> None:
        if not self.enabled or line == self.last:
            return
        self.stream.write(f"\r\x1b[K{line}" if self.tty else f"{line}\n")
        self.stream.flush()
        self.last = line

    def end(self) -> None:
        if self.tty and self.last is not None:
            self.stream.write("\n")
            self.stream.flush()


# -- argument parsing -------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _priority(text: str) -> int:
    """An integer as typed (``-5``, ``+10``, ``0``); the server checks the range."""
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in ("+", "-") else stripped
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}")
    return int(stripped)


def build_parser() -> argparse.ArgumentParser:
    # --json is accepted before or after the command (SUPPRESS keeps one from hiding the other)
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                           help="print the raw JSON answer")
    p = argparse.ArgumentParser(prog="argus", parents=[json_flag],
                                description="Submit and follow Argus training tasks.",
                                epilog="exit codes: 0 ok, 1 API/connection error, 2 usage")
    p.add_argument("--url", default=os.environ.get("ARGUS_URL") or DEFAULT_URL,
                   help="API base URL (default: $ARGUS_URL or %(default)s)")
    p.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="NAME",
                   help="environment variable holding the API token (default: %(default)s)")
    p.add_argument("--http-timeout", type=_positive_float, default=30.0, metavar="S",
                   help="timeout of one HTTP request in seconds")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_parser(subparsers: Any, name: str, help_: str) -> argparse.ArgumentParser:
        return subparsers.add_parser(name, parents=[json_flag], help=help_,
                                     description=help_)

    def add(name: str, fn: Callable[[Ctx], int], help_: str, task: bool = True):
        sp = add_parser(sub, name, help_)
        sp.set_defaults(run=fn)
        if task:
            sp.add_argument("task_id")
        return sp

    user_help = "NAME, mine or all (default: mine)"

    add("submit", cmd_submit, "submit a JobSpec YAML file", task=False).add_argument(
        "file", help="JobSpec YAML file, or - for stdin")
    add("status", cmd_status, "show one task")
    add("attempts", cmd_attempts, "list the attempts of a task")
    add("events", cmd_events, "the history of a task (transitions, submits, retries)")
    logs = add("logs", cmd_logs, "print the driver log of an attempt")
    logs.add_argument("--attempt", type=_positive_int, help="attempt number (default: latest)")
    logs.add_argument("--tail", type=_positive_int, default=2000, help="last N lines")
    logs.add_argument("--raw", action="store_true",
                      help="print control sequences as they are, even on a terminal")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing new lines until the task ends")
    logs.add_argument("--interval", type=_positive_float, default=2.0, help=argparse.SUPPRESS)
    add("cancel", cmd_cancel, "cancel a task")
    add("priority", cmd_priority, "change the priority of a waiting task (higher is "
        "admitted first; above the users' allowance: admins only)").add_argument(
        "priority", type=_priority, metavar="N", help="the new priority, e.g. -10 or 100")
    queue = add("queue", cmd_queue, "show pending and running tasks", task=False)
    queue.add_argument("--user", default="mine", help=user_help)
    lst = add("list", cmd_list, "list tasks, newest first", task=False)
    lst.add_argument("--state", help="only tasks in this state")
    lst.add_argument("--user", default="mine", help=user_help)
    lst.add_argument("--limit", type=_positive_int, help="page size (server default 50)")
    lst.add_argument("--cursor", help="next_cursor of the previous page")
    wait = add("wait", cmd_wait, "wait until a task ends (exit 0 only if it SUCCEEDED)")
    wait.add_argument("--timeout", type=_positive_float, default=3600.0, metavar="S",
                      help="give up after S seconds (default: %(default)s)")
    wait.add_argument("--interval", type=_positive_float, default=2.0, metavar="S",
                      help="seconds between polls (default: %(default)s)")
    wait.add_argument("-q", "--quiet", action="store_true",
                      help="no progress line on stderr (state, step, rate, ETA) while waiting")
    from service import cli_accounts  # it builds on this module's Ctx and table

    cli_accounts.add_commands(sub, add_parser)
    from service import cli_pipeline

    cli_pipeline.add_commands(sub, add_parser)
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    opener: Opener = urllib.request.urlopen,
    out: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    err: TextIO | None = None,
) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    token = os.environ.get(args.token_env, "").strip()
    if not token:
        parser.error(f"no API token: set the environment variable {args.token_env}")
    client = Client(args.url, token, timeout=args.http_timeout, opener=opener)
    ctx = Ctx(client, args, out or sys.stdout, sleep, clock, err)
    try:
        return args.run(ctx)
    except ApiFailure as exc:
        prefix = f"HTTP {exc.status}: " if exc.status else ""
        print(f"argus: {prefix}{exc.message}", file=sys.stderr)
        for d in exc.details:
            if isinstance(d, dict) and "field" in d:
                print(f"  {d['field']}: {d.get('message', '')}", file=sys.stderr)
            else:
                print(f"  {d}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
