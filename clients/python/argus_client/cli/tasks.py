"""``argus submit | status | attempts | events | logs | cancel | priority | queue | list |
wait | metrics``: the task commands."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from argus_client.cli.context import AddParser, Command, Ctx, error_json, isatty, report
from argus_client.cli.exits import Exit, exit_for
from argus_client.cli.options import (
    add_key_option,
    add_parsable,
    add_table_options,
    add_wait_options,
    positive_float,
    positive_int,
)
from argus_client.cli.output import key_values, table
from argus_client.cli.pipelines import dependency_rows
from argus_client.cli.progress import progress_cell, progress_summary, wait_line
from argus_client.cli.terminal import safe_for_terminal
from argus_client.cli.waiting import follow, retry_note
from argus_client.errors import ArgusError

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
        ("labels", labels_text(task)),
        ("max_attempts", task.get("max_attempts") or "the configured default"),
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


def labels_text(task: dict[str, Any]) -> str | None:
    """A task's labels as ``key=value,key=value`` (None: none)."""
    return ",".join(f"{k}={v}" for k, v in sorted((task.get("labels") or {}).items())) or None


def label_filter(text: str) -> tuple[str, str]:
    """``--label KEY=VALUE``: the key and the value (the server checks their form)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def tasks_table(tasks: Sequence[dict[str, Any]], header: bool = True) -> str:
    """The tasks; a LABELS column before INFO when any of them has labels."""
    labelled = any(t.get("labels") for t in tasks)
    return table(
        ["TASK_ID", "USER", "STATE", "WORKLOAD", "GPUS", "ATTEMPT",
         *(["LABELS"] if labelled else []), "INFO"],
        [[t.get("task_id"), t.get("user"), t.get("state"), t.get("workload"), _gpus(t),
          _latest(t, "attempt_no"), *([labels_text(t) or "-"] if labelled else []),
          t.get("pending_reason") or t.get("error_summary")]
         for t in tasks],
        header=header,
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


def whose_hint(value: str | None) -> str | None:
    """The hint of list and queue when they show one user's tasks (None: everyone's)."""
    query = user_query(value)
    if query == "all":
        return None
    whose = "your" if query == "me" else f"{query}'s"
    return f"only {whose} tasks shown (--user all for everyone's)"


# -- commands -----------------------------------------------------------------------------


def cmd_submit(ctx: Ctx) -> int:
    """The new task's id alone where stdout is not a terminal (or ``-q``), else with its
    state; ``--wait``: then follow it as ``wait`` does (and exit as it does)."""
    a = ctx.args
    submitted = ctx.client.submit(sys.stdin.buffer.read() if a.file == "-" else Path(a.file),
                                  idempotency_key=a.idempotency_key,
                                  on_retry=retry_note(ctx))
    if not (a.wait and ctx.as_json):  # with --wait, --json prints the ended task only
        ctx.emit(submitted.raw, lambda d: d["task_id"] if ctx.parsable
                 else f"{d['task_id']}  {d['state']}")
    if not a.wait:
        return Exit.OK
    return follow_task(ctx, submitted.task_id, quiet=False,
                       show_end=ctx.as_json or not ctx.parsable)


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
        header=ctx.header,
    ))
    return Exit.OK


def cmd_events(ctx: Ctx) -> int:
    events = ctx.client.events(ctx.args.task_id)
    data = {"task_id": ctx.args.task_id, "events": [e.raw for e in events]}
    ctx.emit(data, lambda d: table(
        ["TIME", "EVENT", "DETAILS"],
        [[e.get("ts"), e.get("type"), _event_text(e)[:120]] for e in d["events"]],
        header=ctx.header,
    ))
    return Exit.OK


def cancel_text(d: dict[str, Any]) -> str:
    note = ("  (already ended: nothing to cancel)" if d.get("already_ended") else
            "  (stop requested)" if d.get("cancel_requested") else "")
    return f"{d['task_id']}  {d['state']}{note}"


def cmd_cancel(ctx: Ctx) -> int:
    """Cancel each task given, whatever the others do; the exit code is the first
    failure's (an ended task is no failure: it is shown as it ended). ``--json``: the
    answer (or the error) of one task, a list of them for several."""
    ids = ctx.args.task_ids
    answers: list[dict[str, Any]] = []
    code = Exit.OK
    for task_id in ids:
        try:
            data = ctx.client.cancel(task_id).raw
        except ArgusError as exc:
            if len(ids) == 1:
                raise
            answers.append(error_json(exc))
            if not ctx.as_json:
                report(exc, as_json=False, out=ctx.out, err=ctx.err)
            code = code or exit_for(exc)
            continue
        answers.append(data)
        if not ctx.as_json:
            ctx.emit(data, cancel_text)
    if ctx.as_json:
        ctx.out.write(json.dumps(answers[0] if len(ids) == 1 else answers, indent=2) + "\n")
    return code


def cmd_priority(ctx: Ctx) -> int:
    data = ctx.client.set_priority(ctx.args.task_id, ctx.args.priority).raw
    ctx.emit(data, lambda d: f"{d['task_id']}  priority {d['priority']}" + (
        f"  (queue position {d['queue_position']})" if d.get("queue_position") else ""))
    return Exit.OK


def cmd_queue(ctx: Ctx) -> int:
    data = ctx.client.queue(user=user_query(ctx.args.user), reason=ctx.args.reason).raw
    ctx.emit(data, queue_text)
    hint = whose_hint(ctx.args.user)
    if hint:
        ctx.hint(hint)
    return Exit.OK


def cmd_list(ctx: Ctx) -> int:
    """The tasks on stdout; on stderr, whose they are and the next page's cursor."""
    a = ctx.args
    data = ctx.client.list(state=a.state, limit=a.limit, cursor=a.cursor,
                           user=user_query(a.user), reason=a.reason,
                           labels=dict(a.label or ())).raw
    ctx.emit(data, lambda d: tasks_table(d["tasks"], header=ctx.header))
    hint = whose_hint(a.user)
    if hint:
        ctx.hint(hint)
    if data.get("next_cursor"):
        ctx.hint(f"more: --cursor {data['next_cursor']}")
    return Exit.OK


def cmd_metrics(ctx: Ctx) -> int:
    """A task's training curves: one row per step, a column per metric."""
    keys = [k for k in ctx.args.keys.split(",") if k] if ctx.args.keys else None
    data = ctx.client.metrics(ctx.args.task_id, keys).raw
    ctx.emit(data, lambda d: curves_table(d, header=ctx.header))
    keys = data.get("keys") or []
    if not ctx.args.keys and keys:
        more = f", ... ({len(keys)} in all)" if len(keys) > 8 else ""
        ctx.hint(f"this task's metrics: {', '.join(keys[:8])}{more} (pick with --keys a,b)")
    return Exit.OK


def curves_table(data: dict[str, Any], header: bool = True) -> str:
    """The chosen curves side by side, on their common step axis (``-``: no point)."""
    series = data.get("series") or []
    by_step: dict[int, dict[str, Any]] = {}
    for s in series:
        for step, value in zip(s["steps"], s["values"], strict=True):
            by_step.setdefault(step, {})[s["key"]] = f"{value:.6g}"
    return table(["STEP", *(s["key"] for s in series)],
                 [[step, *(row.get(s["key"]) for s in series)]
                  for step, row in sorted(by_step.items())], header=header)


def cmd_logs(ctx: Ctx) -> int:
    """The log; a task that has not started is ``NoLogYet`` (exit 8), not a 404."""
    a = ctx.args
    # a log is the job's own output: on a terminal, its control sequences are shown, not
    # obeyed (--raw: as they are)
    show = safe_for_terminal if not a.raw and isatty(ctx.out) else str
    if not a.follow:
        ctx.out.write(show(ctx.client.logs(a.task_id, attempt=a.attempt, tail=a.tail).text))
        return Exit.OK
    attempt = None
    for chunk in ctx.client.follow_logs(a.task_id, tail=a.tail, interval=a.interval,
                                        on_retry=retry_note(ctx)):
        if attempt is not None and chunk.attempt != attempt:
            ctx.note(f"attempt {chunk.attempt} started")
        attempt = chunk.attempt
        ctx.out.write(show(chunk.text))
        ctx.out.flush()
    return Exit.OK


def cmd_wait(ctx: Ctx) -> int:
    return follow_task(ctx, ctx.args.task_id, quiet=ctx.args.quiet, show_end=True)


def follow_task(ctx: Ctx, task_id: str, *, quiet: bool, show_end: bool) -> int:
    return follow(ctx, functools.partial(ctx.client.wait, task_id),
                  line=lambda t: wait_line(t.raw), show=show_task, quiet=quiet,
                  show_end=show_end)


# -- arguments ----------------------------------------------------------------------------


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
    submit = add("submit", cmd_submit, "submit a JobSpec (YAML or JSON) file; prints the "
                 "task's id (alone where stdout is not a terminal)", task=False)
    submit.add_argument(
        "file", help="JobSpec file (*.json: sent as JSON; else YAML), or - for YAML on stdin")
    add_parsable(submit)
    add_key_option(submit)
    add_wait_options(submit, with_flag=True)
    add("status", cmd_status, "show one task")
    add_table_options(add("attempts", cmd_attempts, "list the attempts of a task"))
    add_table_options(add("events", cmd_events,
                          "the history of a task (transitions, submits, retries)"))
    logs = add("logs", cmd_logs, "print the driver log of an attempt (exit 8: the task "
               "has not started yet)")
    logs.add_argument("--attempt", type=positive_int, help="attempt number (default: latest)")
    logs.add_argument("--tail", type=positive_int, default=2000,
                      help="last N lines (with --follow: to start with; default %(default)s)")
    logs.add_argument("--raw", action="store_true",
                      help="print control sequences as they are, even on a terminal")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing new lines (only what is new) until the task ends")
    logs.add_argument("--interval", type=positive_float, default=2.0, help=argparse.SUPPRESS)
    add("cancel", cmd_cancel, "cancel tasks (one that had ended: said so, exit 0)",
        task=False).add_argument("task_ids", nargs="+", metavar="task_id")
    add("priority", cmd_priority, "change the priority of a waiting task (higher is "
        "admitted first; above the users' allowance: admins only)").add_argument(
        "priority", type=priority, metavar="N", help="the new priority, e.g. -10 or 100")
    queue = add("queue", cmd_queue, "show pending and running tasks", task=False)
    queue.add_argument("--user", default="mine", help=user_help)
    queue.add_argument("--reason", metavar="KIND", help=reason_help)
    lst = add_table_options(add("list", cmd_list, "list tasks, newest first", task=False))
    lst.add_argument("--state", help="only tasks in this state")
    lst.add_argument("--user", default="mine", help=user_help)
    lst.add_argument("--reason", metavar="KIND", help=reason_help)
    lst.add_argument("--label", type=label_filter, action="append", metavar="KEY=VALUE",
                     help="only tasks with this JobSpec label (repeatable: every one)")
    lst.add_argument("--limit", type=positive_int, help="page size (server default 50)")
    lst.add_argument("--cursor", help="next_cursor of the previous page")
    wait = add("wait", cmd_wait, "wait until a task ends, showing each change (exit 0 only "
               "if it SUCCEEDED; network errors are retried until --timeout)")
    add_wait_options(wait)
    wait.add_argument("-q", "--quiet", action="store_true",
                      help="no progress line on stderr (state, step, rate, ETA) while waiting")
    metrics = add_table_options(add("metrics", cmd_metrics, "a task's training curves "
                                    "(one row per step)"))
    metrics.add_argument("--keys", metavar="K1,K2",
                         help="the metrics to show (default: a loss and a reward)")


