"""The choice between one read per job and one listing of every job (pure)."""

from __future__ import annotations

import math

import pytest

from service.cluster.jobreads import CALL_WEIGHT, MIN_BATCH, PROBE_EVERY, JobReadCosts


def test_few_jobs_are_read_one_by_one_whatever_the_costs():
    costs = JobReadCosts(per_call_s=1.0, list_s=0.001)
    assert not costs.use_list(MIN_BATCH - 1)
    assert costs.use_list(MIN_BATCH)


def test_the_per_job_cost_is_learnt_first_then_the_listings():
    costs = JobReadCosts()
    assert not costs.use_list(50), "no per-job figure yet"
    costs.note_call(0.010)
    assert costs.use_list(50), "no listing figure yet: it is measured"
    costs.note_list(0.300)
    assert costs.use_list(40) is True  # 400 ms one by one > 300 ms
    assert costs.use_list(20) is False  # 200 ms < 300 ms


def test_the_per_job_cost_is_a_running_mean():
    costs = JobReadCosts()
    costs.note_call(0.010)
    costs.note_call(0.020)
    assert costs.per_call_s == pytest.approx(CALL_WEIGHT * 0.020 + (1 - CALL_WEIGHT) * 0.010)


def test_a_dear_listing_is_measured_again_now_and_then():
    costs = JobReadCosts(per_call_s=0.010)
    costs.note_list(math.inf)  # it failed
    picks = [costs.use_list(10) for _ in range(PROBE_EVERY)]
    assert picks == [False] * (PROBE_EVERY - 1) + [True]
    costs.note_list(0.050)  # the history was cleaned up: 100 ms one by one > 50 ms
    assert costs.use_list(10)
