"""``v2.progress``: the log follower's settings, validated once with a clear error."""

from __future__ import annotations

import pytest

from service.config import ConfigError, ProgressSettings
from service.config_load import settings_from_mapping


def test_defaults_and_values() -> None:
    assert settings_from_mapping({}).progress == ProgressSettings()
    got = settings_from_mapping({"v2": {"progress": {
        "enabled": False, "poll_s": 0.5, "max_points": 64, "max_read_chars": 4096}}}).progress
    assert got == ProgressSettings(enabled=False, poll_s=0.5, max_points=64,
                                   max_read_chars=4096)


@pytest.mark.parametrize(("raw", "message"), [
    ({"poll_s": 0}, "v2.progress.poll_s: must be >= 0.1"),
    ({"max_points": 1}, "v2.progress.max_points: must be >= 2"),
    ({"max_points": 10.5}, "v2.progress.max_points: must be an integer"),
    ({"max_read_chars": 10}, "v2.progress.max_read_chars: must be >= 1024"),
    ({"enabled": "yes"}, "v2.progress.enabled: must be true or false"),
    ({"poll": 5}, "v2.progress: unknown keys ['poll']"),
    ("on", "v2.progress: must be a mapping"),
])
def test_bad_values_are_refused_with_the_key(raw: object, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        settings_from_mapping({"v2": {"progress": raw}})
    assert message in str(exc.value)
