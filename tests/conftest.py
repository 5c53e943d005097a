"""Tier markers from the directory a test lives in, so `-m unit` / `-m integration` /
`-m runtime` / `-m container` / `-m fuzz` / `-m browser` / `-m prometheus` / `-m docs`
select a tier without every test file repeating it."""

from __future__ import annotations

from pathlib import Path

import pytest

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
