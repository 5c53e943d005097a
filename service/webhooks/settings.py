"""``v2.webhooks``: parsed once, frozen (``service.config`` holds the result).

    v2:
      webhooks:
        enabled: true            # the delivery worker runs (the outbox is written anyway)
        allow_networks: []       # CIDRs the SSRF rules let through, e.g. ["127.0.0.0/8"]
        max_per_user: 10         # hooks a user may hold
        timeout_s: 5             # one try, connect to last byte
        concurrency: 16          # tries in flight at once
        per_host: 4              # ... of which to one host
        max_attempts: 12
        max_age_s: 86400         # no try later than this after the event
        retry_base_s: 5          # first backoff (doubles per try, jittered)
        retry_max_s: 3600
        poll_s: 0.25             # how often the worker looks for due deliveries
        keep_s: 604800           # ended deliveries are kept this long (the owner's history)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from service.policy.ssrf import IPNetwork
from service.webhooks.policy import RetryPolicy


@dataclass(frozen=True)
class WebhookSettings:
    enabled: bool = True
    allow_networks: tuple[IPNetwork, ...] = ()
    max_per_user: int = 10
    timeout_s: float = 5.0
    concurrency: int = 16
    per_host: int = 4
    max_attempts: int = 12
    max_age_s: float = 86400.0
    retry_base_s: float = 5.0
    retry_max_s: float = 3600.0
    poll_s: float = 0.25
    keep_s: float = 7 * 86400.0

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(base_s=self.retry_base_s, max_s=self.retry_max_s,
                           max_attempts=self.max_attempts, max_age_s=self.max_age_s)


# key: (minimum, integer)
_NUMBERS: dict[str, tuple[float, bool]] = {
    "max_per_user": (0, True), "timeout_s": (0.1, False), "concurrency": (1, True),
    "per_host": (1, True), "max_attempts": (1, True), "max_age_s": (1, False),
    "retry_base_s": (0.01, False), "retry_max_s": (0.01, False), "poll_s": (0.01, False),
    "keep_s": (60, False),
}


def _network(value: Any, where: str) -> IPNetwork:
    if not isinstance(value, str):
        raise ValueError(f"{where}: must be a CIDR string such as 127.0.0.0/8, got {value!r}")
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


def webhook_settings(raw: Mapping[str, Any]) -> WebhookSettings:
    """Validated settings; ``ValueError`` naming the key on a bad value."""
    unknown = set(raw) - {f.name for f in fields(WebhookSettings)}
    if unknown:
        raise ValueError(f"v2.webhooks: unknown keys {sorted(map(str, unknown))}")
    out: dict[str, Any] = {}
    if "enabled" in raw:
        if not isinstance(raw["enabled"], bool):
            raise ValueError(f"v2.webhooks.enabled: must be true or false, got "
                             f"{raw['enabled']!r}")
        out["enabled"] = raw["enabled"]
    if "allow_networks" in raw:
        nets = raw["allow_networks"] or []
        if not isinstance(nets, list):
            raise ValueError("v2.webhooks.allow_networks: must be a list of CIDRs")
        out["allow_networks"] = tuple(_network(v, f"v2.webhooks.allow_networks[{i}]")
                                      for i, v in enumerate(nets))
    for key, (minimum, integer) in _NUMBERS.items():
        if key not in raw:
            continue
        value = raw[key]
        where = f"v2.webhooks.{key}"
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                integer and not isinstance(value, int)):
            kind = "an integer" if integer else "a number"
            raise ValueError(f"{where}: must be {kind}, got {value!r}")
        if value < minimum:
            raise ValueError(f"{where}: must be >= {minimum:g}, got {value!r}")
        out[key] = int(value) if integer else float(value)
    hooks = WebhookSettings(**out)
    if hooks.retry_max_s < hooks.retry_base_s:
        raise ValueError("v2.webhooks.retry_max_s: must be >= retry_base_s")
    return hooks
