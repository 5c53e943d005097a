"""The mechanical SQLite -> PostgreSQL rewrite of the named queries (sql/translate.py)."""

from __future__ import annotations

import pytest

from service.store.sql import QUERIES, postgres_queries
from service.store.sql.translate import Unported, params_to_psycopg, to_postgres


@pytest.mark.parametrize("sqlite, postgres", [
    ("SELECT a FROM t WHERE x = :x AND y LIKE '50%'",
     "SELECT a FROM t WHERE x = %(x)s AND y LIKE '50%%'"),
    ("SELECT ':not_a_param' FROM t WHERE a = ?", "SELECT ':not_a_param' FROM t WHERE a = %s"),
    ("SELECT seq FROM tasks INDEXED BY tasks_runnable WHERE 1",
     "SELECT seq FROM tasks WHERE 1"),
    ("SELECT t.user, user FROM tasks t WHERE user = :user AND role = 'user'",
     "SELECT t.\"user\", \"user\" FROM tasks t WHERE \"user\" = %(user)s AND role = 'user'"),
    ("SELECT 1 WHERE a IS :a AND b IS NOT :b AND c IS NOT NULL AND d IS NULL",
     "SELECT 1 WHERE a IS NOT DISTINCT FROM %(a)s AND b IS DISTINCT FROM %(b)s "
     "AND c IS NOT NULL AND d IS NULL"),
    ("INSERT OR IGNORE INTO p (a) VALUES (:a)",
     "INSERT INTO p (a) VALUES (%(a)s) ON CONFLICT DO NOTHING"),
    ("SELECT ifnull(a, 0) FROM t", "SELECT coalesce(a, 0) FROM t"),
    ("SELECT max(a), max(a, b) FROM t",
     "SELECT max(a), (CASE WHEN (a) IS NULL OR (b) IS NULL THEN NULL ELSE GREATEST(a, b) END)"
     " FROM t"),
    ("INSERT INTO c (k, n) VALUES (:k, 1) ON CONFLICT (k) DO UPDATE SET n = n + excluded.n",
     "INSERT INTO c (k, n) VALUES (%(k)s, 1) ON CONFLICT (k) DO UPDATE SET n = c.n + "
     "excluded.n"),
    ("SELECT x FROM (SELECT 1 AS x) WHERE x > 0",
     "SELECT x FROM (SELECT 1 AS x) AS sub1 WHERE x > 0"),
    ("SELECT x FROM (SELECT 1 AS x) q WHERE x > 0", "SELECT x FROM (SELECT 1 AS x) q WHERE x > 0"),
])
def test_each_rewrite(sqlite: str, postgres: str) -> None:
    assert to_postgres("q", sqlite) == postgres


@pytest.mark.parametrize("sqlite", [
    "SELECT value FROM json_each(:ids)",
    "SELECT json_extract(spec_json, '$.a') FROM tasks",
    "INSERT OR REPLACE INTO s (a) VALUES (1)",
    "SELECT 1 WHERE name GLOB 'a*'",
])
def test_what_has_no_mechanical_spelling_is_refused(sqlite: str) -> None:
    with pytest.raises(Unported, match=r"postgres/queries\.sql"):
        to_postgres("q", sqlite)


def test_strings_are_left_as_they_are() -> None:
    assert params_to_psycopg("SELECT ':a', 'IS x user' WHERE b = :b") == \
        "SELECT ':a', 'IS x user' WHERE b = %(b)s"


def test_every_named_query_has_postgres_text() -> None:
    """Hand-written (postgres/queries.sql) or rewritten: none is left without one, and
    none is left holding SQLite's parameter style."""
    texts = postgres_queries()
    assert set(texts) == set(QUERIES)
    missing = [name for name, text in texts.items() if text is None]
    assert missing == []
    assert not [n for n, t in texts.items() if t and " :" in t.replace("::", "")]
