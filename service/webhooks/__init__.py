"""Per-user webhooks: signed, retried, never-lost notifications of task outcomes.

* ``events`` (pure): which store events users may subscribe to (``SOURCES``: event kind ->
  webhook event type), the data a delivery carries, and the bodies (standard, Slack).
* ``signing`` (pure): secrets and signatures the Standard Webhooks way.
* ``policy`` (pure): what one try's outcome means (delivered, retry, give up) and when
  the next try is due.
* ``settings`` (pure): ``v2.webhooks`` parsed and frozen.
* ``transport``: the HTTP client (aiohttp) that connects only to the addresses
  ``service.policy.ssrf`` allows, and the resolution check at registration.

The delivery loop is the engine's (``service.engine.webhook_delivery``, an asyncio task of
the API process); registering a hook is a use case (``service.usecases.webhooks``).

The outbox rows are written by ``service.store.outbox.enqueue`` inside the store's
transaction of the event itself (``WriteCore.event``).
"""
