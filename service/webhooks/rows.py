"""The typed rows of webhooks and their deliveries (``service.store.webhooks``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WebhookRow:
    hook_id: str
    owner: str
    url: str
    events: tuple[str, ...]
    format: str  # standard | slack
    secret: str  # never leaves the service but in the answer that created the hook
    created_at: float


@dataclass(frozen=True, slots=True)
class TryRow:
    """One try of a delivery and its outcome."""

    attempt: int
    at: float
    status: int | None  # HTTP status (None: no answer)
    error: str | None


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    delivery_id: int
    hook_id: str
    event_id: int
    event_type: str
    event_ts: float
    state: str  # PENDING | DELIVERED | FAILED
    attempts: int
    next_at: float
    last_attempt_at: float | None
    last_status: int | None
    last_error: str | None
    ended_at: float | None
    tries: tuple[TryRow, ...] = ()  # oldest first


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A delivery the worker holds (a lease) for one try, ``attempts`` counting it."""

    delivery_id: int
    hook: WebhookRow
    event_id: int
    event_type: str
    event_ts: float
    data_json: str
    attempts: int
