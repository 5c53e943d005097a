"""Small helpers of the OpenAPI document's parts: references, JSON content, nullable
values, timestamps (``service.web.openapi_schemas`` and the parts beside it share them)."""

from __future__ import annotations

from typing import Any

TS = {"type": ["string", "null"], "format": "date-time",
       "description": "ISO 8601 UTC timestamp"}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null (one class in a generated client, not one per use)."""
    return {"anyOf": [schema, {"type": "null"}]}


def err(description: str) -> dict[str, Any]:
    return {"$ref": "#/components/responses/" + description}
