"""How a shape is declared and its JSON Schema generated (pure; the JobSpec,
``service.jobspec.schema``, and the API's shapes, ``service.web.shapes``, use it).

A shape is a pydantic model. A field whose rule is Argus's own carries ``rule(check)``
last in its ``Annotated``: ``check(value)`` or ``check(value, info)`` answers the value
(normalised) or raises ``problem(message)``, the sentence a user reads in a 400's
details. It replaces pydantic's own validator of the field (one plain call, no second
pass), so the type's constraints (``ge``, ``maxLength``...) are the schema's statement of
what the check enforces. ``json_schema_of`` writes a model's
schema as the OpenAPI document and the generators read it: no titles, no ``default:
null``, and a nullable scalar as ``type: [T, "null"]``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic.json_schema import models_json_schema
from pydantic_core import PydanticCustomError, core_schema

ARGUS_ERROR = "argus"


def problem(message: str) -> PydanticCustomError:
    """What a rule raises: ``message`` as the problem's whole text."""
    return PydanticCustomError(ARGUS_ERROR, "{message}", {"message": message})


@dataclass(frozen=True)
class Rule:
    """``check`` as a field's only validator: a plain function (given the validation
    info when it takes two arguments), whose schema is the annotated type's, constraints
    and all, which pydantic states but does not enforce."""

    check: Callable[..., Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        stated = handler(source)
        if len(inspect.signature(self.check).parameters) == 2:
            return core_schema.with_info_plain_validator_function(
                self.check, json_schema_input_schema=stated)
        return core_schema.no_info_plain_validator_function(
            self.check, json_schema_input_schema=stated)


rule = Rule


def missing_problem(model: type[BaseModel], name: str) -> str:
    """What the rule of required field ``name`` says of nothing (null), so a field left
    out reads as its rule words it; "required" when it has no rule or none to say."""
    for meta in model.model_fields[name].metadata:
        if isinstance(meta, Rule) and len(inspect.signature(meta.check).parameters) == 1:
            try:
                meta.check(None)
            except PydanticCustomError as exc:
                return exc.context["message"]  # type: ignore[index]
    return "required"


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


def json_schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema (its nested models under ``$defs``)."""
    return _tidy(model.model_json_schema())


def json_schemas_of(models: Sequence[type[BaseModel]], ref_template: str
                    ) -> dict[str, Any]:
    """The schemas of ``models`` and of the models and enums they use, by name, each
    reference written as ``ref_template`` says."""
    _, found = models_json_schema([(m, "validation") for m in models],
                                  ref_template=ref_template)
    return _tidy(found["$defs"])
