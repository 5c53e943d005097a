"""``argus completion bash|zsh``: a completion script generated from the parser itself.

Hand-written (no shtab or argcomplete, see docs/client.md): the script is a table of
each command's subcommands and options read from argparse, so it never drifts from the
commands, and completing costs the shell nothing (argcomplete would start Python on
every TAB). zsh runs the same script through ``bashcompinit``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any, TextIO

from argus_client.cli.context import AddParser
from argus_client.cli.exits import Exit

SHELLS = ("bash", "zsh")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps no public list of them
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for a in parser._actions if a.help != argparse.SUPPRESS
                  for o in a.option_strings)


def walk(parser: argparse.ArgumentParser, path: str = "argus"
         ) -> Iterator[tuple[str, list[str], list[str]]]:
    """(command path, its subcommands, its options) for the parser and every subparser."""
    subs = _subparsers(parser)
    yield path, sorted(subs), _options(parser)
    for name, sub in subs.items():
        yield from walk(sub, f"{path} {name}")


def bash_script(parser: argparse.ArgumentParser) -> str:
    subs, opts = [], []
    for path, children, options in walk(parser):
        subs.append(f'    ["{path}"]="{" ".join(children)}"')
        opts.append(f'    ["{path}"]="{" ".join(options)}"')
    return "\n".join([
        "# argus completion (bash; zsh through bashcompinit)",
        "_argus() {",
        "  local -A subs=(", *subs, "  )",
        "  local -A opts=(", *opts, "  )",
        '  local cur="${COMP_WORDS[COMP_CWORD]}" path=argus w i',
        "  for ((i = 1; i < COMP_CWORD; i++)); do",
        '    w="${COMP_WORDS[i]}"',
        '    if [[ " ${subs[$path]} " == *" $w "* ]]; then path="$path $w"; fi',
        "  done",
        '  if [[ $cur == -* ]]; then',
        '    COMPREPLY=($(compgen -W "${opts[$path]}" -- "$cur"))',
        '  elif [[ -n ${subs[$path]} ]]; then',
        '    COMPREPLY=($(compgen -W "${subs[$path]}" -- "$cur"))',
        "  fi",
        "}",
        "complete -o default -F _argus argus",
        "",
    ])


def zsh_script(parser: argparse.ArgumentParser) -> str:
    return ("autoload -U +X compinit && compinit\n"
            "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser))


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    return bash_script(parser) if shell == "bash" else zsh_script(parser)


def register(sub: Any, add_parser: AddParser) -> None:
    p = add_parser(sub, "completion", "print a shell completion script: "
                   'eval "$(argus completion bash)" in ~/.bashrc (zsh: in ~/.zshrc)')
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(offline=_print_script)


def _print_script(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  out: TextIO) -> int:
    out.write(script(parser, args.shell))
    return Exit.OK
