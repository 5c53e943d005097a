"""Every hostile request of the service's hostile-input review, as raw bytes.

Each case is one complete request (``Connection: close``) and the answers it may get;
none may be a 5xx, and every error answer is the JSON error shape. The YAML bodies are
the unit tier's corpus (``tests/unit/jobspec/test_yamldoc.py``: deep nesting, alias and
merge-key bombs, tags, huge integers and scalars ...), sent here through HTTP to a
running service; the rest are the review's HTTP cases: overrides that reach what Argus
owns, numbers that overflow SQLite, undecodable Authorization headers, parser errors,
oversized bodies, ``Expect: 100-continue``, ``HEAD``. Slow clients (incomplete headers,
a body at one byte every two seconds) need time rather than bytes: the tests and the
benchmark drive them separately.
"""

from __future__ import annotations

import base64
import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .harness import good_spec

MAX_BODY = 256 << 10  # the service's default v2.jobspec.max_body_bytes


@dataclass(frozen=True)
class Case:
    name: str
    request: bytes
    expect: frozenset[int]
    interim_forbidden: bool = False  # no "100 Continue" may precede the answer


def _unit_yaml_corpus() -> dict[str, str]:
    path = Path(__file__).resolve().parents[1] / "unit" / "jobspec" / "test_yamldoc.py"
    spec = importlib.util.spec_from_file_location("_argus_unit_yamldoc", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: body for name, (body, _) in module.HOSTILE.items()}


def request(method: str, path: str, *, headers: bytes = b"", body: bytes = b"",
            length: bool = True) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: argus\r\nConnection: close\r\n".encode()
    if body and length:
        head += b"Content-Length: %d\r\n" % len(body)
    return head + headers + b"\r\n" + body


def post_yaml(auth: bytes, body: bytes | str, *, extra: bytes = b"") -> bytes:
    data = body.encode() if isinstance(body, str) else body
    return request("POST", "/api/v2/tasks", body=data,
                   headers=auth + b"Content-Type: application/yaml\r\n" + extra)


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


# overrides that change what Argus owns or escape the sandbox (each refused)
OWNED_OVERRIDES = (
    "~transfer_queue",
    "+transfer_queue.backend.SimpleStorage.required_node_resource=head",
    "+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH=/tmp/evil",
    "custom_reward_function.path=/etc/passwd",
    "data.custom_cls.path=/etc/evil.py",
    "hydra.run.dir=/etc",
    "hydra.sweep.dir=/etc",
    "hydra.searchpath=[file:///etc]",
    "+hydra.job.env_set.PYTHONPATH=/x",
    "~hydra",
)

NOT_INTEGERS = ("%EF%BC%91", "%D9%A1%D9%A0", "1_0", "%205%20", "9223372036854775808",
                "99999999999999999999999", "-1", "0x10", "1e3")


def build(auth: bytes, shared: Path, task_id: str) -> list[Case]:
    """The corpus against a service whose token header is ``auth``, whose shared root is
    ``shared`` and which holds the task ``task_id``."""
    bad, ok = frozenset({400}), frozenset({200})
    cases: list[Case] = []
    for name, body in _unit_yaml_corpus().items():  # past the body limit: refused unread
        expect = bad if len(body.encode()) <= MAX_BODY else frozenset({413})
        cases.append(Case(f"yaml: {name}", post_yaml(auth, body), expect))
    for override in OWNED_OVERRIDES:
        cases.append(Case(f"override {override}",
                          post_yaml(auth, good_spec(shared, override)), bad))
    cases.append(Case("merge key overriding nnodes",
                      post_yaml(auth, good_spec(shared) + "<<: {nnodes: 8}\n"), bad))
    cases.append(Case("nnodes only through a merge key",
                      post_yaml(auth, good_spec(shared).replace("nnodes: 1\n", "")
                                + "<<: {nnodes: 1}\n"), bad))
    cases.append(Case("body not UTF-8", post_yaml(auth, b"workload: \xff\xfe\n"), bad))
    cases.append(Case("an empty JSON JobSpec", request(
        "POST", "/api/v2/tasks", body=b"{}",
        headers=auth + b"Content-Type: application/json\r\n"), bad))
    cases.append(Case("a JSON JobSpec nested deep", request(
        "POST", "/api/v2/tasks", body=b"[" * 60_000,
        headers=auth + b"Content-Type: application/json\r\n"), bad))
    cases.append(Case("JSON with a duplicate key", request(
        "POST", "/api/v2/tasks", body=b'{"workload": "ppo", "workload": "sft"}',
        headers=auth + b"Content-Type: application/json\r\n"), bad))
    cases.append(Case("a JobSpec as form data", request(
        "POST", "/api/v2/tasks", body=b"workload=ppo",
        headers=auth + b"Content-Type: application/x-www-form-urlencoded\r\n"),
        frozenset({415})))
    cases.append(Case("body of exactly the limit", post_yaml(auth, b"#" * MAX_BODY), bad))
    cases.append(Case("body one byte over the limit", post_yaml(auth, b"#" * (MAX_BODY + 1)),
                      frozenset({413})))
    chunked = b"".join(b"%x\r\n%s\r\n" % (65536, b"#" * 65536) for _ in range(24))
    cases.append(Case("chunked body of 1.5 MiB", request(
        "POST", "/api/v2/tasks", body=chunked + b"0\r\n\r\n", length=False,
        headers=auth + b"Content-Type: application/yaml\r\nTransfer-Encoding: chunked\r\n"),
        frozenset({413})))
    bomb = gzip.compress(b"#" * (64 << 20), 9)  # 64 MiB of YAML comments in ~64 KB
    cases.append(Case("gzip bomb: 64 MiB in 64 KB", request(
        "POST", "/api/v2/tasks", body=bomb,
        headers=auth + b"Content-Type: application/yaml\r\nContent-Encoding: gzip\r\n"),
        frozenset({415})))
    cases.append(Case("gzip body that is not gzip", request(
        "POST", "/api/v2/tasks", body=b"workload: ppo\n",
        headers=auth + b"Content-Type: application/yaml\r\nContent-Encoding: gzip\r\n"),
        frozenset({415})))
    cases.append(Case("Content-Length over 2**64", request(
        "POST", "/api/v2/tasks", headers=auth + b"Content-Type: application/yaml\r\n"
        b"Content-Length: 99999999999999999999999\r\n"), bad))
    cases.append(Case("Expect: 100-continue with 5 MB announced", request(
        "POST", "/api/v2/tasks", headers=auth + b"Content-Type: application/yaml\r\n"
        b"Content-Length: 5000000\r\nExpect: 100-continue\r\n"), frozenset({413}),
        interim_forbidden=True))
    cases.append(Case("Expect: something else", post_yaml(
        auth, good_spec(shared), extra=b"Expect: 200-ok\r\n"), frozenset({417})))

    logs = f"/api/v2/tasks/{task_id}/logs"
    for value in NOT_INTEGERS:
        cases.append(Case(f"logs?attempt={value}", request("GET", f"{logs}?attempt={value}",
                                                           headers=auth), bad))
        cases.append(Case(f"tasks?limit={value}", request("GET", f"/api/v2/tasks?limit={value}",
                                                          headers=auth), bad))
        cases.append(Case(f"logs?tail={value}", request("GET", f"{logs}?tail={value}",
                                                        headers=auth), bad))
    for raw in (f"seq:{2**63}", "seq:0", "seq: 5", "seq:1_0", "seq:" + "9" * 5000, "x:1"):
        cases.append(Case(f"cursor {raw[:20]}", request(
            "GET", f"/api/v2/tasks?cursor={_cursor(raw)}", headers=auth), bad))
    cases.append(Case("raw non-ASCII bytes in the query", request(
        "GET", "/api/v2/tasks?limit=\uff11", headers=auth), bad))

    for name, value in (("not UTF-8", b"Bearer \xff\xfe"), ("Latin-1", b"Bearer t\xe9st"),
                        ("Cyrillic UTF-8", "Bearer \u0442\u043e\u043a".encode()),
                        ("control byte", b"Bearer \x01\x02"), ("no scheme", b"\xff")):
        cases.append(Case(f"Authorization {name}, no token", request(
            "GET", "/api/v2/queue", headers=b"Authorization: " + value + b"\r\n"),
            frozenset({400, 401})))
    cases.append(Case("HEAD /healthz without a token", request("HEAD", "/healthz"), ok))
    cases.append(Case("HEAD a task", request("HEAD", f"/api/v2/tasks/{task_id}",
                                             headers=auth), ok))

    cases.append(Case("bad method", b"G@T /healthz HTTP/1.1\r\nHost: x\r\n\r\n", bad))
    cases.append(Case("header line over 8 KB", request(
        "GET", "/healthz", headers=b"X-Big: " + b"a" * 9000 + b"\r\n"), bad))
    cases.append(Case("200 header lines", request(
        "GET", "/healthz", headers=b"".join(b"X-%d: 1\r\n" % i for i in range(200))), bad))
    cases.append(Case("bad chunk size", request(
        "POST", "/api/v2/tasks", body=b"zz\r\nabc\r\n0\r\n\r\n", length=False,
        headers=auth + b"Content-Type: application/yaml\r\nTransfer-Encoding: chunked\r\n"),
        bad))
    cases.append(Case("both Content-Length and chunked", request(
        "POST", "/api/v2/tasks", body=b"3\r\nabc\r\n0\r\n\r\n", length=False,
        headers=auth + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"), bad))
    cases.append(Case("request smuggling: two Content-Lengths", request(
        "POST", "/api/v2/tasks", body=b"abc", length=False,
        headers=auth + b"Content-Length: 3\r\nContent-Length: 40\r\n"), bad))
    cases.append(Case("TLS hello on the plain port",
                      bytes.fromhex("16030100a5010000a10303") + b"\x00" * 160, bad))
    cases.append(Case("path traversal in a task id", request(
        "GET", "/api/v2/tasks/..%2F..%2Fetc%2Fpasswd", headers=auth),
        frozenset({404})))
    return cases
