"""``argus me | user ... | token ... | usage``: the accounts and accounting commands.

    argus me
    argus user create NAME [--role user|admin] [--no-token] [--label L] [--expires-in D]
    argus user list | show NAME | disable NAME | enable NAME
    argus token create [--user NAME] [--label L] [--expires-in D]
    argus token list [--user NAME]
    argus token revoke TOKEN [--user NAME]
    argus usage [--from T] [--to T] [--user NAME|mine|all] [--tasks N]

A new token's secret is printed once, on its own line (the reminder that it is shown
only then goes to stderr). Durations are ``<n>s|m|h|d|w`` (``30d``); times are ISO-8601, epoch
seconds, or a duration meaning that long ago (``--from 7d``).
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from argus_client.cli.context import AddParser, Ctx
from argus_client.cli.exits import Exit
from argus_client.cli.options import add_table_options
from argus_client.cli.output import key_values, table
from argus_client.cli.tasks import user_query

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")


def duration(text: str) -> float:
    """``30d`` -> seconds (argparse type)."""
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None or float(match[1]) <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a duration such as 90s, 15m, 12h, 30d or 2w, got {text!r}")
    return float(match[1]) * _UNITS[match[2]]


def when(text: str, now: Callable[[], float] = time.time) -> str:
    """A time for the API: a duration is that long ago, anything else goes as given."""
    if _DURATION_RE.fullmatch(text.strip()):
        ago = now() - duration(text)
        return datetime.fromtimestamp(max(ago, 0.0), tz=UTC).isoformat().replace(
            "+00:00", "Z")
    return text


# -- rendering ----------------------------------------------------------------------------


def _limits(user: dict[str, Any]) -> str:
    limits = user.get("limits") or {}

    def one(key: str, unit: str) -> str:
        value = limits.get(key)
        return f"{value} {unit}" if value else f"unlimited {unit}"

    return f"{one('max_running_tasks', 'tasks')}, {one('max_gpus', 'GPUs')}"


def show_user(user: dict[str, Any]) -> str:
    return key_values([
        ("name", user.get("name")), ("role", user.get("role")),
        ("enabled", user.get("enabled")), ("created_at", user.get("created_at")),
        ("disabled_at", user.get("disabled_at")), ("limits", _limits(user)),
    ])


def show_me(me: dict[str, Any]) -> str:
    token = me.get("token") or {}
    which = (token.get("label") if token.get("bootstrap")
             else f"{token.get('prefix')} ({token.get('label')}, expires "
                  f"{token.get('expires_at') or 'never'})")
    return key_values([("name", me.get("name")), ("role", me.get("role")),
                ("limits", _limits(me)), ("token", which)])


def tokens_table(data: dict[str, Any], header: bool = True) -> str:
    return table(
        ["TOKEN", "LABEL", "STATE", "CREATED", "LAST_USED", "EXPIRES"],
        [[t.get("prefix"), t.get("label"), t.get("state"), t.get("created_at"),
          t.get("last_used_at"), t.get("expires_at") or "never"] for t in data["tokens"]],
        header=header,
    )


TOKEN_NOTE = "the token is shown this once: keep it now (use it as ARGUS_API_TOKEN)"


def new_token_text(data: dict[str, Any]) -> str:
    return (f"token {data['prefix']} ({data['label']}) for {data['user']}, expires "
            f"{data.get('expires_at') or 'never'}:\n{data['token']}")


def usage_text(data: dict[str, Any]) -> str:
    users = table(
        ["USER", "GPU_HOURS", "GPU_SECONDS", "FAILED_GPU_S", "TASKS", "ATTEMPTS", "RUNNING"],
        [[u.get("user"), f"{u['gpu_hours']:.4f}", f"{u['gpu_seconds']:.1f}",
          f"{u['failed_gpu_seconds']:.1f}", u.get("tasks"), u.get("attempts"),
          u.get("running_attempts")] for u in data["users"]],
    )
    tasks = table(
        ["TASK_ID", "USER", "GPUS", "GPU_SECONDS", "ATTEMPTS"],
        [[t.get("task_id"), t.get("user"), t.get("gpus"), f"{t['gpu_seconds']:.1f}",
          ", ".join(_attempt_text(a) for a in t.get("attempts", []))]
         for t in data["tasks"]],
    )
    return f"GPU usage from {data['from']} to {data['to']}\n\n{users}\n\n{tasks}"


def _attempt_text(a: dict[str, Any]) -> str:
    mark = " running" if a.get("running") else (
        f" {a.get('failure_kind')}" if a.get("failed") else "")
    return f"a{a.get('attempt_no'):02d} {a.get('gpu_seconds', 0):.1f}s{mark}"


# -- commands -------------------------------------------------------------------------------


def cmd_me(ctx: Ctx) -> int:
    ctx.emit(ctx.client.me().raw, show_me)
    return Exit.OK


def cmd_user_create(ctx: Ctx) -> int:
    a = ctx.args
    user = ctx.client.create_user(a.name, role=a.role)
    token = None if a.no_token else ctx.client.create_token(
        a.name, label=a.label, expires_in_s=a.expires_in)
    data = {"user": user.raw, "token": None if token is None else token.raw}
    ctx.emit(data, lambda d: show_user(d["user"]) + (
        "\n\n" + new_token_text(d["token"]) if d["token"] else ""))
    ctx.hint(TOKEN_NOTE if token else f"no token yet: argus token create --user {a.name}")
    return Exit.OK


def cmd_user_list(ctx: Ctx) -> int:
    data = {"users": [u.raw for u in ctx.client.users()]}
    ctx.emit(data, lambda d: table(
        ["NAME", "ROLE", "ENABLED", "CREATED", "LIMITS"],
        [[u.get("name"), u.get("role"), u.get("enabled"), u.get("created_at"), _limits(u)]
         for u in d["users"]], header=ctx.header))
    return Exit.OK


def cmd_user_show(ctx: Ctx) -> int:
    ctx.emit(ctx.client.user(ctx.args.name).raw, show_user)
    return Exit.OK


def cmd_user_disable(ctx: Ctx) -> int:
    data = ctx.client.disable_user(ctx.args.name).raw
    ctx.emit(data, lambda d: f"{d['user']['name']}  disabled: {d['effect']}")
    return Exit.OK


def cmd_user_enable(ctx: Ctx) -> int:
    data = ctx.client.enable_user(ctx.args.name).raw
    ctx.emit(data, lambda d: f"{d['user']['name']}  enabled: {d['effect']}")
    return Exit.OK


def cmd_token_create(ctx: Ctx) -> int:
    a = ctx.args
    token = ctx.client.create_token(a.user, label=a.label, expires_in_s=a.expires_in)
    ctx.emit(token.raw, new_token_text)
    ctx.hint(TOKEN_NOTE)
    return Exit.OK


def cmd_token_list(ctx: Ctx) -> int:
    ctx.emit(ctx.client.tokens(ctx.args.user).raw, lambda d: tokens_table(d, ctx.header))
    return Exit.OK


def token_id_of(text: str) -> str:
    """A token's id from its id, its prefix (``argus_<id>``) or the whole token."""
    parts = text.strip().split("_")
    return parts[1] if len(parts) >= 2 and parts[0] == "argus" else text.strip()


def cmd_token_revoke(ctx: Ctx) -> int:
    data = ctx.client.revoke_token(token_id_of(ctx.args.token), user=ctx.args.user).raw
    ctx.emit(data, lambda d: f"{d['prefix']}  {d['state']}"
             + ("" if d.get("changed") else " (already)"))
    return Exit.OK


def cmd_usage(ctx: Ctx) -> int:
    a = ctx.args
    usage = ctx.client.usage(user=user_query(a.user), tasks=a.tasks,
                             from_=None if a.from_ is None else when(a.from_),
                             to=None if a.to is None else when(a.to))
    ctx.emit(usage.raw, usage_text)
    more = (usage.tasks_total or 0) - len(usage.tasks)
    if more > 0:
        ctx.hint(f"{more} more tasks: --tasks N")
    return Exit.OK


# -- parsers --------------------------------------------------------------------------------


def register(sub: Any, add_parser: AddParser) -> None:
    """Register the commands on the main parser's subparsers (``add_parser(sub, name,
    help)`` makes one that takes ``--json``)."""
    me = add_parser(sub, "me", "who your token signs in as (user, role, limits)")
    me.set_defaults(run=cmd_me)

    def token_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--label", default="default", help="what the token is for")
        p.add_argument("--expires-in", type=duration, metavar="D",
                       help="lifetime such as 30d (default: never expires)")

    user = add_parser(sub, "user", "manage users (admins)")
    users = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    create = add_parser(users, "create", "create a user, and a first token for them")
    create.add_argument("name")
    create.add_argument("--role", choices=("user", "admin"), default="user")
    create.add_argument("--no-token", action="store_true", help="create no token")
    token_options(create)
    create.set_defaults(run=cmd_user_create)
    add_table_options(add_parser(users, "list", "list users")).set_defaults(run=cmd_user_list)
    for name, fn, help_ in (
        ("show", cmd_user_show, "show one user"),
        ("disable", cmd_user_disable, "disable a user: tokens refused at once, running "
                                      "tasks finish, queued tasks wait"),
        ("enable", cmd_user_enable, "enable a user again"),
    ):
        p = add_parser(users, name, help_)
        p.add_argument("name")
        p.set_defaults(run=fn)

    token = add_parser(sub, "token", "create, list and revoke API tokens")
    tokens = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = add_parser(tokens, "create", "create a token (its secret is shown once)")
    create.add_argument("--user", help="for this user (admins; default: you)")
    token_options(create)
    create.set_defaults(run=cmd_token_create)
    lst = add_table_options(add_parser(tokens, "list", "list tokens (never their secrets)"))
    lst.add_argument("--user", help="this user's (admins; default: yours)")
    lst.set_defaults(run=cmd_token_list)
    revoke = add_parser(tokens, "revoke", "revoke a token at once")
    revoke.add_argument("token", help="its id or prefix (argus_<id>), as token list shows")
    revoke.add_argument("--user", help="whose token (admins; default: yours)")
    revoke.set_defaults(run=cmd_token_revoke)

    usage = add_parser(sub, "usage", "GPU-seconds per user (and the biggest tasks)")
    usage.add_argument("--from", dest="from_", metavar="T",
                       help="ISO-8601, epoch seconds or a duration ago such as 7d "
                            "(default: the beginning)")
    usage.add_argument("--to", metavar="T", help="same forms (default: now)")
    usage.add_argument("--user", help="NAME, mine or all (default: all)", default="all")
    usage.add_argument("--tasks", type=int, default=20, metavar="N",
                       help="tasks to detail (default: %(default)s)")
    usage.set_defaults(run=cmd_usage)
