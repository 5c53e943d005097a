"""``argus``: the user's command line for the task service.

    argus [--url URL] [--token-env NAME] [--json] COMMAND ...

The server URL comes from ``--url``, else ``$ARGUS_URL``, else http://127.0.0.1:8080; the
token from the environment variable ``ARGUS_API_TOKEN`` (or the one named by
``--token-env``), never from the command line. Output is a readable table, or the raw
JSON with ``--json`` (errors too: ``{"error": {...}}`` on stdout). Exit codes: see
``exits.Exit`` and docs/client.md.

A group of commands is one module with ``register(sub, add_parser)``, listed once in
``COMMAND_MODULES``; a command is ``set_defaults(run=fn)`` with ``fn(ctx) -> int``
(``offline=fn(parser, args, out)`` for one that needs no server).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

from argus_client.cli import accounts, completion, pipelines, tasks, webhooks
from argus_client.cli.context import Ctx
from argus_client.cli.exits import exit_for
from argus_client.cli.tasks import positive_float
from argus_client.env import DEFAULT_URL, TOKEN_ENV, URL_ENV
from argus_client.errors import ApiError, ArgusError

if TYPE_CHECKING:
    from argus_client.transport import Opener

COMMAND_MODULES: tuple[ModuleType, ...] = (tasks, accounts, pipelines, webhooks, completion)

EPILOG = """exit codes:
  0 ok                1 the API refused or failed     2 usage (or no token)
  3 not found         4 auth (401/403)                5 cannot reach an Argus API
  6 wait: the task ended FAILED or CANCELED           7 wait: --timeout passed"""


def build_parser() -> argparse.ArgumentParser:
    # --json is accepted before or after the command (SUPPRESS keeps one from hiding the other)
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                           help="print the raw JSON answer (and errors as JSON)")
    p = argparse.ArgumentParser(prog="argus", parents=[json_flag],
                                description="Submit and follow Argus training tasks.",
                                epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=os.environ.get(URL_ENV) or DEFAULT_URL,
                   help=f"API base URL (default: ${URL_ENV} or %(default)s)")
    p.add_argument("--token-env", default=TOKEN_ENV, metavar="NAME",
                   help="environment variable holding the API token (default: %(default)s)")
    p.add_argument("--http-timeout", type=positive_float, default=30.0, metavar="S",
                   help="timeout of one HTTP request in seconds")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_parser(subparsers: Any, name: str, help_: str) -> argparse.ArgumentParser:
        return subparsers.add_parser(name, parents=[json_flag], help=help_,
                                     description=help_)

    for module in COMMAND_MODULES:
        module.register(sub, add_parser)
    return p


def report(exc: ArgusError, *, as_json: bool, out: TextIO, err: TextIO) -> None:
    """An error as one line (and the fields it names) on stderr, or as JSON on stdout."""
    if as_json:
        data = exc.to_json() if isinstance(exc, ApiError) else {"error": {
            "status": None, "code": _code(exc), "message": str(exc), "details": []}}
        out.write(json.dumps(data, indent=2) + "\n")
        return
    err.write(f"argus: {exc}\n")
    for d in exc.details if isinstance(exc, ApiError) else []:
        if isinstance(d, dict) and "field" in d:
            err.write(f"  {d['field']}: {d.get('message', '')}\n")
        else:
            err.write(f"  {d}\n")


def _code(exc: ArgusError) -> str:
    """``ArgusConnectionError`` -> ``connection_error``."""
    name = type(exc).__name__.removeprefix("Argus")
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def main(
    argv: Sequence[str] | None = None,
    *,
    opener: Opener | None = None,
    out: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    err: TextIO | None = None,
) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = out or sys.stdout
    err = sys.stderr if err is None else err
    if getattr(args, "offline", None) is not None:
        return int(args.offline(parser, args, out))
    token = os.environ.get(args.token_env, "").strip()
    if not token:
        parser.error(f"no API token: set the environment variable {args.token_env}")
    from argus_client.client import ArgusClient  # the HTTP stack: only for a request

    client = ArgusClient(args.url, token, timeout=args.http_timeout, opener=opener,
                         sleep=sleep, clock=clock)
    ctx = Ctx(client, args, out, err)
    try:
        return int(args.run(ctx))
    except ArgusError as exc:
        report(exc, as_json=ctx.as_json, out=out, err=err)
        return exit_for(exc)
    except KeyboardInterrupt:
        err.write("\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
