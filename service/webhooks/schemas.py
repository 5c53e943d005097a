"""The webhooks' part of the OpenAPI document: request and answer schemas
(``service.web.openapi`` adds them and the paths)."""

from __future__ import annotations

from typing import Any

from service.webhooks.events import DESCRIPTIONS, EventType

_TS = {"type": ["string", "null"], "format": "date-time"}
_EVENT_TYPE = {"type": "string", "enum": [t.value for t in EventType],
               "description": "; ".join(f"{t.value}: {d}" for t, d in DESCRIPTIONS.items())}
_FORMAT = {"type": "string", "enum": ["standard", "slack"], "default": "standard",
           "description": "standard: {type, timestamp, data} (Standard Webhooks); slack: "
                          "{text} for a Slack incoming webhook. Both are signed."}

SCHEMAS: dict[str, Any] = {
    "NewWebhook": {
        "type": "object", "required": ["url", "events"], "additionalProperties": False,
        "properties": {
            "url": {"type": "string", "maxLength": 2048,
                    "description": "http or https; loopback, private, link-local, CGNAT, "
                                   "multicast and other non-public addresses are refused "
                                   "unless v2.webhooks.allow_networks allows them"},
            "events": {"type": "array", "minItems": 1, "items": _EVENT_TYPE},
            "format": _FORMAT,
        },
    },
    "Webhook": {
        "type": "object", "required": ["id", "owner", "url", "events", "format"],
        "properties": {
            "id": {"type": "string", "pattern": "^wh_[0-9a-f]{12}$"},
            "owner": {"type": "string"}, "url": {"type": "string"},
            "events": {"type": "array", "items": _EVENT_TYPE}, "format": _FORMAT,
            "created_at": _TS,
        },
    },
    "CreatedWebhook": {
        "allOf": [{"$ref": "#/components/schemas/Webhook"}, {
            "type": "object", "required": ["secret"],
            "properties": {"secret": {
                "type": "string", "pattern": "^whsec_[A-Za-z0-9+/=]+$",
                "description": "the signing secret, shown in this answer only"}}}],
    },
    "WebhookList": {"type": "object", "required": ["webhooks"], "properties": {
        "webhooks": {"type": "array", "items": {"$ref": "#/components/schemas/Webhook"}}}},
    "DeletedWebhook": {"type": "object", "required": ["deleted"],
                       "properties": {"deleted": {"type": "string"}}},
    "Delivery": {
        "type": "object",
        "required": ["id", "event_id", "event_type", "outcome", "attempts"],
        "properties": {
            "id": {"type": "string", "description": "the webhook-id header it is sent with"},
            "event_id": {"type": "integer"}, "event_type": _EVENT_TYPE, "event_at": _TS,
            "outcome": {"type": "string", "enum": ["PENDING", "DELIVERED", "FAILED"]},
            "attempts": {"type": "integer", "minimum": 0},
            "status_code": {"type": ["integer", "null"],
                            "description": "HTTP status of the latest try"},
            "error": {"type": ["string", "null"], "description": "why the latest try failed"},
            "last_attempt_at": _TS,
            "next_retry_at": {**_TS, "description": "while PENDING"},
            "ended_at": _TS,
            "tries": {"type": "array", "description": "every try, oldest first", "items": {
                "type": "object", "required": ["attempt", "at"],
                "properties": {"attempt": {"type": "integer", "minimum": 1}, "at": _TS,
                               "status_code": {"type": ["integer", "null"]},
                               "error": {"type": ["string", "null"]}}}},
        },
    },
    "DeliveryList": {"type": "object", "required": ["webhook", "deliveries"], "properties": {
        "webhook": {"$ref": "#/components/schemas/Webhook"},
        "deliveries": {"type": "array", "items": {"$ref": "#/components/schemas/Delivery"}}}},
}
