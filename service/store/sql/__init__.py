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
POSTGRES_DIR = SQL_DIR / "postgres"

_NAME_LINE = re.compile(r"--\s*(?P<kind>name|fragment):\s*(?P<name>\S+)\s*")
_PLACEHOLDER = re.compile(r"\{(?P<name>[a-z][a-z0-9_]*)\}")
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")


def parse_queries(text: str, generated: Mapping[str, str] | None = None, *,
                  fragments_out: dict[str, str] | None = None) -> dict[str, str]:
    """``{name: statement}`` from the text of a queries file (see the module docstring);
    ``generated``: fragments made in Python, named as the file's are (the file's own are
    put in ``fragments_out`` when given)."""
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
    if fragments_out is not None:
        fragments_out.update(shared)

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


def shown_spec_postgres() -> str:
    """``shown_spec`` on PostgreSQL: a scalar as its JSON value (psycopg decodes jsonb), a
    map or a list as JSON text, as SQLite's ``json_extract`` gives them."""
    return ", ".join(
        f"(t.spec_json::jsonb -> '{shown.name}'){'::text' if shown.structured else ''} "
        f"AS {shown_column(shown)}" for shown in SHOWN)


def postgres_queries() -> dict[str, str | None]:
    """Every named query's PostgreSQL text, made once when a PostgreSQL store opens: the
    hand-written text of ``postgres/queries.sql`` where it has one, else the SQLite text
    rewritten (``translate.to_postgres``); None for a query that has neither yet. The
    hand-written text may name queries.sql's fragments, and gets the same rewrite (which
    leaves PostgreSQL's own spelling as it is)."""
    from service.store.sql.translate import Unported, to_postgres

    shared = {"shown_spec": shown_spec_postgres()}
    base = parse_queries(QUERIES_FILE.read_text(encoding="utf-8"), shared, fragments_out=shared)
    own = parse_queries((POSTGRES_DIR / "queries.sql").read_text(encoding="utf-8"), shared)
    unknown = sorted(set(own) - set(base))
    if unknown:
        raise ValueError(f"postgres/queries.sql names queries queries.sql lacks: {unknown}")
    out: dict[str, str | None] = {}
    for name, text in base.items():
        try:
            out[name] = to_postgres(name, own.get(name, text))
        except Unported:
            out[name] = None
    return out


QUERIES: Mapping[str, str] = MappingProxyType(
    parse_queries(QUERIES_FILE.read_text(encoding="utf-8"), {"shown_spec": shown_spec()})
)
