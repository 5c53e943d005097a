"""The unit tier's store engines: a test that takes ``store_url`` runs once on SQLite (a file
in its tmp_path) and once on PostgreSQL (a fresh database on the session's throwaway
server, ``pg_server`` in tests/conftest.py; marked ``postgres``). The store's tests
(``tests/unit/store``) and the scheduler's (``tests/unit/engine``'s ``env``) take it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store's setting for this run: a SQLite file or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "db.sqlite3")
    return request.getfixturevalue("pg_server").store_database()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sqlite_only(reason): a store test of SQLite itself (its file, its query "
        "plans): its PostgreSQL run is skipped, saying why")


@pytest.fixture(autouse=True)
def _sqlite_only(request: pytest.FixtureRequest) -> None:
    mark = request.node.get_closest_marker("sqlite_only")
    params = getattr(request.node, "callspec", None)
    if mark and params and params.params.get("store_url") == "postgresql":
        pytest.skip(f"SQLite only: {mark.args[0] if mark.args else 'SQLite itself'}")
