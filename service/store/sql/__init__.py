"""The service's SQL, kept as SQL: the schema, its numbered migrations, and every statement
the store runs as a named query.

``queries.sql`` is a sequence of blocks, each opened by a ``-- name: <identifier>`` line;
the lines up to the next block are the statement (whole-line ``--`` comments dropped, one
trailing ``;`` allowed). Parameters are named (``:task_id``), so a statement and its call
site agree by name, never by position.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

SQL_DIR = Path(__file__).parent
SCHEMA_FILE = SQL_DIR / "schema.sql"
MIGRATIONS_DIR = SQL_DIR / "migrations"
QUERIES_FILE = SQL_DIR / "queries.sql"

_NAME_LINE = re.compile(r"--\s*name:\s*(?P<name>\S+)\s*")
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")


def parse_queries(text: str) -> dict[str, str]:
    """``{name: statement}`` from the text of a queries file (see the module docstring)."""
    queries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _NAME_LINE.fullmatch(line.strip())
        if match:
            name = match["name"]
            if not _IDENTIFIER.fullmatch(name):
                raise ValueError(f"line {number}: query name {name!r} is not an identifier")
            if name in queries:
                raise ValueError(f"line {number}: query {name!r} is defined twice")
            current = queries[name] = []
        elif line.strip().startswith("--") or not line.strip():
            continue
        elif current is None:
            raise ValueError(f"line {number}: SQL before the first '-- name:' line")
        else:
            current.append(line.rstrip())
    out = {}
    for name, lines in queries.items():
        statement = "\n".join(lines).strip().removesuffix(";").strip()
        if not statement:
            raise ValueError(f"query {name!r} is empty")
        if ";" in statement:
            raise ValueError(f"query {name!r} holds more than one statement")
        out[name] = statement
    return out


QUERIES: Mapping[str, str] = MappingProxyType(
    parse_queries(QUERIES_FILE.read_text(encoding="utf-8"))
)
