"""``argus pipeline submit FILE | status ID | wait ID | cancel ID | list``, and the lines
``argus status`` adds for a task with dependencies or in a pipeline (docs/pipelines.md)."""

from __future__ import annotations

import functools
import sys
from typing import Any

from argus_client.cli.context import AddParser, Ctx
from argus_client.cli.exits import Exit
from argus_client.cli.options import (
    add_key_option,
    add_parsable,
    add_table_options,
    add_wait_options,
)
from argus_client.cli.output import table
from argus_client.cli.waiting import follow, retry_note


def dependency_rows(task: dict[str, Any]) -> list[tuple[str, Any]]:
    """``argus status``'s extra lines: the pipeline a stage belongs to and the parents."""
    rows: list[tuple[str, Any]] = []
    pipeline = task.get("pipeline")
    if pipeline:
        rows.append(("pipeline", f"{pipeline['pipeline_id']} (stage {pipeline['stage']})"))
    after = task.get("after") or []
    if after:
        rows.append(("after", ", ".join(f"{a['condition']}:{a['task_id']} ({a['state']})"
                                        for a in after)))
    return rows


def show_pipeline(data: dict[str, Any]) -> str:
    head = (f"pipeline  {data['pipeline_id']}\nname      {data['name']}\n"
            f"user      {data['user']}\nstate     {data['state']}\n")
    stages = table(["STAGE", "TASK_ID", "STATE", "INFO"],
                   [[s["stage"], s["task_id"], s["state"] + (" (skipped)" if s["skipped"]
                                                             else ""), s["error_summary"]]
                    for s in data["stages"]])
    edges = ", ".join(f"{e['from']} -{e['condition']}-> {e['to']}" for e in data["edges"])
    return f"{head}\n{stages}\n\nedges: {edges or '-'}"


def pipeline_line(data: dict[str, Any]) -> str:
    """``pipeline wait``'s line: the pipeline's state and each stage's."""
    stages = ", ".join(f"{s['stage']} {s['state']}" for s in data.get("stages") or [])
    return f"{data['pipeline_id']}  {data['state']}  {stages}".rstrip()


def cmd_submit(ctx: Ctx) -> int:
    """The pipeline's id alone where stdout is not a terminal (or ``-q``), else with its
    stages' tasks; ``--wait``: then follow it as ``pipeline wait`` does."""
    a = ctx.args
    created = ctx.client.submit_pipeline(sys.stdin.buffer.read() if a.file == "-" else a.file,
                                         idempotency_key=a.idempotency_key,
                                         on_retry=retry_note(ctx))
    if not (a.wait and ctx.as_json):  # with --wait, --json prints the ended pipeline only
        ctx.emit(created.raw, lambda d: d["pipeline_id"] if ctx.parsable else
                 f"{d['pipeline_id']}  {d['state']}\n"
                 + table(["STAGE", "TASK_ID"], sorted(d["stages"].items())))
    if not a.wait:
        return Exit.OK
    return follow_pipeline(ctx, created.pipeline_id, quiet=False,
                           show_end=ctx.as_json or not ctx.parsable)


def cmd_status(ctx: Ctx) -> int:
    ctx.emit(ctx.client.pipeline(ctx.args.pipeline_id).raw, show_pipeline)
    return Exit.OK


def cmd_wait(ctx: Ctx) -> int:
    return follow_pipeline(ctx, ctx.args.pipeline_id, quiet=ctx.args.quiet, show_end=True)


def follow_pipeline(ctx: Ctx, pipeline_id: str, *, quiet: bool, show_end: bool) -> int:
    return follow(ctx, functools.partial(ctx.client.wait_pipeline, pipeline_id),
                  line=lambda p: pipeline_line(p.raw), show=show_pipeline, quiet=quiet,
                  show_end=show_end)


def cmd_cancel(ctx: Ctx) -> int:
    data = ctx.client.cancel_pipeline(ctx.args.pipeline_id).raw
    ctx.emit(data, lambda d: f"{d['pipeline_id']}  {d['state']}; canceled "
                             f"{len(d['canceled'])} stage(s)")
    return Exit.OK


def cmd_list(ctx: Ctx) -> int:
    data = ctx.client.pipelines(user=ctx.args.user, limit=ctx.args.limit).raw
    ctx.emit(data, lambda d: table(
        ["PIPELINE_ID", "NAME", "USER", "STATE", "CREATED"],
        [[p["pipeline_id"], p["name"], p["user"], p["state"], p["created_at"]]
         for p in d["pipelines"]], header=ctx.header))
    return Exit.OK


def register(sub: Any, add_parser: AddParser) -> None:
    """Register ``pipeline ACTION`` on the main parser's subparsers."""
    top = add_parser(sub, "pipeline", "submit and follow pipelines (DAGs of tasks)")
    actions = top.add_subparsers(dest="pipeline_command", required=True, metavar="ACTION")
    submit = add_parser(actions, "submit", "submit a pipeline document (YAML or JSON); "
                        "prints its id (alone where stdout is not a terminal)")
    submit.add_argument("file", help="pipeline file, or - for stdin")
    add_parsable(submit)
    add_key_option(submit)
    add_wait_options(submit, with_flag=True, interval=5.0)
    submit.set_defaults(run=cmd_submit)
    for name, fn, help_ in (("status", cmd_status, "show a pipeline's stages and edges"),
                            ("wait", cmd_wait, "wait until a pipeline ends, a line at each "
                             "change (exit 0 only if it SUCCEEDED)"),
                            ("cancel", cmd_cancel, "cancel every stage not ended (an ended "
                             "pipeline: nothing to do, exit 0)")):
        p = add_parser(actions, name, help_)
        p.add_argument("pipeline_id")
        p.set_defaults(run=fn)
        if name == "wait":
            add_wait_options(p, interval=5.0)
            p.add_argument("-q", "--quiet", action="store_true",
                           help="no progress line on stderr while waiting")
    lst = add_table_options(add_parser(actions, "list", "list pipelines, newest first"))
    lst.add_argument("--user", default="me", help="me, all (admins) or a user name")
    lst.add_argument("--limit", type=int, default=50, help="how many (1..500)")
    lst.set_defaults(run=cmd_list)
