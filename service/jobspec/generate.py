"""How a shape is declared and its JSON Schema generated (pure; the JobSpec,
``service.jobspec.schema``, and the API's shapes, ``service.web.shapes``, use it).

A shape is a pydantic model. A field whose rule is Argus's own carries ``rule(check)``:
``check(value)`` or ``check(value, info)`` answers the value (normalised) or raises
``problem(message)``, the sentence a user reads in a 400's details; pydantic's own
validator of the field is never called, so its constraints (``ge``, ``maxLength``...) are
the schema's statement of what the check enforces. ``json_schema_of`` writes a model's
schema as the OpenAPI document and the generators read it: no titles, no ``default:
null``, and a nullable scalar as ``type: [T, "null"]``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationInfo, WrapValidator
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticCustomError

ARGUS_ERROR = "argus"


def problem(message: str) -> PydanticCustomError:
    """What a rule raises: ``message`` as the problem's whole text."""
    return PydanticCustomError(ARGUS_ERROR, "{message}", {"message": message})


def rule(check: Callable[..., Any]) -> WrapValidator:
    """``check`` as a field's only validator (given the validation info when it takes
    two arguments)."""
    if len(inspect.signature(check).parameters) == 2:
        return WrapValidator(lambda value, _handler, info: check(value, info))
    return WrapValidator(lambda value, _handler: check(value))


def _tidy(node: Any) -> Any:
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _tidy(v) for k, v in node.items()
           if k != "title" and not (k == "default" and v is None)}
    if "properties" in node:  # a property may be called title or default
        out["properties"] = {k: _tidy(v) for k, v in node["properties"].items()}
    options = out.get("anyOf")
    if (isinstance(options, list) and len(options) == 2 and options[1] == {"type": "null"}
            and set(options[0]) == {"type"} and isinstance(options[0]["type"], str)):
        del out["anyOf"]
        out = {"type": [options[0]["type"], "null"], **out}
    return out


class _Generator(GenerateJsonSchema):
    def generate(self, schema: Any, mode: Any = "validation") -> Any:
        return _tidy(super().generate(schema, mode))


def json_schema_of(model: type[BaseModel], ref_template: str = "#/$defs/{model}"
                   ) -> dict[str, Any]:
    """``model``'s JSON Schema (its nested models under ``$defs``, or where
    ``ref_template`` says)."""
    return model.model_json_schema(ref_template=ref_template, schema_generator=_Generator)


__all__ = ["ARGUS_ERROR", "ValidationInfo", "json_schema_of", "problem", "rule"]
