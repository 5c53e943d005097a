"""Delivery outcomes and retries: a pure policy with the clock and jitter passed in."""

from __future__ import annotations

import pytest

from service.webhooks.policy import (
    Outcome,
    RetryPolicy,
    TryResult,
    backoff_s,
    classify,
    decide,
)
from service.webhooks.transport import retry_after_s

POLICY = RetryPolicy(base_s=5, max_s=3600, max_attempts=6, max_age_s=86400)


@pytest.mark.parametrize(("result", "outcome"), [
    (TryResult(200), Outcome.DELIVERED), (TryResult(204), Outcome.DELIVERED),
    (TryResult(299), Outcome.DELIVERED),
    (TryResult(None, "no answer within 5 s"), Outcome.RETRY),
    (TryResult(None, "cannot connect: refused"), Outcome.RETRY),
    (TryResult(500), Outcome.RETRY), (TryResult(502), Outcome.RETRY),
    (TryResult(503), Outcome.RETRY), (TryResult(429), Outcome.RETRY),
    (TryResult(408), Outcome.RETRY),
    (TryResult(301), Outcome.GIVE_UP), (TryResult(302), Outcome.GIVE_UP),
    (TryResult(400), Outcome.GIVE_UP), (TryResult(401), Outcome.GIVE_UP),
    (TryResult(404), Outcome.GIVE_UP), (TryResult(410), Outcome.GIVE_UP),
    (TryResult(None, "refused: loopback", blocked=True), Outcome.GIVE_UP),
])
def test_classify(result: TryResult, outcome: Outcome) -> None:
    assert classify(result) is outcome


@pytest.mark.parametrize(("attempts", "rand", "wait"), [
    (1, 0.0, 2.5), (1, 0.999999, 5.0), (2, 0.0, 5.0), (3, 0.5, 15.0),
    (10, 0.0, 1280.0), (11, 0.0, 1800.0), (40, 0.0, 1800.0), (40, 0.999999, 3600.0),
])
def test_backoff_doubles_with_jitter_up_to_the_cap(attempts: int, rand: float,
                                                   wait: float) -> None:
    assert backoff_s(attempts, POLICY, rand) == pytest.approx(wait, rel=1e-5)


def test_a_retryable_failure_waits_its_backoff() -> None:
    d = decide(TryResult(503), attempts=2, event_ts=1000.0, now=1010.0, policy=POLICY,
               rand=0.0)
    assert (d.state, d.next_at, d.why) == ("PENDING", 1015.0, "HTTP 503")


def test_delivered_and_given_up_end_now() -> None:
    ok = decide(TryResult(200), attempts=1, event_ts=0, now=5, policy=POLICY, rand=0.3)
    assert (ok.state, ok.next_at, ok.why) == ("DELIVERED", 5, None)
    bad = decide(TryResult(404), attempts=1, event_ts=0, now=5, policy=POLICY, rand=0.3)
    assert (bad.state, bad.why) == ("FAILED", "gave up: HTTP 404")
    moved = decide(TryResult(302), attempts=1, event_ts=0, now=5, policy=POLICY, rand=0.3)
    assert moved.state == "FAILED" and "redirects are not followed" in (moved.why or "")


def test_gives_up_after_max_attempts_and_past_max_age() -> None:
    last = decide(TryResult(500), attempts=6, event_ts=0, now=100, policy=POLICY, rand=0)
    assert last.state == "FAILED" and "after 6 tries" in (last.why or "")
    old = decide(TryResult(None, "no answer within 5 s"), attempts=2, event_ts=0,
                 now=86398.0, policy=POLICY, rand=0)
    assert old.state == "FAILED" and "past 86400 s" in (old.why or "")


def test_retry_after_is_honoured_when_longer_and_capped() -> None:
    longer = decide(TryResult(429, retry_after_s=120), attempts=1, event_ts=0, now=10,
                    policy=POLICY, rand=0)
    assert longer.next_at == 130
    shorter = decide(TryResult(429, retry_after_s=1), attempts=1, event_ts=0, now=10,
                     policy=POLICY, rand=0)
    assert shorter.next_at == 12.5
    huge = decide(TryResult(503, retry_after_s=10**6), attempts=1, event_ts=0, now=10,
                  policy=POLICY, rand=0)
    assert huge.next_at == 3610


@pytest.mark.parametrize(("header", "seconds"), [
    (None, None), ("", None), ("120", 120.0), (" 7 ", 7.0), ("soon", None),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 60.0), ("Wed, 21 Oct 2015 07:26:00 GMT", 0.0),
    ("99999999", 86400.0), ("-5", None),
])
def test_retry_after_header(header: str | None, seconds: float | None) -> None:
    now = 1445412420.0  # 2015-10-21T07:27:00Z
    assert retry_after_s(header, now) == seconds
