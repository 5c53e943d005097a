"""The webhook outbox across a kill -9: a real ``argus-api`` process (production wiring,
fake cluster) is killed with SIGKILL in the middle of a burst of 200 events and started
again on the same database; the receiver, which verifies every signature with the
independent ``standardwebhooks`` package, gets every event the database committed at
least once (duplicates allowed: the ``webhook-id`` lets a receiver drop them)."""

from __future__ import annotations

from pathlib import Path

from support.webhook_burst import burst


def test_no_event_is_lost_across_a_kill_9_mid_burst(tmp_path: Path) -> None:
    result = burst(tmp_path, events=200, kill_after=100, receiver_delay_s=0.02)
    assert len(result.expected) == 200  # every cancel committed, before or after the kill
    assert result.refused == []  # every delivery verified
    assert result.lost == set()
    assert result.deliveries >= 200
