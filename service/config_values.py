"""The values of a settings file read and checked, one kind each: a section (a mapping), a
number (with its minimum, an integer or not), a flag, a non-empty string. Every bad value
is a :class:`~service.config.ConfigError` naming its key (``where``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.config import ConfigError


def section(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}{key}: must be a mapping")
    return value


def number(value: Any, where: str, *, minimum: float | None = None, integer: bool = False):
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ConfigError(f"{where}: must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where}: must be >= {minimum}, got {value!r}")
    return value


def numbers(raw: Mapping[str, Any], limits: Mapping[str, tuple[float, bool]],
             where: str) -> dict[str, Any]:
    """The keys of ``limits`` (key: (minimum, integer)) that ``raw`` sets, each checked and
    made an int or a float."""
    out: dict[str, Any] = {}
    for key, (minimum, integer) in limits.items():
        if key in raw:
            value = number(raw[key], f"{where}.{key}", minimum=minimum, integer=integer)
            out[key] = int(value) if integer else float(value)
    return out


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: must be true or false, got {value!r}")
    return value


def text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: must be a non-empty string, got {value!r}")
    return value
