"""``argus pipeline submit FILE | status ID | cancel ID | list``, and the lines ``argus
status`` adds for a task with dependencies or in a pipeline (docs/pipelines.md)."""

from __future__ import annotations

import sys
from typing import Any

from argus_client.cli.context import AddParser, Ctx
from argus_client.cli.output import table


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


def cmd_submit(ctx: Ctx) -> int:
    path = ctx.args.file
    data = ctx.client.submit_pipeline(sys.stdin.buffer.read() if path == "-" else path)
    ctx.emit(data, lambda d: f"{d['pipeline_id']}  {d['state']}\n" + table(
        ["STAGE", "TASK_ID"], sorted(d["stages"].items())))
    return 0


def cmd_status(ctx: Ctx) -> int:
    ctx.emit(ctx.client.pipeline(ctx.args.pipeline_id), show_pipeline)
    return 0


def cmd_cancel(ctx: Ctx) -> int:
    data = ctx.client.cancel_pipeline(ctx.args.pipeline_id)
    ctx.emit(data, lambda d: f"{d['pipeline_id']}  {d['state']}; canceled "
                             f"{len(d['canceled'])} stage(s)")
    return 0


def cmd_list(ctx: Ctx) -> int:
    data = ctx.client.pipelines(user=ctx.args.user, limit=ctx.args.limit)
    ctx.emit(data, lambda d: table(
        ["PIPELINE_ID", "NAME", "USER", "STATE", "CREATED"],
        [[p["pipeline_id"], p["name"], p["user"], p["state"], p["created_at"]]
         for p in d["pipelines"]]))
    return 0


def register(sub: Any, add_parser: AddParser) -> None:
    """Register ``pipeline ACTION`` on the main parser's subparsers."""
    top = add_parser(sub, "pipeline", "submit and follow pipelines (DAGs of tasks)")
    actions = top.add_subparsers(dest="pipeline_command", required=True, metavar="ACTION")
    submit = add_parser(actions, "submit", "submit a pipeline document (YAML or JSON)")
    submit.add_argument("file", help="pipeline file, or - for stdin")
    submit.set_defaults(run=cmd_submit)
    for name, fn, help_ in (("status", cmd_status, "show a pipeline's stages and edges"),
                            ("cancel", cmd_cancel, "cancel every stage not ended")):
        p = add_parser(actions, name, help_)
        p.add_argument("pipeline_id")
        p.set_defaults(run=fn)
    lst = add_parser(actions, "list", "list pipelines, newest first")
    lst.add_argument("--user", default="me", help="me, all (admins) or a user name")
    lst.add_argument("--limit", type=int, default=50, help="how many (1..500)")
    lst.set_defaults(run=cmd_list)
