"""A request body held to the shape it is declared with (``service.web.shapes``,
``service.webhooks.schemas``): for the API's handlers and the use cases alike.

Each unknown field is a problem of its own, then each declared field's (a required one
left out reads as its rule words nothing), so a caller learns every mistake at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from service.jobspec.generate import missing_problem

M = TypeVar("M", bound=BaseModel)


def check_shape(shape: type[M], doc: Mapping[str, Any],
                context: dict[str, Any] | None = None
                ) -> tuple[M | None, list[dict[str, Any]]]:
    """``doc`` as ``shape``, or None and the refusal's details."""
    fields = shape.model_fields
    details = unknown_fields(doc, tuple(fields))
    try:
        found = shape.model_validate(
            doc if not details else {k: v for k, v in doc.items() if k in fields},
            context=context)
    except ValidationError as exc:
        for e in exc.errors(include_url=False, include_input=False):
            name = str(e["loc"][0]) if e["loc"] else "body"
            details.append({"field": name, "message": missing_problem(shape, name)
                            if e["type"] == "missing" else e["msg"]})
        return None, details
    return (None, details) if details else (found, details)


def unknown_fields(doc: Mapping[str, Any], known: tuple[str, ...]) -> list[dict[str, Any]]:
    """A refusal's details for each key of ``doc`` not in ``known``."""
    return [{"field": str(k)[:64], "message": f"unknown field (known: {', '.join(known)})"}
            for k in doc if k not in known]
