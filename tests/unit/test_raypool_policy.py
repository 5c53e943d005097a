"""The watchdogs' decision tables, without processes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from raypool.headrecord import HeadRecord
from raypool.policy import Action, ChildState, Limits, decide_head, decide_worker

LIMITS = Limits(start_timeout_s=60, unhealthy_s=10)
HEAD = HeadRecord(cluster_name="argus-ray", head_ip="10.0.0.2", gcs_port=6379,
                  dashboard_port=8265, job_server_url="http://10.0.0.2:8265",
                  generation="g1", seq=3, written_at=0.0, ttl_s=60, hostname="h", pid=1)
NONE = ChildState(running=False)
UP = ChildState(running=True, since_start_s=100, ever_ok=True, not_ok_for_s=0)


@pytest.mark.parametrize("child,healthy,action,words", [
    (NONE, False, Action.START, "no head"),
    (ChildState(running=True, exit_code=1), False, Action.STOP, "exited with code 1"),
    (ChildState(running=True, exit_code=0, ever_ok=True), True, Action.STOP, "code 0"),
    (UP, True, Action.KEEP, "healthy"),
    (ChildState(running=True, since_start_s=5), False, Action.KEEP, "starting"),
    (ChildState(running=True, since_start_s=61), False, Action.STOP, "after start"),
    (replace(UP, not_ok_for_s=9), False, Action.KEEP, "within grace"),
    (replace(UP, not_ok_for_s=11), False, Action.STOP, "not healthy for 11s"),
])
def test_head_table(child, healthy, action, words):
    decision = decide_head(child, healthy, LIMITS)
    assert decision.action is action
    assert words in decision.reason


NEW_GEN = replace(HEAD, generation="g2")
MOVED = replace(HEAD, head_ip="10.0.0.9")


@pytest.mark.parametrize("child,head,healthy,joined,registered,action,words", [
    # nothing running
    (NONE, None, False, None, False, Action.WAIT, "no fresh head record: stale"),
    (NONE, HEAD, False, None, False, Action.WAIT, "does not answer"),
    (NONE, HEAD, True, None, False, Action.START, "joining head 10.0.0.2:6379"),
    # Ray exited: always clean up first, whatever the exit code (a clean SIGTERM exits 1)
    (ChildState(running=True, exit_code=0), HEAD, True, HEAD.target, False, Action.STOP,
     "code 0"),
    (ChildState(running=True, exit_code=1), None, False, HEAD.target, True, Action.STOP,
     "code 1"),
    # running and registered
    (UP, HEAD, False, HEAD.target, True, Action.KEEP, "registered"),
    # a stale/missing record does not tear down a working node
    (UP, None, False, HEAD.target, True, Action.KEEP, "registered"),
    # new generation or new address: start over at once, even while registered
    (UP, NEW_GEN, True, HEAD.target, True, Action.STOP, "generation g2"),
    (UP, MOVED, True, HEAD.target, True, Action.STOP, "new head 10.0.0.9:6379"),
    # `ray stop` leaves `ray start --block` blocking with nothing under it: not registered
    (replace(UP, not_ok_for_s=3), HEAD, True, HEAD.target, False, Action.KEEP, "grace"),
    (replace(UP, not_ok_for_s=12), HEAD, True, HEAD.target, False, Action.STOP,
     "not registered for 12s"),
    # `ray start --address` that never joins (e.g. unreachable GCS) is stopped
    (ChildState(running=True, since_start_s=10), HEAD, True, HEAD.target, False, Action.KEEP,
     "starting"),
    (ChildState(running=True, since_start_s=61), HEAD, True, HEAD.target, False, Action.STOP,
     "61s after start"),
])
def test_worker_table(child, head, healthy, joined, registered, action, words):
    decision = decide_worker(child, head, "stale: written 99s ago", healthy, joined,
                             registered, LIMITS)
    assert decision.action is action
    assert words in decision.reason
