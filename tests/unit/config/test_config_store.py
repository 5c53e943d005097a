"""The store's setting: ``v2.store.url`` (or ``ARGUS_STORE_URL``), the SQLite file when
unset."""

from __future__ import annotations

import pytest

from service.config import ConfigError
from service.config_load import load_settings, settings_from_mapping


def test_unset_the_store_is_the_sqlite_file() -> None:
    settings = settings_from_mapping({"ray": {"shared_root": "/srv"}})
    assert settings.store_url is None
    assert settings.resolved_store == "/srv/common/db/mvp_v2.sqlite3"


def test_the_url_from_the_file_and_from_the_environment(tmp_path) -> None:
    url = "postgresql://argus@db:5432/argus"
    assert settings_from_mapping({"v2": {"store": {"url": url}}}).resolved_store == url
    config = tmp_path / "c.yaml"
    config.write_text("v2:\n  store: {url: 'sqlite:///var/argus.db'}\n")
    assert load_settings(config, {}).resolved_store == "sqlite:///var/argus.db"
    assert load_settings(config, {"ARGUS_STORE_URL": url}).resolved_store == url


@pytest.mark.parametrize("url", ["mysql://u:secret@h/db", "argus.db", "sqlite://rel.db"])
def test_a_url_of_no_known_engine_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError, match=r"v2\.store\.url: sqlite:///absolute/path or "
                       r"postgresql://") as caught:
        settings_from_mapping({"v2": {"store": {"url": url}}})
    assert "secret" not in str(caught.value)


def test_the_lease_ttl_defaults_by_engine_and_is_read_from_either_section(tmp_path) -> None:
    pg = "postgresql://argus@db:5432/argus"
    assert settings_from_mapping({}).resolved_lease_ttl_s == 15.0
    assert settings_from_mapping({"v2": {"store": {"url": pg}}}).resolved_lease_ttl_s == 6.0
    config = tmp_path / "c.yaml"
    config.write_text("v2: {}\n")
    assert load_settings(config, {"ARGUS_STORE_URL": pg}).resolved_lease_ttl_s == 6.0
    assert settings_from_mapping(
        {"v2": {"store": {"url": pg, "lease_ttl_s": 9}}}).resolved_lease_ttl_s == 9.0
    assert settings_from_mapping({"v2": {"sqlite": {"lease_ttl_s": 20}}}).resolved_lease_ttl_s \
        == 20.0
    with pytest.raises(ConfigError, match=r"v2\.store\.lease_ttl_s"):
        settings_from_mapping({"v2": {"store": {"lease_ttl_s": 1}}})
    with pytest.raises(ConfigError, match=r"v2\.store: unknown keys \['ttl'\]"):
        settings_from_mapping({"v2": {"store": {"ttl": 1}}})
