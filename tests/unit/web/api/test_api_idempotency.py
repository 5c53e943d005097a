"""``Idempotency-Key`` on the submits (issue 54): the same key and body answer the first
answer again; another body is a 422; a key still being processed is a 409; a malformed key
is a 400; keys are per user and kept with what they created, in one transaction."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from api_env import AUTH, T0, YAML, assert_error, jobspec

from service.domain.users import Role
from service.policy.idempotency import RETENTION_S, IdemKey
from service.web.api.deps import DEPS

JSON = {**AUTH, "Content-Type": "application/json"}


def keyed(headers: dict[str, str], key: str) -> dict[str, str]:
    return {**headers, "Idempotency-Key": key}


def task_count(env) -> int:
    return sum(env.store.tasks.counts_by_state().values())


def keys(env) -> list[tuple]:
    """The stored keys, read through the store's reader (either engine)."""
    return [tuple(r) for r in env.store.reads.reader().execute(
        "SELECT user, key, result_json FROM idempotency_keys ORDER BY created_at")]


async def test_the_same_key_and_body_answer_the_first_answer_again(client, env):
    body = jobspec(env.shared)
    first = await client.post("/api/v2/tasks", data=body, headers=keyed(YAML, "k-1"))
    assert first.status == 201, await first.text()
    assert "Idempotent-Replayed" not in first.headers
    again = await client.post("/api/v2/tasks", data=body, headers=keyed(YAML, '"k-1"'))
    assert again.status == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await again.json() == await first.json()
    assert task_count(env) == 1
    assert [k[:2] for k in keys(env)] == [("admin", "k-1")]


async def test_json_bodies_compare_canonically(client, env):
    doc = yaml.safe_load(jobspec(env.shared))
    first = await client.post("/api/v2/tasks", data=json.dumps(doc),
                              headers=keyed(JSON, "k-json"))
    assert first.status == 201
    reordered = json.dumps(dict(reversed(list(doc.items()))), indent=2)
    again = await client.post("/api/v2/tasks", data=reordered, headers=keyed(JSON, "k-json"))
    assert again.status == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert (await again.json())["task_id"] == (await first.json())["task_id"]
    assert task_count(env) == 1


async def test_the_same_key_with_another_body_or_route_is_a_422(client, env):
    first = await client.post("/api/v2/tasks", data=jobspec(env.shared),
                              headers=keyed(YAML, "k-2"))
    assert first.status == 201
    other = await client.post("/api/v2/tasks", data=jobspec(env.shared, priority=7),
                              headers=keyed(YAML, "k-2"))
    assert other.status == 422
    err = assert_error(await other.json(), "idempotency_key_reused")
    assert "different request" in err["message"]
    doc = json.dumps({"name": "p", "stages": {"a": {"jobspec": yaml.safe_load(
        jobspec(env.shared))}}})
    elsewhere = await client.post("/api/v2/pipelines", data=doc, headers=keyed(JSON, "k-2"))
    assert elsewhere.status == 422
    assert task_count(env) == 1


async def test_keys_are_per_user(client, env):
    env.store.users.create_user("bob", Role.USER, T0)
    bob = env.store.users.create_token("bob", "t", None, T0, max_live=5).secret
    body = jobspec(env.shared)
    mine = await client.post("/api/v2/tasks", data=body, headers=keyed(YAML, "shared-key"))
    theirs = await client.post("/api/v2/tasks", data=body, headers={
        "Authorization": f"Bearer {bob}", "Content-Type": "application/yaml",
        "Idempotency-Key": "shared-key"})
    assert mine.status == theirs.status == 201
    assert "Idempotent-Replayed" not in theirs.headers
    assert (await mine.json())["task_id"] != (await theirs.json())["task_id"]
    assert task_count(env) == 2


@pytest.mark.parametrize("key, why", [
    ("", "empty"), ('""', "empty"), ("x" * 256, "over the limit of 255"),
    ("caf\u00e9", "printable ASCII"), ('"a"b"', "quote"),
])
async def test_a_malformed_key_is_a_400_and_writes_nothing(client, env, key, why):
    resp = await client.post("/api/v2/tasks", data=jobspec(env.shared),
                             headers=keyed(YAML, key))
    assert resp.status == 400
    err = assert_error(await resp.json(), "bad_request")
    assert why in err["message"] and err["details"][0]["field"] == "Idempotency-Key"
    assert task_count(env) == 0 and keys(env) == []


async def test_a_key_longest_allowed_is_kept(client, env):
    resp = await client.post("/api/v2/tasks", data=jobspec(env.shared),
                             headers=keyed(YAML, "k" * 255))
    assert resp.status == 201


async def test_a_key_still_being_processed_is_a_409_with_retry_after(client, env):
    in_flight = client.app[DEPS].in_flight
    with in_flight.hold(IdemKey("admin", "busy", "whatever")):
        resp = await client.post("/api/v2/tasks", data=jobspec(env.shared),
                                 headers=keyed(YAML, "busy"))
        assert resp.status == 409
        assert resp.headers["Retry-After"] == "1"
        assert_error(await resp.json(), "idempotency_key_in_use")
    assert len(in_flight) == 0 and task_count(env) == 0
    done = await client.post("/api/v2/tasks", data=jobspec(env.shared),
                             headers=keyed(YAML, "busy"))
    assert done.status == 201 and len(in_flight) == 0


async def test_a_refused_submit_keeps_no_key(client, env):
    bad = await client.post("/api/v2/tasks", data=jobspec(env.shared, after="[nope]"),
                            headers=keyed(YAML, "k-3"))
    assert bad.status == 400
    assert keys(env) == []
    good = await client.post("/api/v2/tasks", data=jobspec(env.shared),
                             headers=keyed(YAML, "k-3"))
    assert good.status == 201 and "Idempotent-Replayed" not in good.headers


async def test_a_pipeline_replays_its_ids(client, env):
    doc = json.dumps({"name": "p", "stages": {
        "a": {"jobspec": yaml.safe_load(jobspec(env.shared))},
        "b": {"after": {"ok": ["a"]}, "jobspec": yaml.safe_load(jobspec(env.shared))}}})
    first = await client.post("/api/v2/pipelines", data=doc, headers=keyed(JSON, "p-1"))
    assert first.status == 201, await first.text()
    again = await client.post("/api/v2/pipelines", data=doc, headers=keyed(JSON, "p-1"))
    assert again.status == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert await again.json() == await first.json()
    assert len(env.store.pipelines.list_pipelines(None, 10)) == 1
    assert task_count(env) == 2
    other = await client.post("/api/v2/pipelines", data=doc.replace('"p"', '"q"'),
                              headers=keyed(JSON, "p-1"))
    assert other.status == 422


async def test_keys_are_purged_after_the_retention(client, env):
    body = jobspec(env.shared)
    assert (await client.post("/api/v2/tasks", data=body,
                              headers=keyed(YAML, "old"))).status == 201
    env.clock.now += RETENTION_S - 1
    assert (await client.post("/api/v2/tasks", data=jobspec(env.shared, priority=3),
                              headers=keyed(YAML, "old"))).status == 422  # still kept
    env.clock.now += 2
    fresh = await client.post("/api/v2/tasks", data=body, headers=keyed(YAML, "new"))
    assert fresh.status == 201
    assert [k[1] for k in keys(env)] == ["new"]  # "old" purged as "new" was written
    reuse = await client.post("/api/v2/tasks", data=jobspec(env.shared, priority=3),
                              headers=keyed(YAML, "old"))
    assert reuse.status == 201 and task_count(env) == 3


async def test_two_requests_with_one_key_at_once_make_one_task(client, env):
    body = jobspec(env.shared)
    answers = await asyncio.gather(*(
        client.post("/api/v2/tasks", data=body, headers=keyed(YAML, "twice"))
        for _ in range(4)))
    created = [a for a in answers if a.status == 201]
    assert created and all(a.status in (201, 409) for a in answers)
    assert len({(await a.json())["task_id"] for a in created}) == 1
    assert sum("Idempotent-Replayed" not in a.headers for a in created) == 1
    assert task_count(env) == 1
