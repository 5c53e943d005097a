"""The webhooks' shapes, declared once: a registration (``NewWebhook``, validated by its
model: ``service.web.api.webhooks.register``) and the answers (a hook, its deliveries).
``service.web.openapi`` generates their part of the document from them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.jobspec.generate import problem, rule
from service.policy.ssrf import MAX_URL_LEN, url_problem
from service.webhooks.events import DESCRIPTIONS, EventType, parse_types

FORMATS = ("standard", "slack")
_ABOUT_TYPES = "; ".join(f"{t.value}: {d}" for t, d in DESCRIPTIONS.items())
Format = Annotated[Literal[FORMATS], Field(  # type: ignore[valid-type]
    description="standard: {type, timestamp, data} (Standard Webhooks); slack: {text} for a "
                "Slack incoming webhook. Both are signed.")]
Timestamp = Annotated[str | None, Field(json_schema_extra={"format": "date-time"})]


class _Answer(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


def _url(value: Any) -> str:
    found = url_problem(value)
    if found:
        raise problem(found)
    return value


def _events(value: Any) -> tuple[EventType, ...]:
    types, found = parse_types(value)
    if found:
        raise problem(found)
    return types


def _format(value: Any) -> str:
    if value not in FORMATS:
        raise problem(f"must be standard or slack, got {str(value)[:40]!r}")
    return value


class NewWebhook(BaseModel):
    """A webhook to register for the caller; its signing secret is in the answer only."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    url: Annotated[str, Field(max_length=MAX_URL_LEN, description=(
        "http or https; loopback, private, link-local, CGNAT, multicast and other "
        "non-public addresses are refused unless v2.webhooks.allow_networks allows them")),
        rule(_url)]
    events: Annotated[list[Annotated[EventType, Field(description=_ABOUT_TYPES)]],
                      Field(min_length=1), rule(_events)]
    format: Annotated[Format, rule(_format)] = "standard"


class Webhook(_Answer):
    id: Annotated[str, Field(pattern="^wh_[0-9a-f]{12}$")]
    owner: str
    url: str
    events: list[EventType]
    format: Format
    created_at: Timestamp = None


class CreatedWebhook(Webhook):
    secret: Annotated[str, Field(pattern="^whsec_[A-Za-z0-9+/=]+$",
                                 description="the signing secret, shown in this answer only")]


class WebhookList(_Answer):
    webhooks: list[Webhook]


class DeletedWebhook(_Answer):
    deleted: str


class DeliveryTry(_Answer):
    attempt: Annotated[int, Field(ge=1)]
    at: Timestamp
    status_code: int | None = None
    error: str | None = None


class Delivery(_Answer):
    id: Annotated[str, Field(description="the webhook-id header it is sent with")]
    event_id: int
    event_type: EventType
    event_at: Timestamp = None
    outcome: Literal["PENDING", "DELIVERED", "FAILED"]
    attempts: Annotated[int, Field(ge=0)]
    status_code: Annotated[int | None, Field(description="HTTP status of the latest try")
                           ] = None
    error: Annotated[str | None, Field(description="why the latest try failed")] = None
    last_attempt_at: Timestamp = None
    next_retry_at: Annotated[Timestamp, Field(description="while PENDING")] = None
    ended_at: Timestamp = None
    tries: Annotated[list[DeliveryTry], Field(description="every try, oldest first")] = []


class DeliveryList(_Answer):
    webhook: Webhook
    deliveries: list[Delivery]


SHAPES = (NewWebhook, Webhook, CreatedWebhook, WebhookList, DeletedWebhook, Delivery,
          DeliveryList)
