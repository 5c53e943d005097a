"""Webhook signatures, checked by an independent implementation (``standardwebhooks``)."""

from __future__ import annotations

import base64
import json
import time

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from service.webhooks import events, signing
from service.webhooks.events import EventType


def test_a_new_secret_is_whsec_and_32_random_bytes() -> None:
    one, two = signing.new_secret(), signing.new_secret()
    assert one != two
    assert one.startswith("whsec_")
    assert len(base64.b64decode(one.removeprefix("whsec_"), validate=True)) == 32


@pytest.mark.parametrize("fmt", ["standard", "slack"])
def test_the_independent_library_verifies_what_we_sign(fmt: str) -> None:
    secret = signing.new_secret()
    now = int(time.time())  # the library checks the timestamp against its own clock
    data = {"event_id": 7, "task_id": "mvp2-alice-ppo-20260101-000000-abcd",
            "state": "FAILED", "reason": "RUNTIME_ERROR: ünïcode \u2028 and \"quotes\""}
    body = events.body(fmt, EventType.TASK_FAILED, now, data)
    headers = signing.headers(secret, signing.message_id(41), now, body)
    assert headers["webhook-id"] == "msg_41"
    doc = Webhook(secret).verify(body, headers)
    if fmt == "standard":
        assert doc == {"type": "task.failed", "timestamp": doc["timestamp"], "data": data}
    else:
        assert set(doc) == {"text"} and "task.failed" in doc["text"]


@pytest.mark.parametrize("tamper", ["body", "id", "timestamp", "secret"])
def test_any_change_fails_verification(tamper: str) -> None:
    secret = signing.new_secret()
    now = int(time.time())
    body = json.dumps({"type": "task.succeeded", "data": {"event_id": 1}}).encode()
    headers = signing.headers(secret, "msg_1", now, body)
    if tamper == "body":
        body = body.replace(b"1", b"2")
    elif tamper == "id":
        headers["webhook-id"] = "msg_2"
    elif tamper == "timestamp":
        headers["webhook-timestamp"] = str(now - 1)
    else:
        secret = signing.new_secret()
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers)


def test_the_signature_is_hmac_sha256_over_id_timestamp_body() -> None:
    """The documented construction, byte for byte (a receiver without a library)."""
    import hashlib
    import hmac

    key = bytes(range(32))
    secret = "whsec_" + base64.b64encode(key).decode()
    want = hmac.new(key, b"msg_9.1700000000.{}", hashlib.sha256).digest()
    assert signing.signature(secret, "msg_9", 1700000000, b"{}") == (
        "v1," + base64.b64encode(want).decode())


def test_a_secret_without_its_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="whsec_"):
        signing.signature("c2VjcmV0", "msg_1", 1, b"")
