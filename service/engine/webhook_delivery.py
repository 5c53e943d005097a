"""The webhook delivery loop: an asyncio task of the API process that sends the outbox.

It never runs in the scheduler's thread and never blocks the event loop: store calls go
to a lane of their own (one thread), HTTP goes through aiohttp with a total timeout per
try, at most ``concurrency`` tries at once and ``per_host`` to one host. Every
``poll_s`` it reads when the next delivery is due (one indexed read); when one is, it
claims the due rows with a lease (their try counted), sends each, and records what
``policy.decide`` makes of the outcome. A try begun before a kill -9 is lost with the
process, not the row: start-up voids every lease (one service per database) and the
row is sent again, with the same ``webhook-id``: at least once, never never.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
from aiohttp import web

from service.domain.rows import ClaimedDelivery
from service.store.offload import Offload
from service.store.writer import Store
from service.webhooks import events, signing, transport
from service.webhooks.policy import TryResult, decide
from service.webhooks.settings import WebhookSettings

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 600.0


class DeliveryWorker:
    """Sends the outbox of ``store`` (see the module docstring)."""

    def __init__(self, store: Store, settings: WebhookSettings, *,
                 clock: Callable[[], float] = time.time,
                 rand: Callable[[], float] = random.random,
                 thread_init: Callable[[], None] | None = None) -> None:
        """``thread_init``: run first on the worker's store lane (the leader fences it)."""
        self.store = store
        self.thread_init = thread_init
        self.settings = settings
        self.clock = clock
        self.rand = rand
        self.lease_s = max(60.0, 4 * settings.timeout_s)
        self.delivered = 0
        self.failed = 0
        self._lane = Offload("argus-webhooks", 1)
        self._inflight: set[asyncio.Task[None]] = set()
        self._client: aiohttp.ClientSession | None = None
        self._freed = asyncio.Event()  # a try ended: its slot may take the next one

    async def open(self) -> None:
        """Void the leases of a process that is gone and open the HTTP client."""
        s = self.settings
        if self.thread_init is not None:
            await self._lane.run(self.thread_init)  # the lane's one thread, for good
        released = await self._lane.run(self.store.webhooks.release_webhook_leases)
        if released:
            log.info("webhooks: %d delivery(ies) held before the restart are due again",
                     released)
        self._client = transport.session(s.allow_networks, timeout_s=s.timeout_s,
                                         concurrency=s.concurrency, per_host=s.per_host)

    async def close(self) -> None:
        """Let the tries in flight finish (bounded by the timeout), then close."""
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=self.settings.timeout_s + 1)
        if self._client is not None:
            await self._client.close()
        self._lane.close()

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop`` is set."""
        await self.open()
        pruned_at = float("-inf")
        try:
            while not stop.is_set():
                try:
                    await self.step()
                    if self.clock() - pruned_at >= PRUNE_EVERY_S:
                        pruned_at = self.clock()
                        await self._lane.run(self.store.webhooks.prune_webhook_deliveries,
                                             pruned_at - self.settings.keep_s)
                except Exception:  # a storage fault: the rows wait, nothing is lost
                    log.exception("webhooks: the delivery loop failed; trying again")
                await self._pause(stop)
        finally:
            await self.close()

    async def _pause(self, stop: asyncio.Event) -> None:
        """Until ``poll_s`` passed, ``stop`` is set, or a try ended (a backlog drains at
        the receivers' pace, not one claim per poll)."""
        self._freed.clear()
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._freed.wait())]
        try:
            await asyncio.wait(waits, timeout=self.settings.poll_s,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()

    async def step(self) -> int:
        """Claim what is due, as far as the concurrency allows, and start sending it;
        returns how many tries were started."""
        free = self.settings.concurrency - len(self._inflight)
        if free <= 0:
            return 0
        due = await self._lane.run(self.store.webhooks.next_webhook_due)
        now = self.clock()
        if due is None or due > now:
            return 0
        claims = await self._lane.run(self.store.webhooks.claim_webhook_deliveries, now, free,
                                      self.lease_s)
        for claim in claims:
            task = asyncio.create_task(self._deliver(claim),
                                       name=f"argus-webhook-{claim.delivery_id}")
            self._inflight.add(task)
            task.add_done_callback(self._done)
        return len(claims)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._freed.set()

    async def drain(self) -> None:
        """Wait for the tries in flight (a test's step by step drive)."""
        while self._inflight:
            await asyncio.wait(set(self._inflight))

    async def _deliver(self, claim: ClaimedDelivery) -> None:
        assert self._client is not None
        hook = claim.hook
        body = events.body(hook.format, claim.event_type, claim.event_ts,
                           json.loads(claim.data_json))
        msg_id = signing.message_id(claim.delivery_id)
        began = self.clock()
        headers = signing.headers(hook.secret, msg_id, int(began), body)
        try:
            result = await transport.send(self._client, hook.url, headers, body,
                                          allow=self.settings.allow_networks,
                                          now=self.clock())
        except Exception as exc:  # a fault of ours: counted as a failed try, not lost
            log.exception("webhooks: sending %s to hook %s failed", msg_id, hook.hook_id)
            result = TryResult(None, f"could not be sent ({type(exc).__name__})")
        decision = decide(result, attempts=claim.attempts, event_ts=claim.event_ts,
                          now=self.clock(), policy=self.settings.retry, rand=self.rand())
        try:
            await self._lane.run(self.store.webhooks.record_webhook_try, claim, decision,
                                 result.status, began)
        except Exception:  # the lease runs out and the row is tried again
            log.exception("webhooks: recording the try of %s failed", msg_id)
            return
        if decision.state == "DELIVERED":
            self.delivered += 1
        elif decision.state == "FAILED":
            self.failed += 1
            log.warning("webhooks: %s to hook %s (%s) of %s: %s", msg_id, hook.hook_id,
                        claim.event_type, hook.owner, decision.why)


def _report_end(task: asyncio.Task[None]) -> None:
    """A worker that stopped on its own is said loudly (the outbox keeps filling and is
    delivered after the next start)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("webhooks: the delivery worker stopped: %r; deliveries wait for a "
                  "restart", task.exception())


class Delivery:
    """The worker of one app: ``begin`` starts it (on the event loop; the leader's
    singletons start when it is elected), the app's cleanup stops it before the store
    closes."""

    def __init__(self, worker: DeliveryWorker) -> None:
        self.worker = worker
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def begin(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.worker.run(self._stop), name="argus-webhooks")
            self._task.add_done_callback(_report_end)

    async def end(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task


def attach(app: web.Application, store: Store, settings: WebhookSettings, *,
           thread_init: Callable[[], None] | None = None) -> Delivery:
    """A worker for ``app``'s lifetime, started by ``Delivery.begin`` and stopped before
    the app's cleanup closes the store."""
    delivery = Delivery(DeliveryWorker(store, settings, thread_init=thread_init))

    async def lifetime(_: web.Application) -> AsyncIterator[None]:
        yield
        await delivery.end()

    app.cleanup_ctx.append(lifetime)
    return delivery
