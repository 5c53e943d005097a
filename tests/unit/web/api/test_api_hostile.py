"""Client input that used to reach SQLite or Python's codecs raw: every one is a 4xx now.

Numbers in queries and cursors (strict ASCII digits, range-checked), Authorization
headers of any bytes, HEAD next to every GET, and storage faults (503, not 500).
"""

from __future__ import annotations

import base64
import logging
import re
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from service.cluster.fake import FakeCluster
from service.config import Settings
from service.domain.newtask import NewTask
from service.engine.artifacts import Artifacts
from service.store.db import StorageUnavailable, storage_fault
from service.store.writer import Store
from service.web.api.auth import AuthFailure, bearer_token
from service.web.api.params import SQLITE_MAX_INT, parse_uint
from service.web.api.views import InvalidCursor, decode_cursor, encode_cursor
from service.web.app import ROUTES, create_app

TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TASK = "mvp2-sft-20250101-000000-beef"


@pytest.fixture
def store(store_url: str):
    s = Store(store_url)
    s.tasks.create_task(NewTask(id_prefix="", workload="sft", text="x: 1\n", spec={}, nnodes=1,
                                n_gpus_per_node=1, user=None, created_at=1_700_000_000.0,
                                priority=0), task_id=TASK)
    yield s
    s.close()


@pytest.fixture
async def client(aiohttp_client, tmp_path: Path, store: Store):
    settings = Settings(shared_root=str(tmp_path / "shared"))
    app = create_app(settings, store, FakeCluster(), Artifacts(settings.shared_root),
                     token=TOKEN)
    return await aiohttp_client(app)


async def error_of(resp, status: int, code: str) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    body = await resp.json()
    assert body["error"]["code"] == code, body
    return body["error"]


# -- numbers ------------------------------------------------------------------------------

NOT_INTEGERS = ["\uff11", "\u0661\u0660", "1_0", " 5 ", "5 ", "+5", "-1", "0x10", "1e3",
                "5.0", "", "\u00b2", "9" * 20, str(2**63), "99999999999999999999999999"]


@pytest.mark.parametrize("raw", NOT_INTEGERS)
def test_parse_uint_takes_ascii_digits_only(raw):
    assert parse_uint(raw) is None


@pytest.mark.parametrize("raw, lo, hi, value", [
    ("0", 0, 10, 0), ("007", 0, 10, 7), ("10", 0, 10, 10), ("11", 0, 10, None),
    ("0", 1, 10, None), (str(SQLITE_MAX_INT), 1, SQLITE_MAX_INT, SQLITE_MAX_INT),
])
def test_parse_uint_range(raw, lo, hi, value):
    assert parse_uint(raw, lo, hi) == value


@pytest.mark.parametrize("param", ["limit", "tail", "attempt"])
@pytest.mark.parametrize("raw", [v for v in NOT_INTEGERS if v] + ["0", "501"])
async def test_query_integers_are_strict(client, param, raw, caplog):
    caplog.set_level(logging.ERROR)
    path = "/api/v2/tasks" if param == "limit" else f"/api/v2/tasks/{TASK}/logs"
    if raw == "501" and param != "limit":
        raw = "100001" if param == "tail" else "0"
    resp = await client.get(path, params={param: raw}, headers=AUTH)
    err = await error_of(resp, 400, "bad_request")
    assert err["details"][0]["field"] == param
    assert not caplog.records


async def test_the_largest_attempt_number_is_looked_up_not_overflowed(client):
    resp = await client.get(f"/api/v2/tasks/{TASK}/logs",
                            params={"attempt": str(SQLITE_MAX_INT)}, headers=AUTH)
    err = await error_of(resp, 404, "not_found")
    assert f"no attempt {SQLITE_MAX_INT}" in err["message"]
    resp = await client.get(f"/api/v2/tasks/{TASK}/logs", params={"attempt": str(2**63)},
                            headers=AUTH)
    await error_of(resp, 400, "bad_request")


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("cursor", [
    _cursor(b"seq:" + str(2**63).encode()), _cursor(b"seq:0"), _cursor(b"seq:-5"),
    _cursor(b"seq: 5"), _cursor(b"seq:1_0"), _cursor("seq:\u0661\u0660".encode()),
    _cursor(b"seq:" + b"9" * 5000), _cursor(b"task:5"), _cursor(b"\xff\xfe"), "!!!!",
    "c2VxOjU=!", "a" * 5000, _cursor(b"seq:5") + "\u00e9",
])
async def test_bad_cursors_are_400(client, cursor, caplog):
    caplog.set_level(logging.ERROR)
    with pytest.raises(InvalidCursor):
        decode_cursor(cursor)
    resp = await client.get("/api/v2/tasks", params={"cursor": cursor}, headers=AUTH)
    err = await error_of(resp, 400, "bad_request")
    assert len(err["details"][0]["message"]) < 120, "a long cursor is not echoed whole"
    assert not caplog.records


def test_cursors_round_trip_to_the_largest_seq():
    for seq in (1, 42, SQLITE_MAX_INT):
        assert decode_cursor(encode_cursor(seq)) == seq


# -- Authorization headers ---------------------------------------------------------------------

MISSING = "missing Authorization header (expected: Bearer <token>)"
MALFORMED = "malformed Authorization header (expected: Bearer <token>)"


@pytest.mark.parametrize("header, token", [
    ("Bearer abc", "abc"),
    ("bearer   abc  ", "abc"),
    ("Bearer \u0442\u043e\u043a\u0435\u043d", "\u0442\u043e\u043a\u0435\u043d"),
    ("Bearer \U0001f600", "\U0001f600"),
])
def test_bearer_token_is_the_text_sent(header, token):
    assert bearer_token(header) == token


@pytest.mark.parametrize("header, message", [
    (None, MISSING),
    # bytes that are not UTF-8, as aiohttp keeps them (surrogateescape): a wrong token
    ("Bearer \udcff\udcfe", "invalid token"),
    ("Bearer ab\x00c", "invalid token"),
    ("Bearer " + "x" * 100_000, "invalid token"),
    ("Basic abc", MALFORMED),
    ("Bearer", MALFORMED),
    ("Bearer    ", MALFORMED),
    ("\udcffBearer abc", MALFORMED),
])
def test_bearer_token_refuses_what_cannot_be_a_token(header, message):
    with pytest.raises(AuthFailure) as info:
        bearer_token(header)
    assert info.value.message == message


# -- HEAD wherever GET is allowed ----------------------------------------------------------

def _concrete(path: str) -> str:
    path = re.sub(r"\{task_id:[^}]+\}", TASK, path)
    path = re.sub(r"\{name:[^}]+\}", "admin", path)
    return re.sub(r"\{token_id:[^}]+\}", "0123456789ab", path)


GET_PATHS = [_concrete(p) for m, p, _, _ in ROUTES if m == "GET"]


@pytest.mark.parametrize("path", GET_PATHS)
async def test_head_answers_like_get_without_a_body(client, path):
    got = await client.get(path, headers=AUTH)
    head = await client.head(path, headers=AUTH)
    assert head.status == got.status
    assert head.headers.get("Content-Type") == got.headers.get("Content-Type")
    assert await head.read() == b""


async def test_head_healthz_needs_no_token(client):
    resp = await client.head("/healthz")
    assert resp.status == 200
    resp = await client.head("/api/v2/queue")
    assert resp.status == 401


# -- storage faults -------------------------------------------------------------------------

def _sqlite_error(message: str, code: int) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize("exc, reason", [
    (_sqlite_error("database or disk is full", sqlite3.SQLITE_FULL), "disk full"),
    (_sqlite_error("database is locked", sqlite3.SQLITE_BUSY), "database is locked"),
    (_sqlite_error("attempt to write a readonly database", sqlite3.SQLITE_READONLY),
     "database is read-only"),
    (_sqlite_error("disk I/O error", 10 | (3 << 8)), "disk I/O error"),  # IOERR_WRITE
    (OSError(28, "No space left on device"), "disk full"),
    (OSError(30, "Read-only file system"), "read-only file system"),
    (StorageUnavailable("disk full", "x"), "disk full"),
])
def test_storage_faults_are_recognised(exc, reason):
    assert storage_fault(exc) == reason


@pytest.mark.parametrize("exc", [
    _sqlite_error("no such table: x", 1), sqlite3.IntegrityError("UNIQUE"),
    sqlite3.ProgrammingError("closed"), OSError(2, "No such file"), ValueError("x"),
])
def test_other_errors_are_not_storage_faults(exc):
    assert storage_fault(exc) is None


async def test_a_storage_fault_on_submit_is_503(client, store, tmp_path, monkeypatch, caplog):
    def full(*args: Any, **kwargs: Any) -> None:
        raise StorageUnavailable("disk full", "database or disk is full")

    monkeypatch.setattr(store.tasks, "create_task", full)
    shared = tmp_path / "shared"
    body = (f"workload: sft\ncode_path: {shared}/code\nmodel_id: org/model\n"
            f"train_file: {shared}/train.parquet\nval_file: null\nnnodes: 1\n"
            "n_gpus_per_node: 1\n")
    resp = await client.post("/api/v2/tasks", data=body,
                             headers={**AUTH, "Content-Type": "application/yaml"})
    err = await error_of(resp, 503, "storage_unavailable")
    assert "disk full" in err["message"]
    assert resp.headers["Retry-After"] == "5"
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a full disk"


async def test_a_storage_fault_on_a_read_is_503(client, store, monkeypatch, caplog):
    def locked(task_id: str) -> None:
        raise _sqlite_error("database is locked", sqlite3.SQLITE_BUSY)

    monkeypatch.setattr(store, "task_page", locked)
    resp = await client.get(f"/api/v2/tasks/{TASK}", headers=AUTH)
    err = await error_of(resp, 503, "storage_unavailable")
    assert "database is locked" in err["message"]
    assert not [r for r in caplog.records if r.exc_info]


async def test_healthz_says_degraded_with_the_reason(aiohttp_client, tmp_path, store):
    loop = SimpleNamespace(alive=True, failed=False, ticks=3, errors=2, last_tick_duration_s=0.0,
                           last_error="StorageUnavailable: disk full",
                           degraded="storage unavailable: disk full", wake=lambda: None)
    settings = Settings(shared_root=str(tmp_path / "shared"))
    app = create_app(settings, store, FakeCluster(), Artifacts(settings.shared_root),
                     token=TOKEN, scheduler_loop=loop)  # type: ignore[arg-type]
    client = await aiohttp_client(app)
    resp = await client.get("/healthz")
    assert resp.status == 200, "a full disk is no reason to restart the service"
    body = await resp.json()
    assert body["status"] == "degraded" and body["reason"] == "storage unavailable: disk full"
    assert body["scheduler"]["errors"] == 2
