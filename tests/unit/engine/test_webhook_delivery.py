"""The webhook delivery loop (``service.engine.webhook_delivery``) against a local aiohttp
receiver: signed bodies, retries with backoff on 5xx and timeouts, giving up on 4xx and
redirects, the SSRF rules at delivery. The worker is driven step by step with an injected
clock (no sleeps)."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pytest
from aiohttp import web
from standardwebhooks import Webhook

from service.domain.newtask import NewTask
from service.engine.webhook_delivery import DeliveryWorker
from service.store.writer import Store
from service.webhooks.settings import WebhookSettings

TID = "mvp2-ppo-20251223-143201-7f3a"  # the first task's id (cancel_a_task)
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
SETTINGS = WebhookSettings(allow_networks=LOOPBACK, timeout_s=2.0, retry_base_s=10.0)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()  # the receiver's library checks signatures' timestamps

    def __call__(self) -> float:
        return self.now


class Receiver:
    """Answers each request with the next of ``answers`` (then 204); keeps what came."""

    def __init__(self) -> None:
        self.answers: list[web.StreamResponse | float] = []  # a float: hang that long
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.redirected = 0

    async def hook(self, request: web.Request) -> web.StreamResponse:
        self.got.append((dict(request.headers), await request.read()))
        answer = self.answers.pop(0) if self.answers else web.Response(status=204)
        if isinstance(answer, float):
            await asyncio.sleep(answer)  # a receiver that hangs past the timeout
            return web.Response(status=204)
        return answer

    async def elsewhere(self, request: web.Request) -> web.Response:
        self.redirected += 1
        return web.Response(status=200)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store(store_url)
    s.users.ensure_users(bootstrap_admin="admin", default_user="admin", now=1.0)
    s.users.create_user("alice", "user", 1.0)  # type: ignore[arg-type]
    yield s
    s.close()


@pytest.fixture
async def receiver(aiohttp_server) -> AsyncIterator[tuple[Receiver, str]]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/hook", r.hook)
    app.router.add_post("/elsewhere", r.elsewhere)
    server = await aiohttp_server(app, host="127.0.0.1")
    yield r, f"http://127.0.0.1:{server.port}"


async def make_worker(store: Store, clock: Clock, settings: WebhookSettings = SETTINGS
                      ) -> DeliveryWorker:
    worker = DeliveryWorker(store, settings, clock=clock, rand=lambda: 0.0)
    await worker.open()
    return worker


async def run_step(worker: DeliveryWorker) -> int:
    started = await worker.step()
    await worker.drain()
    return started


def cancel_a_task(store: Store, clock: Clock, n: int = 0) -> str:
    task = TID[:-1] + "abcdef"[n]
    store.tasks.create_task(NewTask(id_prefix="", workload="ppo", text="x", spec={}, nnodes=1,
                                    n_gpus_per_node=1, user="alice", created_at=clock.now,
                                    priority=0), task_id=task)
    store.tasks.cancel(task, clock.now, by="alice")
    return task


def register(store: Store, url: str, fmt: str = "standard") -> tuple[str, str]:
    hook = store.webhooks.create_webhook(owner="alice", url=url, events=["task.canceled"], fmt=fmt,
                                         now=1.0, max_per_user=10)
    return hook.hook_id, hook.secret


async def test_delivers_a_signed_body_the_library_verifies(store, receiver) -> None:
    r, base = receiver
    clock = Clock()
    hook_id, secret = register(store, f"{base}/hook")
    cancel_a_task(store, clock)
    worker = await make_worker(store, clock)
    try:
        assert await run_step(worker) == 1
    finally:
        await worker.close()
    [(headers, body)] = r.got
    doc = Webhook(secret).verify(body, headers)
    assert doc["type"] == "task.canceled"
    assert doc["data"]["task_id"] == TID and doc["data"]["owner"] == "alice"
    assert headers["webhook-id"] == "msg_1"
    [row] = store.webhooks.webhook_deliveries(hook_id, 10)
    assert (row.state, row.attempts, row.last_status) == ("DELIVERED", 1, 204)


async def test_retries_5xx_with_backoff_then_delivers_with_the_same_id(store,
                                                                        receiver) -> None:
    r, base = receiver
    clock = Clock()
    hook_id, secret = register(store, f"{base}/hook")
    cancel_a_task(store, clock)
    r.answers = [web.Response(status=503), web.Response(status=429)]
    worker = await make_worker(store, clock)
    try:
        assert await run_step(worker) == 1
        [row] = store.webhooks.webhook_deliveries(hook_id, 10)
        assert (row.state, row.last_status) == ("PENDING", 503)
        assert row.next_at == pytest.approx(clock.now + 5.0)  # base 10 s, jitter 0 -> half
        assert await run_step(worker) == 0  # not due yet
        clock.now += 5.0
        assert await run_step(worker) == 1
        clock.now += 10.0
        assert await run_step(worker) == 1
    finally:
        await worker.close()
    [row] = store.webhooks.webhook_deliveries(hook_id, 10)
    assert (row.state, row.attempts, row.last_status) == ("DELIVERED", 3, 204)
    assert [(t.attempt, t.status) for t in row.tries] == [(1, 503), (2, 429), (3, 204)]
    assert len({h["webhook-id"] for h, _ in r.got}) == 1  # the receiver drops duplicates
    for headers, body in r.got:
        Webhook(secret).verify(body, headers)


@pytest.mark.parametrize(("status", "why"), [
    (404, "gave up: HTTP 404"),
    (410, "gave up: HTTP 410"),
])
async def test_gives_up_on_4xx(store, receiver, status, why) -> None:
    r, base = receiver
    clock = Clock()
    hook_id, _ = register(store, f"{base}/hook")
    cancel_a_task(store, clock)
    r.answers = [web.Response(status=status)]  # a response of this run's own: sent once
    worker = await make_worker(store, clock)
    try:
        await run_step(worker)
        clock.now += 3600
        assert await run_step(worker) == 0
    finally:
        await worker.close()
    [row] = store.webhooks.webhook_deliveries(hook_id, 10)
    assert (row.state, row.attempts, row.last_error) == ("FAILED", 1, why)


async def test_a_redirect_is_not_followed(store, receiver) -> None:
    r, base = receiver
    clock = Clock()
    hook_id, _ = register(store, f"{base}/hook")
    cancel_a_task(store, clock)
    r.answers = [web.Response(status=307, headers={"Location": f"{base}/elsewhere"})]
    worker = await make_worker(store, clock)
    try:
        await run_step(worker)
    finally:
        await worker.close()
    [row] = store.webhooks.webhook_deliveries(hook_id, 10)
    assert row.state == "FAILED" and "redirects are not followed" in row.last_error
    assert r.redirected == 0


async def test_a_slow_receiver_times_out_and_is_retried(store, receiver) -> None:
    r, base = receiver
    clock = Clock()
    hook_id, _ = register(store, f"{base}/hook")
    cancel_a_task(store, clock)
    r.answers = [5.0]
    worker = await make_worker(store, clock, replace(SETTINGS, timeout_s=0.3))
    try:
        await run_step(worker)
    finally:
        await worker.close()
    [row] = store.webhooks.webhook_deliveries(hook_id, 10)
    assert (row.state, row.last_status, row.last_error) == (
        "PENDING", None, "no answer within 0.3 s")


async def test_targets_the_rules_refuse_at_delivery_are_given_up(store, receiver) -> None:
    """A hook registered while allowed (or an address that changed since) is checked
    again at each delivery: without the allowance, loopback is refused, nothing sent."""
    r, base = receiver
    clock = Clock()
    by_ip, _ = register(store, f"{base}/hook")
    by_name, _ = register(store, f"{base.replace('127.0.0.1', 'localhost')}/hook")
    cancel_a_task(store, clock)
    worker = await make_worker(store, clock, replace(SETTINGS, allow_networks=()))
    try:
        assert await run_step(worker) == 2
    finally:
        await worker.close()
    assert r.got == []
    for hook_id in (by_ip, by_name):
        [row] = store.webhooks.webhook_deliveries(hook_id, 10)
        assert row.state == "FAILED" and "loopback" in row.last_error, row


async def test_the_slack_format_is_a_text_body(store, receiver) -> None:
    r, base = receiver
    clock = Clock()
    _, secret = register(store, f"{base}/hook", fmt="slack")
    cancel_a_task(store, clock)
    worker = await make_worker(store, clock)
    try:
        await run_step(worker)
    finally:
        await worker.close()
    [(headers, body)] = r.got
    doc = Webhook(secret).verify(body, headers)
    assert set(doc) == {"text"} and TID in doc["text"] and "task.canceled" in doc["text"]


async def test_concurrency_bounds_the_claims(store, receiver) -> None:
    r, base = receiver
    clock = Clock()
    hook_id, _ = register(store, f"{base}/hook")
    for n in range(5):
        cancel_a_task(store, clock, n)
    worker = await make_worker(store, clock, replace(SETTINGS, concurrency=2))
    try:
        assert await run_step(worker) == 2
        assert await run_step(worker) == 2
        assert await run_step(worker) == 1
    finally:
        await worker.close()
    assert len(r.got) == 5
    assert {d.state for d in store.webhooks.webhook_deliveries(hook_id, 10)} == {"DELIVERED"}


async def test_run_delivers_until_stopped(store, receiver) -> None:
    r, base = receiver
    clock = Clock()
    register(store, f"{base}/hook")
    worker = DeliveryWorker(store, replace(SETTINGS, poll_s=0.01), clock=clock)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    cancel_a_task(store, clock)
    deadline = time.monotonic() + 10
    while not r.got and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # polling the receiver, with a deadline
    stop.set()
    await asyncio.wait_for(task, 10)
    assert len(r.got) == 1 and worker.delivered == 1


async def test_a_worker_that_stops_on_its_own_is_reported(caplog) -> None:
    from service.engine.webhook_delivery import _report_end

    async def dies() -> None:
        raise RuntimeError("disk gone")

    task = asyncio.create_task(dies())
    await asyncio.wait([task])
    _report_end(task)
    assert "the delivery worker stopped" in caplog.text and "disk gone" in caplog.text


@pytest.mark.parametrize(("url", "why"), [
    ("http://a..b/hook", "refused: host 'a..b' has an empty label"),
    ("http://169.254.169.254.\u3002/", "refused: host '169.254.169.254.\u3002' has an empty"),
    ("http://xn--zz.example/hook", "refused: host 'xn--zz.example' has a label that is not"),
])
async def test_a_malformed_host_at_delivery_is_a_refused_try(store, url, why) -> None:
    """A hook whose host has no wire form (stored before the rule, or by hand) is given
    up at its first try, saying why: no exception, no try left leased."""
    clock = Clock()
    hook_id, _ = register(store, url)
    cancel_a_task(store, clock)
    worker = await make_worker(store, clock)
    try:
        assert await run_step(worker) == 1
        clock.now += 3600
        assert await run_step(worker) == 0
    finally:
        await worker.close()
    [row] = store.webhooks.webhook_deliveries(hook_id, 10)
    assert (row.state, row.attempts, row.last_status) == ("FAILED", 1, None), row
    assert row.last_error.startswith(f"gave up: {why}"), row.last_error
    assert worker.failed == 1


async def test_an_ip_literal_with_other_dots_is_judged_as_sent(store, receiver) -> None:
    """yarl reads 127。0。0。1 as the IP literal 127.0.0.1 and connects to it without
    a resolver: it is judged as that literal (refused as loopback without the allowance)
    and sent to it (with it)."""
    r, base = receiver
    clock = Clock()
    odd = base.replace("127.0.0.1", "127\u30020\u30020\u30021")
    hook_id, _ = register(store, f"{odd}/hook")
    cancel_a_task(store, clock)
    worker = await make_worker(store, clock, replace(SETTINGS, allow_networks=()))
    try:
        assert await run_step(worker) == 1
    finally:
        await worker.close()
    assert r.got == []
    [row] = store.webhooks.webhook_deliveries(hook_id, 10)
    assert row.state == "FAILED" and "address 127.0.0.1 is loopback" in row.last_error, row

    store.webhooks.delete_webhook(hook_id)
    allowed, _ = register(store, f"{odd}/hook")
    cancel_a_task(store, clock, 1)
    worker = await make_worker(store, clock)
    try:
        assert await run_step(worker) == 1
    finally:
        await worker.close()
    assert len(r.got) == 1 and r.got[0][0]["Host"].startswith("127.0.0.1:")
    [row] = store.webhooks.webhook_deliveries(allowed, 10)
    assert row.state == "DELIVERED", row


async def test_a_fault_while_sending_is_a_failed_try_not_a_lost_one(store, monkeypatch,
                                                                     caplog) -> None:
    from service.webhooks import transport

    async def broken(*_args, **_kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(transport, "send", broken)
    clock = Clock()
    hook_id, _ = register(store, "http://127.0.0.1:9/hook")
    cancel_a_task(store, clock)
    worker = await make_worker(store, clock)
    try:
        assert await run_step(worker) == 1
    finally:
        await worker.close()
    [row] = store.webhooks.webhook_deliveries(hook_id, 10)
    assert (row.state, row.attempts, row.last_error) == (
        "PENDING", 1, "could not be sent (RuntimeError)"), row
    assert "a bug" in caplog.text
