"""PostgreSQL's schema and queries: migrations reproduce postgres/schema.sql exactly, the
versions are SQLite's numbers, every named query has PostgreSQL text that compiles, and a
database that is not this code's is refused at start with one line."""

from __future__ import annotations

import re

import pytest
from support.postgres import PgServer

from service.domain.nodes import NodeSource
from service.store import pg
from service.store.db import SchemaError
from service.store.db import migration_files as sqlite_migrations
from service.store.dialect import StoreOpenError
from service.store.pg_engine import PostgresEngine, schema_version
from service.store.sql import postgres_queries
from service.store.writer import Store

pytestmark = pytest.mark.postgres

# Column lists, constraints, indexes, triggers and trigger functions, as the catalog says
_CATALOG = {
    "columns": """SELECT table_name, column_name, data_type, is_nullable, column_default,
                         is_identity FROM information_schema.columns
                  WHERE table_schema = current_schema() ORDER BY 1, 2""",
    "constraints": """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
                      FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
                      ORDER BY 1, 2""",
    "indexes": """SELECT tablename, indexname, indexdef FROM pg_indexes
                  WHERE schemaname = current_schema() ORDER BY 1, 2""",
    "triggers": """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
                   FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2""",
    "functions": """SELECT proname, prosrc FROM pg_proc
                    WHERE pronamespace = current_schema()::regnamespace ORDER BY 1""",
}

# Compiled with every parameter NULL, this one cannot be typed (NULL + NULL); with the
# numbers the store binds it is (test_store_users' usage windows run it on PostgreSQL).
_UNTYPED_WITH_NULLS = {"usage_edges_of_user"}


def _catalog(url: str) -> dict[str, list[tuple]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return {k: [tuple(r) for r in conn.execute(q)] for k, q in _CATALOG.items()}


def test_migrated_equals_fresh_on_postgresql(pg_server: PgServer) -> None:
    fresh_url, migrated_url = pg_server.database(), pg_server.database()
    engine = PostgresEngine(fresh_url)
    latest = len(sqlite_migrations())
    fresh, migrated = engine.connect(), PostgresEngine(migrated_url).connect()
    assert engine.initialize(fresh, from_schema=True) == latest
    assert engine.initialize(migrated, from_schema=False) == latest
    assert schema_version(fresh) == schema_version(migrated) == latest
    fresh.close()
    migrated.close()
    a, b = _catalog(fresh_url), _catalog(migrated_url)
    assert a == b
    assert len(a["columns"]) > 100 and len(a["triggers"]) >= 8 and len(a["indexes"]) > 30


def test_versions_are_sqlites_numbers() -> None:
    """PostgreSQL starts at a baseline; every later migration exists for both engines under
    the same number and name, so a version means one schema on either."""
    ours = pg.migration_files()
    theirs = dict(sqlite_migrations())
    assert ours[-1][0] == len(theirs)
    baseline = ours[0][0]
    assert ours[0][1].name.endswith("_baseline.sql") and baseline in theirs
    for number, path in ours[1:]:
        assert theirs[number].name == path.name


def test_every_named_query_has_postgres_text_that_compiles(pg_server: PgServer) -> None:
    import psycopg

    url = pg_server.database()
    Store(url).close()
    texts = postgres_queries()
    assert None not in texts.values(), [n for n, t in texts.items() if t is None]
    failed = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for name, text in texts.items():
            sql = re.sub(r"%\((\w+)\)s", "NULL", text).replace("%%", "%")
            try:
                conn.execute("BEGIN")
                conn.execute("EXPLAIN " + sql)  # type: ignore[arg-type]
            except psycopg.Error as exc:
                failed[name] = str(exc).splitlines()[0]
            finally:
                conn.execute("ROLLBACK")
    assert set(failed) == _UNTYPED_WITH_NULLS, failed
    assert all("unknown" in why for why in failed.values()), failed


def test_reopen_is_idempotent_and_a_newer_database_refused(pg_server: PgServer) -> None:
    url = pg_server.database()
    Store(url).close()
    Store(url).close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE argus_schema SET version = 99")
    with pytest.raises(SchemaError, match="newer than this code"):
        Store(url)


def test_a_foreign_database_is_refused(pg_server: PgServer) -> None:
    url = pg_server.database()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE x (a int)")
    with pytest.raises(SchemaError, match="not an Argus database"):
        Store(url)


@pytest.mark.parametrize("url, said", [
    ("postgresql://postgres@127.0.0.1:1/argus", "cannot connect to PostgreSQL at "
     "postgresql://postgres@127.0.0.1:1/argus"),
    ("postgresql://postgres:s3cret@127.0.0.1:1/argus", "postgres:***@127.0.0.1:1"),
])
def test_an_unreachable_server_is_one_line_without_the_password(url: str, said: str) -> None:
    with pytest.raises(StoreOpenError) as caught:
        Store(url)
    assert said in str(caught.value)
    assert "s3cret" not in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_database_is_one_line(pg_server: PgServer) -> None:
    with pytest.raises(StoreOpenError, match='database "nosuch" does not exist'):
        Store(pg_server.url("nosuch"))


def test_a_wrong_password_is_one_line_without_it(pg_server: PgServer) -> None:
    with pytest.raises(StoreOpenError, match="password authentication failed") as caught:
        Store(pg_server.url(password="wrong-one"))
    assert "wrong-one" not in str(caught.value) and "\n" not in str(caught.value)


def test_a_database_that_does_not_sort_bytewise_is_told_at_start(pg_server: PgServer,
                                                                  caplog) -> None:
    Store(pg_server.database()).close()  # the session's server: locale C
    assert "not byte by byte" not in caplog.text
    pg_server.sql("CREATE DATABASE icu_sorted TEMPLATE template0 LOCALE_PROVIDER icu "
                  "ICU_LOCALE 'en-US'")
    Store(pg_server.url("icu_sorted")).close()
    assert "sorts text by en-US, not byte by byte as SQLite" in caplog.text
    assert pg_server.password not in caplog.text


def test_statements_run_often_are_prepared_and_untypable_ones_bound_on_the_client(
        pg_server: PgServer) -> None:
    store = Store(pg_server.database())
    try:
        for _ in range(pg.PREPARE_THRESHOLD + 1):
            store.tasks.get_task("mvp2-ppo-20251223-143201-0001")
        reader = store.reads.reader()
        prepared = reader.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        assert any("FROM tasks t" in row[0] for row in prepared), prepared
        names = {name for name, text in postgres_queries().items() if text in pg.CLIENT_BOUND}
        assert "node_state_delete" in names and "get_task" not in names
        assert len(names) < 20, names  # the exception, not the rule
        store.nodes.cordon("w1", NodeSource.OPERATOR, "root", 1.0, "bad fan")
        store.nodes.resume("w1", None, "root", 2.0, "fixed")  # client-bound: source None
        assert store.nodes.state("w1") is None
    finally:
        store.close()
