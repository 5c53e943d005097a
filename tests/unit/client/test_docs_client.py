"""docs/client.md and docs/cli.md name every command of the parser, every public method
of the SDK and every exit code: a command or a method added without its line fails here
(the lists are read from the code, never written twice)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from argus_client.cli.completion import walk
from argus_client.cli.exits import Exit
from argus_client.cli.main import build_parser
from argus_client.client import ArgusClient

DOCS = Path(__file__).resolve().parents[3] / "docs"


def commands() -> list[list[str]]:
    return [path.split()[1:] for path, _, _ in walk(build_parser()) if path != "argus"]


def named(text: str, words: list[str]) -> bool:
    """A line of ``text`` names the command: `` `cmd`` ``, or the group and the action
    (``pipeline wait``, ``user list|show NAME|...``)."""
    if len(words) == 1:
        return re.search(rf"`{words[0]}[ `]", text) is not None
    group, action = words
    return any(f"`{group} " in line and re.search(rf"\b{action}\b", line)
               for line in text.splitlines())


@pytest.mark.parametrize("page", ["client.md", "cli.md"])
def test_every_command_is_named(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    missing = [" ".join(words) for words in commands() if not named(text, words)]
    assert missing == [], f"docs/{page} does not name: {missing}"


def test_every_sdk_method_and_exit_code_is_in_client_md() -> None:
    text = (DOCS / "client.md").read_text(encoding="utf-8")
    methods = [name for name, fn in inspect.getmembers(ArgusClient, inspect.isfunction)
               if not name.startswith("_")]
    assert "wait_pipeline" in methods and "metrics" in methods
    assert [m for m in methods if not re.search(rf"`{m}\(", text)] == []
    assert [c for c in Exit if f"\n| {c.value} | " not in text] == []
