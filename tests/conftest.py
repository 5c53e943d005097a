"""Tier markers from the directory a test lives in, so `-m unit` / `-m integration` /
`-m runtime` / `-m container` / `-m fuzz` / `-m browser` / `-m prometheus` / `-m docs`
select a tier without every test file repeating it; and the session's throwaway PostgreSQL
server (``pg_server``, tests/support/postgres.py), shared by the tiers that run the store on
both engines (the unit tier's ``store_url``, the integration tier's ``service_store``). It
starts only when a test of the session asks for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.postgres import PgServer, running_server

_TIERS = {"unit": "unit", "integration": "integration", "runtime": "runtime",
          "container": "container", "fuzz": "fuzz", "browser": "browser",
          "prometheus": "prometheus", "docs": "docs", "verl": "verl"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        try:
            tier = Path(item.fspath).relative_to(here).parts[0]
        except ValueError:
            continue
        marker = _TIERS.get(tier)
        if marker:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    with running_server() as server:
        yield server
