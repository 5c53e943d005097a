"""One ``argus-api`` process (fake cluster) for the whole fuzz tier.

Short timeouts keep the slow-client tests short; the connection cap is the default's
order of magnitude; a non-admin may keep ``MAX_WAITING_TASKS`` tasks waiting. The tier's
tests assert generous bounds (a shared 2-core CI machine makes timing floors flaky);
``bench/bench_hostile.py`` measures the floors themselves.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import Service, api_call, good_spec, start_service

HEADER_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 256
MAX_WAITING_TASKS = 20  # non-admins' quota (the admin token is exempt)


@pytest.fixture(scope="session")
def argus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root: Path = tmp_path_factory.mktemp("argus-fuzz")
    service = start_service(root, api={"header_timeout_s": HEADER_TIMEOUT_S,
                                       "body_timeout_s": BODY_TIMEOUT_S,
                                       "max_connections": MAX_CONNECTIONS},
                            user_limits={"max_waiting_tasks": MAX_WAITING_TASKS})
    try:
        yield service
    finally:
        alive = service.alive()
        service.stop()
        assert alive, f"the service died during the fuzz tier:\n{service.log()[-5000:]}"


@pytest.fixture(scope="session")
def task_id(argus: Service) -> str:
    """A task the service holds (submitted through the API)."""
    status, _, body = api_call(argus.port, "POST", "/api/v2/tasks", argus.token,
                               good_spec(argus.shared), "application/yaml")
    assert status == 201, body
    return json.loads(body)["task_id"]


@pytest.fixture(scope="session")
def openapi_doc(argus: Service) -> dict:
    status, body = argus.get("/api/v2/openapi.json")
    assert status == 200
    return json.loads(body)


def with_deployment_paths(doc: dict, shared: Path) -> dict:
    """The document with ``JobSpecPath`` (any normalised absolute path, the roots in
    prose: the document is the same for every install) narrowed to this service's
    allowed roots, so that the specs drawn from it are ones the service accepts."""
    from service.config import Settings
    from service.domain.layout import users_root
    from service.jobspec.schema import jobspec_json_schema

    settings = Settings(shared_root=str(shared))
    path = jobspec_json_schema(settings.resolved_allowed_roots,
                               users_root(settings.shared_root))["properties"]["train_file"]
    doc = copy.deepcopy(doc)
    doc["components"]["schemas"]["JobSpecPath"] = path
    return doc


@pytest.fixture(scope="session")
def api_schema(argus: Service, openapi_doc: dict):
    import schemathesis

    schema = schemathesis.openapi.from_dict(with_deployment_paths(openapi_doc, argus.shared))
    schema.config.base_url = f"http://127.0.0.1:{argus.port}"
    return schema
