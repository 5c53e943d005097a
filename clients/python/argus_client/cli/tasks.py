"""``argus submit | status | attempts | events | logs | cancel | priority | queue | list |
wait``: the task commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from argus_client.cli.context import AddParser, Command, Ctx
from argus_client.cli.exits import Exit
from argus_client.cli.output import key_values, table
from argus_client.cli.pipelines import dependency_rows
from argus_client.cli.progress import progress_cell, progress_summary, wait_line
from argus_client.cli.terminal import safe_for_terminal

if TYPE_CHECKING:
    from argus_client.models import Task
    from argus_client.retry import OnRetry

# -- rendering ----------------------------------------------------------------------------


def _latest(task: dict[str, Any], key: str) -> Any:
    return (task.get("latest_attempt") or {}).get(key)


def _gpus(task: dict[str, Any]) -> str:
    r = task.get("desired_resources") or {}
    return f"{r.get('nnodes', '?')}x{r.get('n_gpus_per_node', '?')}"


def estimate_text(task: dict[str, Any]) -> str | None:
    """A waiting task's start estimate and what it comes from (None: it does not wait)."""
    basis, start = task.get("estimate_basis"), task.get("estimated_start")
    if basis is None:
        return None
    if start is None:
        return "unknown (no start planned: no time limit to plan from, or too deep in the queue)"
    if basis == "run_history":
        return f"about {start} (from run history; by {task.get('estimated_start_bound')} " \
               "at the latest, from time limits)"
    return f"by {start} (from time limits)"


def estimate_cell(task: dict[str, Any]) -> str:
    """The queue's EST_START: ``~`` from run history (to the minute), ``<=`` from time
    limits (a bound), ``-`` unknown."""
    start = task.get("estimated_start")
    if start is None:
        return "-"
    return ("~" if task.get("estimate_basis") == "run_history" else "<=") + start


def show_task(task: dict[str, Any]) -> str:
    return key_values([
        ("task_id", task.get("task_id")),
        ("user", task.get("user")),
        ("state", task.get("state")),
        ("priority", task.get("priority")),
        ("max_runtime_s", task.get("max_runtime_s")),
        ("workload", task.get("workload")),
        ("description", task.get("description")),
        ("resources", _gpus(task) + " GPUs"),
        ("queue_position", task.get("queue_position")),
        ("pending_reason", task.get("pending_reason")),
        ("next_run_at", task.get("next_run_at")),
        ("estimated_start", estimate_text(task)),
        ("attempt", _latest(task, "attempt_no")),
        ("ray_submission_id", _latest(task, "ray_submission_id")),
        ("ray_status", _latest(task, "ray_status")),
        ("start_time", _latest(task, "start_time")),
        ("end_time", _latest(task, "end_time")),
        ("progress", progress_summary(task.get("progress") or {})),
        ("error_summary", task.get("error_summary")),
        *dependency_rows(task),
    ])


def tasks_table(tasks: Sequence[dict[str, Any]]) -> str:
    return table(
        ["TASK_ID", "USER", "STATE", "WORKLOAD", "GPUS", "ATTEMPT", "INFO"],
        [[t.get("task_id"), t.get("user"), t.get("state"), t.get("workload"), _gpus(t),
          _latest(t, "attempt_no"), t.get("pending_reason") or t.get("error_summary")]
         for t in tasks],
    )


def _event_text(event: dict[str, Any]) -> str:
    payload = dict(event.get("payload") or {})
    if event.get("type") == "STATE_TRANSITION":
        head = f"{payload.pop('from', '?')} -> {payload.pop('to', '?')}"
    else:
        head = ""
    rest = " ".join(f"{k}={v}" for k, v in sorted(payload.items()))
    return f"{head}  {rest}".strip()


def fair_share_text(rows: list[dict[str, Any]]) -> str:
    """The users' fair shares (served next first), as the scheduler last saw them."""
    if not rows:
        return ""
    return "\n\nFAIR SHARE (among equal priorities, the smallest weighted share goes first)\n" \
        + table(["USER", "GPUS", "SHARE", "WEIGHT", "WEIGHTED"],
                [[r.get("user"), r.get("gpus"), r.get("share"), r.get("weight"),
                  r.get("weighted_share")] for r in rows])


def queue_text(d: dict[str, Any]) -> str:
    return "PENDING\n" + table(
        ["POS", "PRI", "TASK_ID", "USER", "STATE", "GPUS", "EST_START", "KIND", "REASON"],
        [[t.get("queue_position"), t.get("priority"), t.get("task_id"), t.get("user"),
          t.get("state"), _gpus(t), estimate_cell(t),
          t.get("reason_kind") or "-", t.get("pending_reason")]
         for t in d["pending"]],
    ) + "\n\nRUNNING\n" + table(
        ["TASK_ID", "USER", "STATE", "GPUS", "RAY_SUBMISSION_ID", "RAY_STATUS", "PROGRESS"],
        [[t.get("task_id"), t.get("user"), t.get("state"), _gpus(t),
          _latest(t, "ray_submission_id"), _latest(t, "ray_status"),
          progress_cell(t.get("progress"))] for t in d["running"]],
    ) + blocked_text(d.get("blocked") or []) + fair_share_text(d.get("fair_share") or [])


def blocked_text(tasks: Sequence[dict[str, Any]]) -> str:
    """The tasks waiting on other tasks (``after``), apart from those waiting for GPUs."""
    if not tasks:
        return ""
    return "\n\nWAITING ON OTHER TASKS\n" + table(
        ["TASK_ID", "USER", "GPUS", "WAITING_ON"],
        [[t.get("task_id"), t.get("user"), _gpus(t), t.get("waiting_on")] for t in tasks])


def user_query(value: str | None) -> str:
    """``--user`` of list and queue: ``mine`` (the default) asks for ``me``."""
    return "me" if value in (None, "", "mine") else value


def _whose(value: str | None) -> str:
    query = user_query(value)
    if query == "all":
        return ""
    whose = "your" if query == "me" else f"{query}'s"
    return f"\n(only {whose} tasks; --user all for everyone's)"


# -- commands -----------------------------------------------------------------------------


def cmd_submit(ctx: Ctx) -> int:
    path = ctx.args.file
    submitted = ctx.client.submit(sys.stdin.buffer.read() if path == "-" else Path(path))
    ctx.emit(submitted.raw, lambda d: f"{d['task_id']}  {d['state']}")
    return Exit.OK


def cmd_status(ctx: Ctx) -> int:
    ctx.emit(ctx.client.get(ctx.args.task_id).raw, show_task)
    return Exit.OK


def cmd_attempts(ctx: Ctx) -> int:
    attempts = ctx.client.attempts(ctx.args.task_id)
    data = {"task_id": ctx.args.task_id, "attempts": [a.raw for a in attempts]}
    ctx.emit(data, lambda d: table(
        ["ATTEMPT", "RAY_SUBMISSION_ID", "RAY_STATUS", "FAILURE_KIND", "START", "END", "MESSAGE"],
        [[a.get("attempt_no"), a.get("ray_submission_id"), a.get("ray_status"),
          a.get("failure_kind"), a.get("start_time"), a.get("end_time"),
          (a.get("message") or "").splitlines()[0][:80] if a.get("message") else None]
         for a in d["attempts"]],
    ))
    return Exit.OK


def cmd_events(ctx: Ctx) -> int:
    events = ctx.client.events(ctx.args.task_id)
    data = {"task_id": ctx.args.task_id, "events": [e.raw for e in events]}
    ctx.emit(data, lambda d: table(
        ["TIME", "EVENT", "DETAILS"],
        [[e.get("ts"), e.get("type"), _event_text(e)[:120]] for e in d["events"]],
    ))
    return Exit.OK


def cmd_cancel(ctx: Ctx) -> int:
    data = ctx.client.cancel(ctx.args.task_id).raw
    ctx.emit(data, lambda d: f"{d['task_id']}  {d['state']}"
             + ("  (stop requested)" if d.get("cancel_requested") else ""))
    return Exit.OK


def cmd_priority(ctx: Ctx) -> int:
    data = ctx.client.set_priority(ctx.args.task_id, ctx.args.priority).raw
    ctx.emit(data, lambda d: f"{d['task_id']}  priority {d['priority']}" + (
        f"  (queue position {d['queue_position']})" if d.get("queue_position") else ""))
    return Exit.OK


def cmd_queue(ctx: Ctx) -> int:
    data = ctx.client.queue(user=user_query(ctx.args.user), reason=ctx.args.reason).raw
    ctx.emit(data, lambda d: queue_text(d) + _whose(ctx.args.user))
    return Exit.OK


def cmd_list(ctx: Ctx) -> int:
    a = ctx.args
    data = ctx.client.list(state=a.state, limit=a.limit, cursor=a.cursor,
                           user=user_query(a.user), reason=a.reason).raw
    ctx.emit(data, lambda d: tasks_table(d["tasks"]) + _whose(a.user) + (
        f"\n(more: --cursor {d['next_cursor']})" if d.get("next_cursor") else ""))
    return Exit.OK


def _retry_note(ctx: Ctx) -> OnRetry:
    return lambda exc, delay: ctx.note(f"{exc}; trying again in {delay:.0f}s")


def cmd_logs(ctx: Ctx) -> int:
    a = ctx.args
    # a log is the job's own output: on a terminal, its control sequences are shown, not
    # obeyed (--raw: as they are)
    isatty = getattr(ctx.out, "isatty", None)
    show = safe_for_terminal if not a.raw and isatty is not None and isatty() else str
    if not a.follow:
        ctx.out.write(show(ctx.client.logs(a.task_id, attempt=a.attempt, tail=a.tail).text))
        return Exit.OK
    attempt = None
    for chunk in ctx.client.follow_logs(a.task_id, tail=a.tail, interval=a.interval,
                                        on_retry=_retry_note(ctx)):
        if attempt is not None and chunk.attempt != attempt:
            ctx.note(f"attempt {chunk.attempt} started")
        attempt = chunk.attempt
        ctx.out.write(show(chunk.text))
        ctx.out.flush()
    return Exit.OK


def cmd_wait(ctx: Ctx) -> int:
    from argus_client.client import WaitTimeout

    a = ctx.args
    live = LiveLine(ctx.err, enabled=not a.quiet)
    try:
        task = ctx.client.wait(a.task_id, timeout=a.timeout, interval=a.interval,
                               on_update=live.show, on_retry=_retry_note(ctx))
    except WaitTimeout as exc:
        live.end()
        ctx.emit(exc.task.raw, show_task)
        ctx.note(str(exc))
        return Exit.TIMEOUT
    live.end()
    ctx.emit(task.raw, show_task)
    return Exit.OK if task.state == "SUCCEEDED" else Exit.TASK_FAILED


class LiveLine:
    """``argus wait``'s progress on stderr. On a terminal: one line redrawn in place, and
    a new line at each change of state (the history of states stays on screen); else (a
    log, a pipe) a line each time it changes."""

    def __init__(self, stream: TextIO, *, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and stream.isatty()
        self.last: str | None = None
        self.state: str | None = None

    def show(self, task: Task) -> None:
        line = wait_line(task.raw)
        if not self.enabled or line == self.last:
            return
        if self.tty:
            new_state = self.state is not None and task.state != self.state
            self.stream.write(("\n" if new_state else "\r\x1b[K") + line)
        else:
            self.stream.write(f"{line}\n")
        self.stream.flush()
        self.last, self.state = line, task.state

    def end(self) -> None:
        if self.tty and self.last is not None:
            self.stream.write("\n")
            self.stream.flush()


# -- arguments ----------------------------------------------------------------------------


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def priority(text: str) -> int:
    """An integer as typed (``-5``, ``+10``, ``0``); the server checks the range."""
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in ("+", "-") else stripped
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}")
    return int(stripped)


def register(sub: Any, add_parser: AddParser) -> None:
    def add(name: str, fn: Command, help_: str, task: bool = True) -> argparse.ArgumentParser:
        sp = add_parser(sub, name, help_)
        sp.set_defaults(run=fn)
        if task:
            sp.add_argument("task_id")
        return sp

    user_help = "NAME, mine or all (default: mine)"
    reason_help = ("only waiting tasks whose reason is of this kind: resources, never_fits, "
                   "user_limit, starvation_guard, retry_backoff, new, ... (the server "
                   "checks it)")
    add("submit", cmd_submit, "submit a JobSpec (YAML or JSON) file", task=False).add_argument(
        "file", help="JobSpec file (*.json: sent as JSON; else YAML), or - for YAML on stdin")
    add("status", cmd_status, "show one task")
    add("attempts", cmd_attempts, "list the attempts of a task")
    add("events", cmd_events, "the history of a task (transitions, submits, retries)")
    logs = add("logs", cmd_logs, "print the driver log of an attempt")
    logs.add_argument("--attempt", type=positive_int, help="attempt number (default: latest)")
    logs.add_argument("--tail", type=positive_int, default=2000,
                      help="last N lines (with --follow: to start with; default %(default)s)")
    logs.add_argument("--raw", action="store_true",
                      help="print control sequences as they are, even on a terminal")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing new lines (only what is new) until the task ends")
    logs.add_argument("--interval", type=positive_float, default=2.0, help=argparse.SUPPRESS)
    add("cancel", cmd_cancel, "cancel a task")
    add("priority", cmd_priority, "change the priority of a waiting task (higher is "
        "admitted first; above the users' allowance: admins only)").add_argument(
        "priority", type=priority, metavar="N", help="the new priority, e.g. -10 or 100")
    queue = add("queue", cmd_queue, "show pending and running tasks", task=False)
    queue.add_argument("--user", default="mine", help=user_help)
    queue.add_argument("--reason", metavar="KIND", help=reason_help)
    lst = add("list", cmd_list, "list tasks, newest first", task=False)
    lst.add_argument("--state", help="only tasks in this state")
    lst.add_argument("--user", default="mine", help=user_help)
    lst.add_argument("--reason", metavar="KIND", help=reason_help)
    lst.add_argument("--limit", type=positive_int, help="page size (server default 50)")
    lst.add_argument("--cursor", help="next_cursor of the previous page")
    wait = add("wait", cmd_wait, "wait until a task ends, showing each change (exit 0 only "
               "if it SUCCEEDED; network errors are retried until --timeout)")
    wait.add_argument("--timeout", type=positive_float, default=3600.0, metavar="S",
                      help="give up after S seconds (default: %(default)s)")
    wait.add_argument("--interval", type=positive_float, default=2.0, metavar="S",
                      help="seconds between polls (default: %(default)s)")
    wait.add_argument("-q", "--quiet", action="store_true",
                      help="no progress line on stderr (state, step, rate, ETA) while waiting")

