"""The OpenAPI 3.1 document of the API, served at ``GET /api/v2/openapi.json`` (without
a token: it holds no secret and no deployment's paths) and committed as
``clients/openapi.json`` (``scripts/openapi_export.py`` writes it; a test keeps the two
equal).

Generated, never written by hand: the paths from the route table
(``service.web.routes.ROUTES``: method, path and its parameters, access) joined to each
route's operation (``service.web.operations``: id, tag, summary, answers, errors, query,
body); the component schemas from the shapes declared once as pydantic models
(``service.web.shapes``, ``service.webhooks.schemas``) and the JobSpec's declaration
(``service.jobspec.schema``). Every operation has an ``operationId`` and one tag; the
operational routes (``/metrics``, the probes, the document itself) are tagged
``operations`` and marked ``x-internal``, so generators that honour it leave them out of
clients. Every operation states its ``security`` (a bearer token, or none for the probes
and the document) and, in ``x-argus-access``, who may call it: any user, admins only,
the task's owner or an admin, or the user named in the path or an admin.
"""

from __future__ import annotations

import copy
import re
from functools import cache
from typing import Any

from pydantic import BaseModel

from service.domain.workloads import WORKLOAD_NAMES, WORKLOADS
from service.jobspec.generate import json_schemas_of
from service.jobspec.schema import declared_schema, path_schema
from service.web.operations import (
    ERRORS,
    INTERNAL_TAG,
    OPERATIONS,
    PATH_PARAMS,
    SHAPES,
    TAGS,
    Op,
    Reply,
)
from service.web.routes import ROUTES, path_template
from service.web.shapes.common import Answer, TrainerDevice

VERSION = "2.5.0"
REF = "#/components/schemas/{model}"

# x-argus-access values, and what each means
ACCESS = {
    "public": "anyone, without a token",
    "user": "any enabled user",
    "admin": "admins only (403 for other users)",
    "owner": "any user may ask; only the task's owner or an admin gets it (403 otherwise)",
    "self": "the user named in the path (me: the caller) or an admin (403 otherwise)",
}
PATH_RULE = ("an absolute, normalised path (no '..', no '//', a narrow character set) "
             "under one of the deployment's allowed roots (v2.jobspec.allowed_roots, "
             "default: the shared root); in the users' trees (<shared_root>/users/<name>/) "
             "only the submitter's own")


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _schema(shape: type[BaseModel] | dict[str, Any]) -> dict[str, Any]:
    return ref(shape.__name__) if isinstance(shape, type) else shape


def _reply(reply: Reply) -> dict[str, Any]:
    if isinstance(reply.shape, dict) and "/responses/" in reply.shape.get("$ref", ""):
        return dict(reply.shape)  # type: ignore[arg-type]
    out: dict[str, Any] = {"description": reply.description}
    if reply.headers:
        out["headers"] = reply.headers
    out["content"] = {reply.content_type: {"schema": _schema(reply.shape)}}
    return out


def _error(name: str) -> dict[str, str]:
    return {"$ref": "#/components/responses/" + name}


def _operation(op: Op, path: str, access: str) -> dict[str, Any]:
    """One operation: the route's ``access`` ("public", "user" or "admin"), refined by
    the operation's own (owner, self)."""
    access = op.access or access
    responses = {status: _reply(r) for status, r in op.ok.items()}
    if not op.probe:
        if access != "public":
            responses["401"] = _error("Unauthorized")
        if access in ("admin", "owner", "self"):
            responses["403"] = _error("Forbidden")
        for code, name in sorted(e.split(":") for e in op.errors):
            responses[code] = _error(name)
        responses["500"] = _error("InternalError")
        responses["503"] = _error("Unavailable")
    out: dict[str, Any] = {
        "summary": op.summary, "operationId": op.id, "tags": [op.tag],
        "responses": responses,
        "security": [] if access == "public" else [{"bearerAuth": []}],
        "x-argus-access": access,
    }
    params = [{"name": name, "in": "path", "required": True, **PATH_PARAMS[name]}
              for name in re.findall(r"\{(\w+)\}", path)]
    params += [{"name": q.name, "in": "query", "required": False, "schema": q.schema,
                "description": q.description} for q in op.query]
    params += [{"name": h.name, "in": "header", "required": False, "schema": h.schema,
                "description": h.description} for h in op.headers]
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {"required": op.body_required, "content": {
            t: {"schema": _schema(op.body)} for t in op.body_types}}
    if op.tag == INTERNAL_TAG:
        out["x-internal"] = True
    return out


def _paths(routes: Any) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for method, path, _, access in routes:
        template, key = path_template(path), method.lower()
        op = OPERATIONS.get((key, template))
        if op is None:
            raise LookupError(f"route {method} {template} has no operation")
        paths.setdefault(template, {})[key] = _operation(op, template, access.value)
    documented = {(m, p) for p, item in paths.items() for m in item}
    if extra := set(OPERATIONS) - documented:
        raise LookupError(f"operations without a route: {sorted(extra)}")
    return paths


def _answers_without_defaults(schemas: dict[str, Any]) -> None:
    """An answer's defaults say nothing to a reader (the service fills every field)."""
    for shape in SHAPES:
        if issubclass(shape, Answer) and shape.__name__ in schemas:
            for prop in schemas[shape.__name__].get("properties", {}).values():
                prop.pop("default", None)


def jobspec_components() -> dict[str, Any]:
    """``JobSpec``, a discriminated union on ``workload`` of one closed schema per
    workload (``JobSpecPpo``...), from the JobSpec's declaration; its paths a reference
    to ``JobSpecPath``: any normalised absolute path here, the deployment's roots in
    prose (``PATH_RULE``), so the document is the same for every install."""
    base = declared_schema(ref("JobSpecPath"))
    common = base["properties"]
    any_path = path_schema(("/",))
    path_rule = {"type": "string", "pattern": any_path["pattern"],
                 "maxLength": any_path["maxLength"], "description": PATH_RULE}
    schemas: dict[str, Any] = {"JobSpecPath": path_rule}
    mapping = {}
    for name in WORKLOAD_NAMES:
        workload, title = WORKLOADS[name], f"JobSpec{name.capitalize()}"
        nullable_path = {"anyOf": [ref("JobSpecPath"), {"type": "null"}]}
        properties = {
            **common, "workload": {"type": "string", "const": name},
            "val_file": ref("JobSpecPath") if workload.needs_val_file else nullable_path,
            "trainer_device": {"anyOf": [ref("TrainerDevice"), {"type": "null"}]}
            if workload.takes_device else {"type": "null", "description": "sft only"},
            "on_unsatisfiable": {"anyOf": [ref("OnUnsatisfiable"), {"type": "null"}],
                                 "description": common["on_unsatisfiable"]["description"]}}
        required = [*base["required"], *(["val_file"] if workload.needs_val_file else [])]
        schemas[title] = {"type": "object", "additionalProperties": False,
                          "required": required, "properties": properties,
                          "description": f"A {name} task"}
        mapping[name] = REF.format(model=title)
    schemas["TrainerDevice"] = {"type": "string", "enum": [d.value for d in TrainerDevice]}
    schemas["JobSpec"] = {"oneOf": [ref(f"JobSpec{n.capitalize()}") for n in WORKLOAD_NAMES],
                          "discriminator": {"propertyName": "workload", "mapping": mapping},
                          "description": base["description"]}
    return schemas


def component_schemas() -> dict[str, Any]:
    """Every shape's schema (the nested ones and the enums under their own names)."""
    schemas = json_schemas_of(SHAPES, REF)
    _answers_without_defaults(schemas)
    return {**schemas, **jobspec_components()}


@cache
def _document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Argus task service", "version": VERSION,
                 "description": "Queue verl training tasks on a shared Ray cluster. "
                                "Every operation's x-argus-access says who may call it: "
                                + "; ".join(f"{k}: {v}" for k, v in ACCESS.items())},
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "tags": TAGS,
        "paths": _paths(ROUTES),
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
            "schemas": component_schemas(),
            "responses": {name: {"description": text, "content": {"application/json": {
                "schema": ref("Error")}}} for name, text in ERRORS.items()},
        },
    }


def build_openapi() -> dict[str, Any]:
    """The document as a JSON-ready dict (a deep copy: callers may change it). The same
    for every deployment: path rules are prose, not the configured roots."""
    return copy.deepcopy(_document())
