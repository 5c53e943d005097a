"""``argus``: the user's command line for the task service.

    argus [--url URL] [--token-env NAME] [--json] COMMAND ...

The server URL comes from ``--url``, else ``$ARGUS_URL``, else http://127.0.0.1:8080; the
token from the environment variable ``ARGUS_API_TOKEN`` (or the one named by
``--token-env``), never from the command line. Data goes to stdout (a readable table, an
id alone where stdout is not a terminal, or the raw JSON with ``--json``, errors too:
``{"error": {...}}``), notes and hints to stderr. Exit codes: see ``exits.Exit`` and
docs/client.md.

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
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from argus_client.cli import accounts, completion, nodes, pipelines, tasks, webhooks
from argus_client.cli.context import Ctx, report
from argus_client.cli.exits import Exit, exit_for
from argus_client.cli.options import positive_float
from argus_client.env import DEFAULT_URL, TOKEN_ENV, URL_ENV
from argus_client.errors import ArgusError, UsageError

if TYPE_CHECKING:
    from argus_client.transport import Opener

COMMAND_MODULES: tuple[ModuleType, ...] = (tasks, accounts, pipelines, webhooks, nodes,
                                             completion)

EPILOG = """exit codes:
  0 ok                1 the API refused or failed     2 usage (flags, token, URL, file)
  3 not found         4 auth (401/403)                5 cannot reach an Argus API
  6 wait: the task (pipeline) ended FAILED or CANCELED
  7 wait: --timeout passed                            8 logs: the task has not started

Output is data on stdout (an id alone from submit when stdout is not a terminal), notes
and hints on stderr; --json prints the API's JSON, and errors as {"error": {...}}."""


class Parser(argparse.ArgumentParser):
    """argparse, whose usage errors are a JSON error on ``json_out`` when ``--json`` is on
    the command line (exit 2 either way)."""

    json_out: TextIO | None = None

    def error(self, message: str) -> NoReturn:
        if self.json_out is not None:
            self.json_out.write(json.dumps({"error": {
                "status": None, "code": "usage_error", "message": message, "details": [],
                "hint": f"{self.prog} --help"}}, indent=2) + "\n")
            self.exit(Exit.USAGE)
        super().error(message)


class _Version(argparse.Action):
    """``--version``: the installed package's version (read only when asked)."""

    def __init__(self, option_strings: list[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the version of argus-client and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        import argus_client

        sys.stdout.write(f"argus {argus_client.__version__}\n")
        parser.exit()


def build_parser(json_out: TextIO | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``json_out``: where usage errors go as JSON (None: as
    argparse prints them, on stderr)."""
    # --json is accepted before or after the command (SUPPRESS keeps one from hiding the other)
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                           help="print the raw JSON answer (and errors as JSON)")
    p = Parser(prog="argus", parents=[json_flag],
               description="Submit and follow Argus training tasks.", epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.json_out = json_out
    p.add_argument("--version", action=_Version)
    p.add_argument("--url", default=os.environ.get(URL_ENV) or DEFAULT_URL,
                   help=f"API base URL (default: ${URL_ENV} or %(default)s)")
    p.add_argument("--token-env", default=TOKEN_ENV, metavar="NAME",
                   help="environment variable holding the API token (default: %(default)s)")
    p.add_argument("--http-timeout", type=positive_float, default=30.0, metavar="S",
                   help="timeout of one HTTP request in seconds")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_parser(subparsers: Any, name: str, help_: str) -> argparse.ArgumentParser:
        sp = subparsers.add_parser(name, parents=[json_flag], help=help_, description=help_)
        sp.json_out = json_out
        return sp

    for module in COMMAND_MODULES:
        module.register(sub, add_parser)
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    opener: Opener | None = None,
    out: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    err: TextIO | None = None,
) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out = out or sys.stdout
    err = sys.stderr if err is None else err
    as_json = "--json" in argv  # known before parsing: a usage error is JSON too
    parser = build_parser(out if as_json else None)
    args = parser.parse_args(argv)
    if getattr(args, "offline", None) is not None:
        return int(args.offline(parser, args, out))
    try:
        token = os.environ.get(args.token_env, "").strip()
        if not token:
            raise UsageError(f"no API token: set the environment variable {args.token_env}",
                             hint=f"export {args.token_env}=<your token> (an admin makes "
                                  "one: argus token create --user NAME)")
        from argus_client.client import ArgusClient  # the HTTP stack: only for a request

        client = ArgusClient(args.url, token, timeout=args.http_timeout, opener=opener,
                             sleep=sleep, clock=clock)
        return int(args.run(Ctx(client, args, out, err)))
    except ArgusError as exc:
        report(exc, as_json=as_json, out=out, err=err)
        return exit_for(exc)
    except KeyboardInterrupt:
        err.write("\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
