"""The watchdogs' decision tables, without processes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from raypool.headrecord import HeadRecord
from raypool.policy import (
    Action,
    ChildState,
    GcsView,
    Joined,
    Limits,
    bootstrap_record_blocks_head,
    decide_head,
    decide_worker,
)

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


@pytest.mark.parametrize("problem,action,words", [
    (None, Action.START, "no head"),
    ("GCS store lock /s.lock is held by host=h2 pid=9", Action.WAIT, "held by host=h2"),
])
def test_head_waits_for_the_store_lock(problem, action, words):
    decision = decide_head(NONE, False, LIMITS, problem)
    assert decision.action is action and words in decision.reason


def test_a_running_head_is_judged_by_health_not_the_lock():
    assert decide_head(UP, True, LIMITS, "held").action is Action.KEEP


@pytest.mark.parametrize("recorded,address,blocks", [
    ("10.0.0.2:6379", "10.0.0.2:6379", True),     # this head's address: ray start refuses
    ("10.0.0.2:6379\n", "10.0.0.2:6379", True),   # Ray strips what it reads
    ("[fd00::2]:6379", "[fd00::2]:6379", True),
    (None, "10.0.0.2:6379", False),               # no file: nothing to refuse on
    ("", "10.0.0.2:6379", False),
    ("10.0.0.2:6380", "10.0.0.2:6379", False),    # another port: another cluster's file
    ("10.0.0.9:6379", "10.0.0.2:6379", False),    # another head's address
])
def test_a_bootstrap_record_naming_this_head_blocks_its_start(recorded, address, blocks):
    assert bootstrap_record_blocks_head(recorded, address) is blocks


GCS_LIMITS = Limits(start_timeout_s=60, unhealthy_s=10, gcs_wait_s=300)
STORED = replace(HEAD, cluster_id="c1")
RESTARTED = replace(STORED, generation="g2", seq=1)   # same store: same cluster
WIPED = replace(STORED, generation="g3", cluster_id="c9")
MOVED = replace(STORED, head_ip="10.0.0.9")
BY_IP = Joined("c1", "10.0.0.2:6379", by_name=False)
BY_NAME = Joined("c1", "10.0.0.2:6379", by_name=True)
OLD_FORMAT = Joined("g1", "10.0.0.2:6379", by_name=False)  # a record with no cluster id
R, U, S = GcsView.REGISTERED, GcsView.UNKNOWN, GcsView.SILENT


@pytest.mark.parametrize("child,head,healthy,joined,view,action,words", [
    # nothing running
    (NONE, None, False, None, U, Action.WAIT, "no fresh head record: stale"),
    (NONE, STORED, False, None, U, Action.WAIT, "does not answer"),
    (NONE, STORED, True, None, U, Action.START, "joining head 10.0.0.2:6379"),
    # Ray exited: always clean up first, whatever the exit code (a clean SIGTERM exits 1)
    (ChildState(running=True, exit_code=0), STORED, True, BY_IP, U, Action.STOP, "code 0"),
    (ChildState(running=True, exit_code=1), None, False, BY_IP, R, Action.STOP, "code 1"),
    # running and registered; a stale/missing record does not tear down a working node
    (UP, STORED, False, BY_IP, R, Action.KEEP, "registered"),
    (UP, None, False, BY_IP, R, Action.KEEP, "registered"),
    # a head restart of the same cluster (new generation, same id): keep the raylet
    (UP, RESTARTED, True, BY_IP, R, Action.KEEP, "registered"),
    (replace(UP, silent_for_s=40), RESTARTED, False, BY_IP, S, Action.KEEP,
     "GCS silent for 40s: waiting (reconnect budget 300s)"),
    # the GCS silent: wait within the budget, even far past the "not registered" grace
    (replace(UP, silent_for_s=90, not_ok_for_s=90), None, False, BY_IP, S, Action.KEEP,
     "waiting"),
    (replace(UP, silent_for_s=301, not_ok_for_s=301), None, False, BY_IP, S, Action.STOP,
     "GCS silent for 301s (reconnect budget 300s)"),
    # another cluster (store wiped, or an in-memory GCS restarted): rejoin at once
    (UP, WIPED, True, BY_IP, R, Action.STOP, "another cluster c9"),
    (replace(UP, silent_for_s=5), WIPED, True, BY_IP, S, Action.STOP, "another cluster"),
    (UP, replace(HEAD, generation="g2"), True, OLD_FORMAT, R, Action.STOP,
     "another cluster g2"),
    # the head moved: joined by IP Ray cannot follow; joined by name it does
    (UP, MOVED, True, BY_IP, R, Action.STOP, "new head 10.0.0.9:6379"),
    (UP, MOVED, True, BY_NAME, R, Action.KEEP, "registered"),
    # an answering GCS that does not list this node (dead, or `ray stop` left `ray start
    # --block` blocking with nothing under it): rejoin after the grace
    (replace(UP, not_ok_for_s=3), STORED, True, BY_IP, U, Action.KEEP, "grace"),
    (replace(UP, not_ok_for_s=12), STORED, True, BY_IP, U, Action.STOP,
     "not registered for 12s"),
    # `ray start --address` that never joins (e.g. unreachable GCS) is stopped
    (ChildState(running=True, since_start_s=10), STORED, True, BY_IP, S, Action.KEEP,
     "starting"),
    (ChildState(running=True, since_start_s=61, silent_for_s=61), STORED, True, BY_IP, S,
     Action.STOP, "61s after start"),
    (ChildState(running=True, since_start_s=61), STORED, True, BY_IP, U, Action.STOP,
     "61s after start"),
])
def test_worker_table(child, head, healthy, joined, view, action, words):
    decision = decide_worker(child, head, "stale: written 99s ago", healthy, joined, view,
                             GCS_LIMITS)
    assert decision.action is action
    assert words in decision.reason
