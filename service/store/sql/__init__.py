"""The service's SQL, kept as SQL: the schema, its numbered migrations, and every statement
the store runs as a named query.

``queries.sql`` is a sequence of blocks, each opened by a ``-- name: <identifier>`` line;
the lines up to the next block are the statement (whole-line ``--`` comments dropped, one
trailing ``;`` allowed). Parameters are named (``:task_id``), so a statement and its call
site agree by name, never by position.

A ``-- fragment: <identifier>`` block is SQL text shared by several statements (a task's
one column list, say): a statement names it as ``{identifier}`` and gets the text in its
place. Fragments are not queries; a statement naming an unknown one is an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from service.jobspec.shown import SHOWN, ShownField

SQL_DIR = Path(__file__).parent
SCHEMA_FILE = SQL_DIR / "schema.sql"
MIGRATIONS_DIR = SQL_DIR / "migrations"
QUERIES_FILE = SQL_DIR / "queries.sql"

_NAME_LINE = re.compile(r"--\s*(?P<kind>name|fragment):\s*(?P<name>\S+)\s*")
_PLACEHOLDER = re.compile(r"\{(?P<name>[a-z][a-z0-9_]*)\}")
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")


def parse_queries(text: str, generated: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{name: statement}`` from the text of a queries file (see the module docstring);
    ``generated``: fragments made in Python, named as the file's are."""
    queries: dict[str, list[str]] = {}
    fragments: dict[str, list[str]] = {}
    current: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _NAME_LINE.fullmatch(line.strip())
        if match:
            name, into = match["name"], queries if match["kind"] == "name" else fragments
            if not _IDENTIFIER.fullmatch(name):
                raise ValueError(f"line {number}: query name {name!r} is not an identifier")
            if name in queries or name in fragments:
                raise ValueError(f"line {number}: query {name!r} is defined twice")
            current = into[name] = []
        elif line.strip().startswith("--") or not line.strip():
            continue
        elif current is None:
            raise ValueError(f"line {number}: SQL before the first '-- name:' line")
        else:
            current.append(line.rstrip())
    shared = {**(generated or {}),
              **{name: "\n".join(lines).strip() for name, lines in fragments.items()}}

    def fill(name: str, statement: str) -> str:
        def one(match: re.Match[str]) -> str:
            if match["name"] not in shared:
                raise ValueError(f"query {name!r} names no fragment {match['name']!r}")
            return _PLACEHOLDER.sub(one, shared[match["name"]])  # a fragment may name one
        return _PLACEHOLDER.sub(one, statement)

    out = {}
    for name, lines in queries.items():
        statement = fill(name, "\n".join(lines).strip().removesuffix(";").strip())
        if not statement:
            raise ValueError(f"query {name!r} is empty")
        if ";" in statement:
            raise ValueError(f"query {name!r} holds more than one statement")
        out[name] = statement
    return out


def shown_column(shown: ShownField) -> str:
    """The task projection's column of a shown JobSpec field."""
    return f"spec_{shown.name}"


def shown_spec() -> str:
    """The ``{shown_spec}`` fragment: the task projection's columns of the JobSpec's shown
    fields (``SHOWN``), each read from the stored JSON (``store.reads.task_row`` puts them in
    ``TaskRow.spec``): made from their declaration, no line here per field."""
    return ", ".join(f"json_extract(t.spec_json, '$.{shown.name}') AS {shown_column(shown)}"
                     for shown in SHOWN)


QUERIES: Mapping[str, str] = MappingProxyType(
    parse_queries(QUERIES_FILE.read_text(encoding="utf-8"), {"shown_spec": shown_spec()})
)
