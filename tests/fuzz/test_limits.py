"""The per-user limits on a running service, with a non-admin token: a submit flood
stops at the quota with a documented 429, and generated requests of every operation
never get a 5xx or an undocumented answer."""

from __future__ import annotations

import json
import os

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, status_code_conformance

from .conftest import MAX_WAITING_TASKS
from .harness import Service, api_call, good_spec, plain_user_token

DERANDOMIZE = not os.environ.get("ARGUS_FUZZ_RANDOM")


@pytest.fixture(scope="module")
def user_token(argus: Service) -> str:
    """A token of ``fuzzer``, a plain user (created through the API by the admin)."""
    return plain_user_token(argus, "fuzzer", "fuzz")


def test_a_non_admin_submit_flood_stops_at_the_quota(argus, user_token, openapi_doc):
    statuses = []
    # the scheduler starts some meanwhile (they stop waiting): a few more than the quota
    # may be accepted before the flood meets it
    for _ in range(5 * MAX_WAITING_TASKS):
        status, headers, body = api_call(argus.port, "POST", "/api/v2/tasks", user_token,
                                      good_spec(argus.shared), "application/yaml")
        statuses.append(status)
        if status == 429:
            break
    assert set(statuses) == {201, 429} and statuses[-1] == 429, statuses
    assert statuses.count(201) >= MAX_WAITING_TASKS
    error = json.loads(body)["error"]
    assert error["code"] == "quota_exceeded" and "max_waiting_tasks" in error["message"]
    assert headers["Retry-After"].isdigit()
    assert "429" in openapi_doc["paths"]["/api/v2/tasks"]["post"]["responses"]
    # nothing accepted was dropped: every 201 is a task of the user's
    status, _, body = api_call(argus.port, "GET", "/api/v2/tasks?user=me&limit=500", user_token)
    assert status == 200 and len(json.loads(body)["tasks"]) == statuses.count(201)


def test_every_operation_with_a_non_admin_token(argus, api_schema, user_token):
    """Positive and negative requests of every operation as a plain user (its own tasks,
    others' tasks, admin routes, the quota reached): documented answers, never a 5xx."""
    session = requests.Session()
    seen: set[int] = set()
    for result in api_schema.get_all_operations():
        operation = result.ok()
        # nothing to make invalid (no parameter, body or credentials)
        no_input = operation.path in ("/healthz", "/readyz", "/api/v2/openapi.json")
        for mode in (GenerationMode.POSITIVE, *(() if no_input else (
                GenerationMode.NEGATIVE,))):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck),
                      database=None, derandomize=DERANDOMIZE)
            def call(case) -> None:
                resp = case.call_and_validate(
                    base_url=f"http://127.0.0.1:{argus.port}", session=session,
                    headers={"Authorization": f"Bearer {user_token}"},
                    checks=[not_a_server_error, status_code_conformance], timeout=30)
                seen.add(resp.status_code)

            call()
    assert 403 in seen and 200 in seen


def test_the_readiness_probe_needs_no_token(argus):
    status, body = argus.get("/readyz", auth=False)
    assert status == 200 and json.loads(body)["status"] == "ready"
