"""The store's setting read as an engine (service/store/dialect.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.store.dialect import (
    StoreUrlError,
    engine_for,
    is_postgres,
    redacted,
    sqlite_path,
)
from service.store.writer import Store


def test_a_sqlite_url_and_a_bare_path_name_the_same_file(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite3")
    assert sqlite_path(f"sqlite://{path}") == sqlite_path(path) == path
    store = Store(f"sqlite://{path}")
    try:
        assert store.engine_name == "sqlite" and store.db_path == path
    finally:
        store.close()
    assert Path(path).exists()


@pytest.mark.parametrize("target, said", [
    ("sqlite://relative.db", "sqlite:///absolute/path"),
    ("mysql://u:pw@h/db", "unknown engine 'mysql'"),
])
def test_a_target_of_no_engine_is_refused(target: str, said: str) -> None:
    with pytest.raises(StoreUrlError, match=said) as caught:
        engine_for(target)
    assert ":pw@" not in str(caught.value)


def test_postgres_urls_and_their_password() -> None:
    assert is_postgres("postgresql://a@h/db") and is_postgres("postgres://a@h/db")
    assert not is_postgres("/var/postgresql/db") and not is_postgres("postgresql.db")
    assert redacted("postgresql://argus:s3cret@db:5433/argus") == \
        "postgresql://argus:***@db:5433/argus"
    assert redacted("postgresql://argus@db/argus") == "postgresql://argus@db/argus"


def test_an_in_memory_sqlite_database_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a database file"):
        Store(":memory:")
