"""The named queries' SQLite text made PostgreSQL text, once per query at load (pure).

Most statements differ between the dialects only in spelling, which ``to_postgres``
rewrites mechanically, outside string literals:

* parameters ``:name`` (and ``?``) become psycopg's ``%(name)s`` (``%s``), and a
  literal ``%`` becomes ``%%``;
* ``INDEXED BY index`` is dropped (PostgreSQL's planner picks the partial index itself);
* the column ``user`` (a reserved word in PostgreSQL: bare, it is ``current_user``) is
  quoted, ``"user"``;
* ``IS NOT x`` / ``IS x`` with a value (not ``NULL``) become ``IS DISTINCT FROM`` /
  ``IS NOT DISTINCT FROM``;
* ``INSERT OR IGNORE`` becomes ``INSERT ... ON CONFLICT DO NOTHING``; ``ifnull`` becomes
  ``coalesce``;
* in ``ON CONFLICT ... DO UPDATE SET``, a column named bare on the right of an assignment
  is qualified with the table (PostgreSQL finds it ambiguous next to ``excluded``);
* a subquery in ``FROM`` without a name gets one (PostgreSQL 15 wants it);
* the two-argument scalar ``max(a, b)`` / ``min(a, b)`` become ``GREATEST`` / ``LEAST``,
  NULL when either side is (SQLite's meaning; PostgreSQL's alone would skip the NULL).

What cannot be rewritten by spelling (SQLite's JSON functions, ``INSERT OR REPLACE``,
``GLOB``...) raises ``Unported``: such a query needs its own text in
``postgres/queries.sql``, which wins over the rewrite for the names it holds.
"""

from __future__ import annotations

import re

# constructs with no mechanical PostgreSQL spelling: a query holding one needs its own text
_UNPORTED = re.compile(
    r"\b(json_\w+|INSERT\s+OR\s+REPLACE|GLOB|group_concat|printf|strftime|julianday|"
    r"iif|total)\b(?=\s*\(|\s)", re.IGNORECASE)
_INDEXED_BY = re.compile(r"\s+INDEXED\s+BY\s+\w+", re.IGNORECASE)
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_USER = re.compile(r"(?<![\w:\"%])user(?![\w\"(])", re.IGNORECASE)
_IS_NOT_VALUE = re.compile(r"\bIS\s+NOT\s+(?!NULL\b|DISTINCT\b)", re.IGNORECASE)
_IS_VALUE = re.compile(r"\bIS\s+(?!NOT\b|NULL\b|DISTINCT\b)", re.IGNORECASE)
_OR_IGNORE = re.compile(r"\bINSERT\s+OR\s+IGNORE\s+INTO\b", re.IGNORECASE)
_IFNULL = re.compile(r"\bifnull\s*\(", re.IGNORECASE)
_SCALAR = re.compile(r"\b(max|min)\s*\(", re.IGNORECASE)
_STRING = re.compile(r"('(?:[^']|'')*')")
_INSERT_INTO = re.compile(r"\bINSERT\s+(?:OR\s+\w+\s+)?INTO\s+(\w+)", re.IGNORECASE)
_DO_UPDATE = re.compile(r"\bDO\s+UPDATE\s+SET\b", re.IGNORECASE)
_ASSIGNED = re.compile(r"(?:^|,)\s*(\w+)\s*=(?!=)")


class Unported(ValueError):
    """The statement uses SQLite that has no mechanical PostgreSQL spelling."""


def _outside_strings(text: str, rewrite) -> str:  # type: ignore[no-untyped-def]
    parts = _STRING.split(text)
    return "".join(part if i % 2 else rewrite(part) for i, part in enumerate(parts))


def _split_args(text: str, start: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose ``(`` is at ``start - 1``; the index just
    past its ``)``."""
    depth, args, begin, i = 0, [], start, start
    while i < len(text):
        ch = text[i]
        if ch == "'":
            i = text.index("'", i + 1)
        elif ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                args.append(text[begin:i].strip())
                return args, i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[begin:i].strip())
            begin = i + 1
        i += 1
    raise ValueError("unbalanced parentheses")


def _scalars(text: str) -> str:
    """``max(a, b)`` -> ``GREATEST``, ``min(a, b)`` -> ``LEAST`` (NULL if either is)."""
    out, pos = [], 0
    while (m := _SCALAR.search(text, pos)) is not None:
        args, end = _split_args(text, m.end())
        if len(args) < 2:
            out.append(text[pos:m.end()])
            pos = m.end()
            continue
        args = [_scalars(a) for a in args]
        fn = "GREATEST" if m[1].lower() == "max" else "LEAST"
        nulls = " OR ".join(f"({a}) IS NULL" for a in args)
        out.append(f"{text[pos:m.start()]}(CASE WHEN {nulls} THEN NULL "
                   f"ELSE {fn}({', '.join(args)}) END)")
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _qualify_upsert(text: str) -> str:
    """``DO UPDATE SET n = n + 1`` -> ``DO UPDATE SET n = table.n + 1``."""
    table, update = _INSERT_INTO.search(text), _DO_UPDATE.search(text)
    if table is None or update is None:
        return text
    head, tail = text[:update.end()], text[update.end():]
    columns = {m[1] for m in _ASSIGNED.finditer(tail)}
    if not columns:
        return text
    bare = re.compile(rf"(?<![\w.\"])({'|'.join(sorted(columns))})\b(?!\s*=(?!=))")
    return head + bare.sub(rf"{table[1]}.\1", tail)


_FROM_SUBQUERY = re.compile(r"\bFROM\s*\(", re.IGNORECASE)
_NAMED = re.compile(r"\s*(?!(?:WHERE|GROUP|ORDER|LIMIT|UNION|JOIN|LEFT|INNER|CROSS|ON|"
                    r"EXCEPT|INTERSECT|HAVING|WINDOW)\b)(?:AS\b|[A-Za-z_])", re.IGNORECASE)


def _name_subqueries(text: str) -> str:
    """``FROM (SELECT ...) WHERE`` -> ``FROM (SELECT ...) AS sub1 WHERE``."""
    out, pos, n = [], 0, 0
    while (m := _FROM_SUBQUERY.search(text, pos)) is not None:
        _, end = _split_args(text, m.end())
        out.append(text[pos:m.end()])
        inner = _name_subqueries(text[m.end():end - 1])
        out.append(inner + ")")
        if not _NAMED.match(text, end):
            n += 1
            out.append(f" AS sub{n}")
        pos = end
    out.append(text[pos:])
    return "".join(out)


def to_postgres(name: str, sqlite_text: str) -> str:
    """The PostgreSQL text of the named query (see the module docstring); ``Unported`` when
    it needs a hand-written one."""
    found = _UNPORTED.search(_STRING.sub("''", sqlite_text))
    if found:
        raise Unported(f"query {name!r} uses {found[1]!r}: it needs its own text in "
                       "postgres/queries.sql")
    text = _INDEXED_BY.sub("", sqlite_text)
    ignore = _OR_IGNORE.search(text) is not None
    text = _outside_strings(text, lambda part: _IFNULL.sub(
        "coalesce(", _IS_VALUE.sub("IS NOT DISTINCT FROM ", _IS_NOT_VALUE.sub(
            "IS DISTINCT FROM ", _OR_IGNORE.sub("INSERT INTO", _USER.sub('"user"', part))))))
    text = _name_subqueries(_scalars(_qualify_upsert(text)))
    if ignore:
        text += " ON CONFLICT DO NOTHING"
    return params_to_psycopg(text)


def params_to_psycopg(text: str) -> str:
    """``:name`` -> ``%(name)s`` and ``?`` -> ``%s`` outside string literals, every ``%``
    doubled first."""
    text = text.replace("%", "%%")
    return _outside_strings(text, lambda part: _PARAM.sub(r"%(\1)s", part).replace("?", "%s"))
