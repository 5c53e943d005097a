"""Stateful links with non-admin tokens: what one request returns drives the next.

A Hypothesis state machine plays two plain users, ``linker`` and ``snoop``, against the
running service: ``linker`` submits tasks (YAML and JSON) and follows each returned id
to its task, attempts, events, metrics, logs, priority changes (integers, integral floats,
out-of-range and fractional values) and cancel; ``snoop`` tries the same ids; both
create, list and revoke their own tokens and try each other's. Every answer must be
documented for its operation and never a 5xx; the owner rules hold (``snoop`` may read a
task but not its logs or metrics, change or cancel it); a submit past the quota is 429
``quota_exceeded`` with ``Retry-After``, and nothing accepted is lost. Past the state
machine: the stream limits and the half-open connection limit with a non-admin's
session.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from .conftest import MAX_WAITING_TASKS
from .harness import Service, api_call, good_spec, plain_user_token

DERANDOMIZE = not os.environ.get("ARGUS_FUZZ_RANDOM")
API = "/api/v2"


def _documented(doc: dict, method: str, path: str) -> set[int]:
    """The statuses the document lists for the operation that serves ``path``."""
    for template, item in doc["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/:]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in item:
            return {int(code) for code in item[method.lower()]["responses"]}
    raise AssertionError(f"no operation documents {method} {path}")


@pytest.fixture(scope="module")
def users(argus: Service) -> dict[str, str]:
    return {name: plain_user_token(argus, name, "links") for name in ("linker", "snoop")}


PRIORITIES = st.one_of(st.integers(-1100, 1100), st.integers(-1000, 1000).map(float),
                       st.floats(-2000, 2000, allow_nan=False), st.sampled_from(
                           ["high", None, True, 10**30]))


def test_linked_requests_of_two_plain_users(argus, users, openapi_doc):
    port, accepted = argus.port, set()

    class Links(RuleBasedStateMachine):
        tasks = Bundle("tasks")
        tokens = Bundle("tokens")

        def call(self, method: str, path: str, who: str, body: str | None = None,
                 content_type: str = "application/json") -> tuple[int, dict[str, str], bytes]:
            status, headers, raw = api_call(port, method, path, users[who], body, content_type)
            assert status < 500, (method, path, status, raw[:300])
            assert status in _documented(openapi_doc, method, path.split("?")[0]), (
                method, path, status, raw[:300])
            return status, headers, raw

        @rule(target=tasks, as_json=st.booleans())
        def submit(self, as_json: bool) -> str:
            spec = good_spec(argus.shared)
            if as_json:  # the same spec as JSON (its lines are "key: value")
                doc = {k: json.loads(v) if v in ("null", "1") else v
                       for k, v in (line.split(": ", 1) for line in spec.splitlines())}
                status, headers, raw = self.call("POST", f"{API}/tasks", "linker",
                                                 json.dumps(doc))
            else:
                status, headers, raw = self.call("POST", f"{API}/tasks", "linker", spec,
                                                 "application/yaml")
            if status == 429:
                error = json.loads(raw)["error"]
                assert error["code"] == "quota_exceeded", error
                assert headers["Retry-After"].isdigit()
                return "no-such-task"
            assert status == 201, raw[:300]
            task_id = json.loads(raw)["task_id"]
            accepted.add(task_id)
            return task_id

        @rule(task=tasks, who=st.sampled_from(["linker", "snoop"]),
              part=st.sampled_from(["", "/attempts", "/events", "/metrics"]))
        def read(self, task: str, who: str, part: str) -> None:
            status, _, _ = self.call("GET", f"{API}/tasks/{task}{part}", who)
            owner_only = part == "/metrics"  # a task's metrics are its owner's, as logs
            assert status == (404 if task == "no-such-task" else
                              403 if owner_only and who == "snoop" else 200)

        @rule(task=tasks, who=st.sampled_from(["linker", "snoop"]),
              attempt=st.sampled_from(["latest", "1", "0", "9223372036854775808", ""]))
        def logs(self, task: str, who: str, attempt: str) -> None:
            status, _, _ = self.call("GET", f"{API}/tasks/{task}/logs?attempt={attempt}", who)
            if task != "no-such-task" and who == "snoop" and attempt in ("latest", "1"):
                assert status == 403

        @rule(task=tasks, who=st.sampled_from(["linker", "snoop"]), value=PRIORITIES)
        def priority(self, task: str, who: str, value: object) -> None:
            status, _, raw = self.call("PATCH", f"{API}/tasks/{task}", who,
                                       json.dumps({"priority": value}))
            integral = (not isinstance(value, bool) and isinstance(value, int | float)
                        and float(value).is_integer() and -1000 <= value <= 1000)
            if not integral and task != "no-such-task":
                assert status == 400, raw[:300]
            elif task != "no-such-task" and who == "snoop":
                assert status == 403, raw[:300]

        @rule(task=consumes(tasks), who=st.sampled_from(["linker", "snoop"]))
        def cancel(self, task: str, who: str) -> None:
            status, _, raw = self.call("POST", f"{API}/tasks/{task}:cancel", who)
            if task != "no-such-task" and who == "snoop":
                assert status == 403, raw[:300]

        @rule(target=tokens, who=st.sampled_from(["linker", "snoop"]),
              expires=st.sampled_from([None, 3600, 5e-324, 0, -1, 1e300]))
        def create_token(self, who: str, expires: float | None) -> tuple[str, str]:
            body = {"label": "link"} | ({} if expires is None else {"expires_in_s": expires})
            status, _, raw = self.call("POST", f"{API}/users/{who}/tokens", who,
                                       json.dumps(body))
            if status != 201:
                assert status in (400, 409), raw[:300]  # a bad lifetime; too many tokens
                return who, "none"
            return who, json.loads(raw)["token_id"]

        @rule(token=consumes(tokens), who=st.sampled_from(["linker", "snoop"]))
        def revoke(self, token: tuple[str, str], who: str) -> None:
            owner, token_id = token
            status, _, raw = self.call(
                "POST", f"{API}/users/{owner}/tokens/{token_id}:revoke", who)
            if who != owner:
                assert status == 403, raw[:300]

        @rule(who=st.sampled_from(["linker", "snoop"]))
        def lists(self, who: str) -> None:
            for path in (f"{API}/tasks?user=me&limit=500", f"{API}/queue?limit=50",
                         f"{API}/users/{who}/tokens", f"{API}/usage?from=0", f"{API}/me"):
                assert self.call("GET", path, who)[0] == 200

        @invariant()
        def serving(self) -> None:
            assert api_call(port, "GET", "/healthz", None)[0] == 200

    Links.TestCase.settings = settings(
        max_examples=12, stateful_step_count=12, deadline=None, database=None,
        derandomize=DERANDOMIZE, suppress_health_check=list(HealthCheck))
    Links.TestCase().runTest()
    # nothing accepted was lost: every 201 is one of linker's tasks
    status, _, raw = api_call(port, "GET", f"{API}/tasks?user=me&limit=500", users["linker"])
    listed = {t["task_id"] for t in json.loads(raw)["tasks"]}
    assert status == 200 and accepted <= listed
    assert len(accepted) >= MAX_WAITING_TASKS or accepted, "no submit was accepted"


def test_a_plain_users_live_streams_stop_at_the_limit(argus, users):
    """A non-admin's console session: past the streams a session may hold, the stream is
    429 naming the limit with Retry-After, and the service still answers others."""
    status, headers, _ = api_call(argus.port, "POST", "/ui/signin", None,
                               f"token={users['snoop']}&next=/ui/queue",
                               "application/x-www-form-urlencoded")
    assert status == 303
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    held, answers = [], []
    try:
        for _ in range(8):
            conn = http.client.HTTPConnection("127.0.0.1", argus.port, timeout=30)
            conn.request("GET", "/ui/live", headers={"Cookie": cookie})
            resp = conn.getresponse()
            answers.append(resp.status)
            if resp.status == 200:
                held.append(conn)
            else:
                assert resp.status == 429 and resp.headers["Retry-After"].isdigit()
                assert "max_streams_per_session" in resp.read().decode()
                conn.close()
        assert 200 in answers and answers[-1] == 429, answers
        assert api_call(argus.port, "GET", f"{API}/me", users["linker"])[0] == 200
    finally:
        for conn in held:
            conn.close()


def test_half_sent_requests_from_one_address_stop_at_its_share(argus):
    """Connections that never finish their headers: past the address's half-open share a
    new one is 429 at once, and another address is still served."""
    socks, refused = [], 0
    try:
        for _ in range(40):
            sock = socket.create_connection(("127.0.0.1", argus.port), timeout=10)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
            socks.append(sock)
        deadline = time.monotonic() + 5
        for sock in socks:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            with contextlib.suppress(TimeoutError):  # else held, waiting for the rest
                refused += sock.recv(64).startswith(b"HTTP/1.1 429")
        assert refused >= 40 - 16, f"only {refused} of 40 refused"
        other = socket.create_connection(("127.0.0.1", argus.port), timeout=10,
                                         source_address=("127.0.0.2", 0))
        with other:
            other.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert other.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        for sock in socks:
            sock.close()
