"""``argus nodes`` and ``argus node ...``: the cluster's nodes by name, and an admin's
cordon, drain and resume.

    argus nodes                                  (any user)
    argus node cordon NAME --reason TEXT         (admins: no new attempt there)
    argus node drain NAME --reason TEXT          (admins: cordon; what runs there ends on its own)
    argus node drain NAME --reason TEXT --requeue  (admins: cordon; what runs there is stopped
                                                  and re-queued from its checkpoint)
    argus node resume NAME [--reason TEXT]       (admins: back in admission)
    argus node events NAME [--limit N]           (any user: its events, newest first)
"""

from __future__ import annotations

from typing import Any

from argus_client.cli.context import AddParser, Ctx
from argus_client.cli.exits import Exit
from argus_client.cli.options import add_table_options
from argus_client.cli.output import table


def _gpus(node: dict[str, Any]) -> str:
    total, free = node.get("gpus_total"), node.get("gpus_free")
    if total is None:
        return "-"
    return f"{free or 0:g}/{total:g}"


def _cordon(node: dict[str, Any]) -> str:
    c = node.get("cordon")
    if not c:
        return "-"
    who = c.get("by") or ("quarantine" if c.get("source") == "quarantine" else "health check")
    what = f"{c['state']} (requeue)" if c.get("requeue") else c["state"]
    return f"{what} by {who} at {c.get('at')}: {c.get('reason')}"


def nodes_table(data: dict[str, Any], header: bool = True) -> str:
    return table(["NAME", "STATE", "GPUS FREE/TOTAL", "SCHEDULABLE", "CORDON", "HEALTH"],
                 [[n["name"], n["state"], _gpus(n), "yes" if n["schedulable"] else "no",
                   _cordon(n), f"{n['health']['state']}: {n['health']['detail']}"]
                  for n in data["nodes"]], header=header)


def changed_text(data: dict[str, Any]) -> str:
    c = data["cordon"]
    if data["action"] == "resume":
        note = f"\nnote: {data['note']}" if data.get("note") else ""
        return f"node {data['name']} resumed (was {c['state']}: {c['reason']}){note}"
    requeue = " (requeue)" if c.get("requeue") else ""
    return f"node {data['name']} {c['state']}{requeue}: {c['reason']}"


def events_table(data: dict[str, Any], header: bool = True) -> str:
    return table(["AT", "KIND", "SOURCE", "BY", "REASON"],
                 [[e.get("at") or "-", e["kind"], e["source"], e.get("by") or "-",
                   e.get("reason") or ""] for e in data["events"]], header=header)


def cmd_events(ctx: Ctx) -> int:
    a = ctx.args
    ctx.emit(ctx.client.node_events(a.name, a.limit).raw,
             lambda d: events_table(d, ctx.header))
    return Exit.OK


def cmd_nodes(ctx: Ctx) -> int:
    ctx.emit(ctx.client.list_nodes().raw, lambda d: nodes_table(d, ctx.header))
    return Exit.OK


def cmd_change(ctx: Ctx) -> int:
    a = ctx.args
    requeue = getattr(a, "requeue", False)
    ctx.emit(ctx.client.change_node(a.name, a.node_command, a.reason, requeue=requeue).raw,
             changed_text)
    if a.node_command == "drain" and requeue:
        ctx.hint("the attempts on the node are stopped at the next tick and re-queued: "
                 "they resume from their checkpoint elsewhere (a preemption, not a retry)")
    elif a.node_command == "drain":
        ctx.hint("attempts already on the node run to their end; none is requeued "
                 "(--requeue stops and re-queues them)")
    return Exit.OK


def register(sub: Any, add_parser: AddParser) -> None:
    """Register ``nodes`` and ``node`` on the main parser's subparsers."""
    lst = add_table_options(add_parser(sub, "nodes", "the cluster's nodes by name: GPUs, "
                                                     "cordons, health"))
    lst.set_defaults(run=cmd_nodes)
    node = add_parser(sub, "node", "cordon, drain or resume a node (admins); its events")
    actions = node.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    for name, help_, required in (
            ("cordon", "no new attempt is placed on the node", True),
            ("drain", "cordon the node; the attempts on it finish on their own", True),
            ("resume", "put a cordoned or drained node back into admission", False)):
        p = add_parser(actions, name, help_)
        p.add_argument("name", metavar="NAME", help="the node's name (argus nodes)")
        p.add_argument("--reason", required=required,
                       help="why (at most 200 printable characters)")
        if name == "drain":
            p.add_argument("--requeue", action="store_true",
                           help="stop the attempts on the node and re-queue them, to resume "
                                "from their checkpoint elsewhere (counted as a preemption, "
                                "not charged to their retries)")
        p.set_defaults(run=cmd_change)
    ev = add_table_options(add_parser(actions, "events", "a node's events, newest first "
                                                        "(any user)"))
    ev.add_argument("name", metavar="NAME", help="the node's name (argus nodes)")
    ev.add_argument("--limit", type=int, default=100, help="how many (1..1000)")
    ev.set_defaults(run=cmd_events)
