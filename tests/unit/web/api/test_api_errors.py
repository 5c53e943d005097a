"""Every error path of the HTTP API answers the JSON error shape with the right status."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.cluster.fake import FakeCluster
from service.config import Settings
from service.engine.artifacts import Artifacts
from service.jobspec.model import JobSpecError
from service.jobspec.spec import parse_jobspec_json
from service.store.writer import Store
from service.web.api.auth import Access
from service.web.app import ROUTES, create_app

TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
YAML = {**AUTH, "Content-Type": "application/yaml"}
MAX_BODY = 2048
UNKNOWN = "mvp2-ppo-20250101-000000-dead"


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    return tmp_path / "shared"


@pytest.fixture
def store(store_url: str):
    s = Store(store_url)
    yield s
    s.close()


@pytest.fixture
async def client(aiohttp_client, shared: Path, store: Store):
    settings = Settings(shared_root=str(shared), max_body_bytes=MAX_BODY)
    app = create_app(settings, store, FakeCluster(), Artifacts(settings.shared_root),
                     token=TOKEN)
    return await aiohttp_client(app)


def good_spec(shared: Path) -> str:
    return (
        f"workload: sft\ncode_path: {shared}/code\nmodel_id: org/model\n"
        f"train_file: {shared}/train.parquet\nval_file: null\nnnodes: 1\nn_gpus_per_node: 1\n"
    )


async def error_of(resp, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"code", "message", "details"}
    assert err["code"] == code and isinstance(err["message"], str) and err["message"]
    assert isinstance(err["details"], list)
    return err


# -- 401 on every route but /healthz ---------------------------------------------------

def _concrete(path: str) -> str:
    path = re.sub(r"\{task_id:[^}]+\}", UNKNOWN, path)
    path = re.sub(r"\{name:[^}]+\}", "nobody", path)
    return re.sub(r"\{token_id:[^}]+\}", "0123456789ab", path)


PROTECTED = [(m, _concrete(p)) for m, p, _, who in ROUTES if who is not Access.PUBLIC]
BAD_HEADERS = {
    "missing": {},
    "wrong token": {"Authorization": "Bearer not-the-token"},
    "token prefix": {"Authorization": f"Bearer {TOKEN[:-1]}"},
    "basic scheme": {"Authorization": f"Basic {TOKEN}"},
    "no token": {"Authorization": "Bearer"},
    "blank token": {"Authorization": "Bearer   "},
    "token only": {"Authorization": TOKEN},
}


def test_route_table_protects_all_but_the_probes_and_the_document():
    assert len(PROTECTED) == len(ROUTES) - 3
    assert ("GET", "/metrics") in PROTECTED
    assert ("GET", "/api/v2/openapi.json") not in PROTECTED


@pytest.mark.parametrize("method, path", PROTECTED)
@pytest.mark.parametrize("case", list(BAD_HEADERS))
async def test_401_without_a_valid_token(client, method, path, case):
    headers = {**BAD_HEADERS[case], "Content-Type": "application/yaml"}
    resp = await client.request(method, path, headers=headers, data="workload: ppo\n")
    err = await error_of(resp, 401, "unauthorized")
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert TOKEN not in err["message"]


async def test_401_also_hides_unknown_paths(client):
    await error_of(await client.get("/api/v2/nothing-here"), 401, "unauthorized")


async def test_bearer_scheme_is_case_insensitive(client):
    resp = await client.get("/api/v2/queue", headers={"Authorization": f"bearer {TOKEN}"})
    assert resp.status == 200


async def test_healthz_is_open(client):
    resp = await client.get("/healthz", headers={"Authorization": "Bearer wrong"})
    assert resp.status == 200
    assert (await resp.json())["status"] == "ok"


def test_app_refuses_an_empty_token(shared, store):
    settings = Settings(shared_root=str(shared))
    with pytest.raises(ValueError, match="token"):
        create_app(settings, store, FakeCluster(), Artifacts(settings.shared_root), token="")


# -- 400 -----------------------------------------------------------------------------


async def test_400_lists_every_bad_field(client, shared):
    body = (
        "workload: ppo\ncode_path: relative/verl\nmodel_id: org/model\n"
        f"train_file: /etc/passwd\nval_file: {shared}/v.parquet\nnnodes: 0\n"
        "n_gpus_per_node: many\ncolour: blue\n"
    )
    resp = await client.post("/api/v2/tasks", data=body, headers=YAML)
    err = await error_of(resp, 400, "bad_request")
    fields = {d["field"] for d in err["details"]}
    assert {"code_path", "train_file", "nnodes", "n_gpus_per_node", "colour"} <= fields
    assert all(d["message"] for d in err["details"])


@pytest.mark.parametrize("body, field", [
    (b"workload: [ppo\n", "body"),              # malformed YAML
    (b"- just\n- a list\n", "body"),            # not a mapping
    (b"", "body"),                              # empty document
    (b"workload: \xff\xfe\n", "body"),          # not UTF-8
])
async def test_400_unparseable_bodies(client, body, field):
    resp = await client.post("/api/v2/tasks", data=body, headers=YAML)
    err = await error_of(resp, 400, "bad_request")
    assert err["details"] and err["details"][0]["field"] == field


@pytest.mark.parametrize("params, fields", [
    ({"state": "DONE"}, ["state"]),
    ({"limit": "0"}, ["limit"]),
    ({"limit": "501"}, ["limit"]),
    ({"limit": "ten"}, ["limit"]),
    ({"cursor": "not-a-cursor"}, ["cursor"]),
    ({"cursor": "c2VxOi01"}, ["cursor"]),  # base64 of "seq:-5"
    ({"cursor": "c2VxOjkyMjMzNzIwMzY4NTQ3NzU4MDg"}, ["cursor"]),  # "seq:2**63": past SQLite
    ({"state": "nope", "limit": "-1"}, ["state", "limit"]),
    ({"limit": "0", "cursor": "nope"}, ["limit", "cursor"]),
])
async def test_400_list_parameters(client, params, fields):
    resp = await client.get("/api/v2/tasks", headers=AUTH, params=params)
    err = await error_of(resp, 400, "bad_request")
    assert [d["field"] for d in err["details"]] == fields


# -- 404 / 405 -------------------------------------------------------------------------


@pytest.mark.parametrize("method, suffix", [
    ("GET", ""), ("GET", "/attempts"), ("POST", ":cancel"), ("GET", "/logs"),
])
async def test_404_unknown_task(client, method, suffix):
    resp = await client.request(method, f"/api/v2/tasks/{UNKNOWN}{suffix}", headers=AUTH)
    err = await error_of(resp, 404, "not_found")
    assert UNKNOWN in err["message"]


async def test_404_unknown_path_with_token(client):
    await error_of(await client.get("/api/v2/nothing", headers=AUTH), 404, "not_found")


async def test_405_keeps_allow_header(client):
    resp = await client.get(f"/api/v2/tasks/{UNKNOWN}:cancel", headers=AUTH)
    await error_of(resp, 405, "method_not_allowed")
    assert resp.headers["Allow"] == "POST"


# -- 413 / 415 -----------------------------------------------------------------------


async def test_413_by_content_length(client, shared):
    body = good_spec(shared) + "#" * MAX_BODY
    resp = await client.post("/api/v2/tasks", data=body, headers=YAML)
    err = await error_of(resp, 413, "payload_too_large")
    assert str(MAX_BODY) in err["message"]


async def test_413_for_a_chunked_body_without_length(client, shared):
    async def chunks():
        yield good_spec(shared).encode()
        for _ in range(4):
            yield b"#" * 1024

    resp = await client.post("/api/v2/tasks", data=chunks(), headers=YAML)
    await error_of(resp, 413, "payload_too_large")


async def test_body_at_the_limit_is_accepted(client, shared, store):
    body = good_spec(shared)
    body += "#" * (MAX_BODY - len(body))
    assert len(body.encode()) == MAX_BODY
    resp = await client.post("/api/v2/tasks", data=body, headers=YAML)
    assert resp.status == 201
    assert store.tasks.task_exists((await resp.json())["task_id"])


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/octet-stream",
    "application/yaml; charset=latin-1",
])
async def test_415_wrong_content_type(client, shared, content_type):
    resp = await client.post("/api/v2/tasks", data=good_spec(shared),
                             headers={**AUTH, "Content-Type": content_type})
    err = await error_of(resp, 415, "unsupported_media_type")
    assert "yaml" in err["message"].lower() or "utf-8" in err["message"].lower()


async def test_a_json_submit_is_validated_and_stored_as_sent(client, shared, store):
    spec = yaml.safe_load(good_spec(shared))
    body = json.dumps(spec)
    resp = await client.post("/api/v2/tasks", data=body,
                             headers={**AUTH, "Content-Type": "application/json"})
    assert resp.status == 201, await resp.text()
    task_id = (await resp.json())["task_id"]
    assert store.console.task_jobspec(task_id) == body  # stored as received, like a YAML body
    assert store.tasks.get_task(task_id).workload == spec["workload"]
    for bad, field in ((json.dumps({**spec, "nnodes": 0}), "nnodes"),
                       ('{"workload": "ppo", "workload": "sft"}', "body"),
                       (json.dumps({**spec, "nnodes": float("nan")}), "body"),
                       ("[1, 2]", "body"),
                       (json.dumps({**spec, "nnodes": 2.5}), "nnodes")):
        resp = await client.post("/api/v2/tasks", data=bad,
                                 headers={**AUTH, "Content-Type": "application/json"})
        err = await error_of(resp, 400, "bad_request")
        assert field in [d["field"] for d in err["details"]], (bad[:60], err)
    with pytest.raises(JobSpecError) as deep:  # under a larger limit
        parse_jobspec_json("[" * 200_000, Settings(max_body_bytes=1 << 20))
    assert deep.value.details == [{"field": "body", "message": "JSON nested too deeply"}]


async def test_415_missing_content_type(client, shared):
    resp = await client.post("/api/v2/tasks", data=good_spec(shared).encode(),
                             headers={**AUTH, "Content-Type": ""})
    await error_of(resp, 415, "unsupported_media_type")


# -- 409 / 500 ---------------------------------------------------------------------------


async def test_409_cancel_twice(client, shared):
    resp = await client.post("/api/v2/tasks", data=good_spec(shared), headers=YAML)
    task_id = (await resp.json())["task_id"]
    assert (await client.post(f"/api/v2/tasks/{task_id}:cancel", headers=AUTH)).status == 200
    resp = await client.post(f"/api/v2/tasks/{task_id}:cancel", headers=AUTH)
    err = await error_of(resp, 409, "conflict")
    assert "CANCELED" in err["message"]


@pytest.mark.parametrize("method, path, store_method", [
    ("GET", f"/api/v2/tasks/{UNKNOWN}", "task_page"),
    ("GET", "/api/v2/queue", "queue"),
    ("POST", f"/api/v2/tasks/{UNKNOWN}:cancel", "get_task"),
    ("POST", "/api/v2/tasks", "create_task"),
    ("GET", "/api/v2/tasks", "list_tasks"),
])
async def test_500_never_leaks_internals(client, shared, store, monkeypatch, caplog,
                                         method, path, store_method):
    def broken(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("disk on fire at /secret/path")

    # a task's page is the store's own read (its task, progress and dependencies at once)
    monkeypatch.setattr(store if store_method == "task_page" else store.tasks, store_method,
                        broken)
    resp = await client.request(method, path, headers=YAML, data=good_spec(shared))
    err = await error_of(resp, 500, "internal_error")
    text = await resp.text()
    assert "secret" not in text and "Traceback" not in text and "RuntimeError" not in text
    assert err["details"] == []
    assert "disk on fire" in caplog.text  # logged for the operator instead
