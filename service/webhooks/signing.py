"""Secrets and signatures the Standard Webhooks way (https://www.standardwebhooks.com/).

A secret is ``whsec_`` + base64 of 32 random bytes; a delivery carries ``webhook-id``
(the same on every retry, so a receiver drops duplicates), ``webhook-timestamp`` (epoch
seconds of this try) and ``webhook-signature``: ``v1,`` + base64 HMAC-SHA256, keyed with
the secret's decoded bytes, over ``<id>.<timestamp>.<body>``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("a webhook secret starts with whsec_")
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)


def message_id(delivery_id: int) -> str:
    """The ``webhook-id`` of a delivery (one event to one hook), stable across retries."""
    return f"msg_{delivery_id}"


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, msg_id, timestamp, body),
        "content-type": "application/json",
    }
