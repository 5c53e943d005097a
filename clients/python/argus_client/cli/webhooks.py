"""``argus webhook ...``: a user's webhooks from the command line.

    argus webhook add URL --events task.failed,task.succeeded [--format standard|slack]
    argus webhook list [--user NAME|all]      (admins: everyone's by default)
    argus webhook rm ID
    argus webhook deliveries ID [--limit N]

The signing secret of a new hook is printed once, on its own line (the reminder that it
is shown only then goes to stderr).
"""

from __future__ import annotations

import argparse
from typing import Any

from argus_client.cli.context import AddParser, Ctx
from argus_client.cli.exits import Exit
from argus_client.cli.options import add_table_options
from argus_client.cli.output import table

EVENT_TYPES = ("task.succeeded", "task.failed", "task.canceled", "task.preempted",
               "task.time_limit", "task.retried", "pipeline.ended")
# cluster-wide, for admins only (the server refuses them to anyone else)
NODE_EVENT_TYPES = ("node.cordoned", "node.drained", "node.resumed", "node.quarantined")


def _events(text: str) -> list[str]:
    names = [e.strip() for e in text.split(",") if e.strip()]
    if not names:
        raise argparse.ArgumentTypeError("at least one event type")
    if names == ["all"]:
        return list(EVENT_TYPES)
    return names  # the server names the unknown ones


SECRET_NOTE = "the signing secret is shown this once: keep it now (receivers verify " \
              "webhook-signature with it)"


def created_text(hook: dict[str, Any]) -> str:
    return (f"webhook {hook['id']} -> {hook['url']} ({hook['format']}): "
            f"{', '.join(hook['events'])}\nsigning secret:\n{hook['secret']}")


def hooks_table(data: dict[str, Any], header: bool = True) -> str:
    return table(["ID", "OWNER", "URL", "FORMAT", "EVENTS", "CREATED"],
                 [[h["id"], h["owner"], h["url"], h["format"], ",".join(h["events"]),
                   h.get("created_at")] for h in data["webhooks"]], header=header)


def deliveries_table(data: dict[str, Any], header: bool = True) -> str:
    return table(["ID", "EVENT", "AT", "OUTCOME", "TRIES", "STATUS", "NEXT RETRY", "ERROR"],
                 [[d["id"], d["event_type"], d.get("event_at"), d["outcome"], d["attempts"],
                   d.get("status_code"), d.get("next_retry_at"), d.get("error")]
                  for d in data["deliveries"]], header=header)


def cmd_add(ctx: Ctx) -> int:
    a = ctx.args
    ctx.emit(ctx.client.create_webhook(a.target, a.events, a.format).raw, created_text)
    ctx.hint(SECRET_NOTE)
    return Exit.OK


def cmd_list(ctx: Ctx) -> int:
    user = None if ctx.args.user == "all" else ctx.args.user
    ctx.emit(ctx.client.list_webhooks(user).raw, lambda d: hooks_table(d, ctx.header))
    return Exit.OK


def cmd_rm(ctx: Ctx) -> int:
    ctx.emit(ctx.client.delete_webhook(ctx.args.id).raw, lambda d: f"deleted {d['deleted']}")
    return Exit.OK


def cmd_deliveries(ctx: Ctx) -> int:
    ctx.emit(ctx.client.webhook_deliveries(ctx.args.id, ctx.args.limit).raw,
             lambda d: deliveries_table(d, ctx.header))
    return Exit.OK


def register(sub: Any, add_parser: AddParser) -> None:
    """Register ``webhook`` on the main parser's subparsers."""
    hook = add_parser(sub, "webhook", "signed HTTP notifications when your tasks end")
    hooks = hook.add_subparsers(dest="webhook_command", required=True, metavar="ACTION")
    add = add_parser(hooks, "add", "register a webhook (its signing secret is shown once)")
    # dest "target": "url" is the global --url (the API's address)
    add.add_argument("target", metavar="URL", help="http(s) URL the events are POSTed to")
    add.add_argument("--events", type=_events, required=True, metavar="E1,E2",
                     help=f"comma-separated, or all: {', '.join(EVENT_TYPES)}; admins "
                          f"also: {', '.join(NODE_EVENT_TYPES)}")
    add.add_argument("--format", choices=("standard", "slack"), default="standard",
                     help="body: standard {type, timestamp, data} or slack {text}")
    add.set_defaults(run=cmd_add)
    lst = add_table_options(add_parser(hooks, "list",
                                       "list your webhooks (admins: everyone's)"))
    lst.add_argument("--user", help="only this user's (admins; all: everyone's)")
    lst.set_defaults(run=cmd_list)
    rm = add_parser(hooks, "rm", "delete a webhook (pending deliveries are dropped)")
    rm.add_argument("id")
    rm.set_defaults(run=cmd_rm)
    dl = add_table_options(add_parser(hooks, "deliveries",
                                      "recent deliveries of a webhook and their outcome"))
    dl.add_argument("id")
    dl.add_argument("--limit", type=int, default=50, help="how many (1..500)")
    dl.set_defaults(run=cmd_deliveries)
