"""``v2.webhooks``, parsed by ``service.config`` (once, frozen) into :class:`WebhookSettings`.

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

from dataclasses import dataclass

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
