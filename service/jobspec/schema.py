"""The JobSpec document, declared once: ``JobSpecDocument``, a pydantic model whose fields
carry each field's type, limits, description and rule. Both of the JobSpec's faces are
generated from it:

* validation: ``validate_jobspec`` (what ``service.jobspec.spec`` calls once the YAML or
  JSON front door has read the body) runs the model over the document and answers a
  ``JobSpec`` or a ``JobSpecError`` listing every problem, each with its field, in the
  order of the declaration (unknown fields first);
* the JSON Schema: ``jobspec_json_schema`` (for the deployment's roots: property-based
  generators, the fuzz tier) and ``declared_schema`` (any path as the caller says: the
  OpenAPI document's ``JobSpec`` components, ``service.web.openapi``), both from
  ``JobSpecDocument.model_json_schema``.

A field's rule (``service.jobspec.generate.rule``) is its only validator, in place of
pydantic's own (whose messages are not ours): it checks the value and raises ``problem``
with the sentence a user reads. The bounds a rule checks are the ones its ``Field``
declares, so the schema states what the rule enforces. A rule that JSON Schema cannot
say (a path's normalised form under the roots, the override policy, sft-only
``trainer_device``) stays code: the schema holds to a subset that is always valid (a
path's pattern, the overrides' generated shape). Paths are marked ``x-argus-path`` in
the declaration; the generators put the deployment's path schema (or a reference to
``JobSpecPath``) in its place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, create_model
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema
from pydantic_core import InitErrorDetails, PydanticCustomError

from service.domain.workloads import WORKLOAD_NAMES, WORKLOADS, owned_keys
from service.jobspec.generate import json_schema_of, problem, rule
from service.jobspec.model import (
    LABEL_KEY,
    MAX_ATTEMPTS,
    MAX_EPOCHS,
    MAX_GPUS_PER_NODE,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_NNODES,
    MAX_OVERRIDES,
    MAX_RUNTIME_S,
    MAX_STEPS,
    MAX_STRING_LEN,
    NOTES,
    TRAINER_DEVICES,
    JobSpec,
    JobSpecError,
    NoteField,
    Shown,
    error_detail,
)
from service.jobspec.overrides import check_override
from service.jobspec.sandbox import (
    HF_REPO_ID_RE,
    PathRules,
    SandboxError,
    check_path,
    describe,
    is_hf_repo_id,
    norm_abs,
    norm_roots,
    path_pattern,
    tree_pattern,
)
from service.policy.dependencies import (
    OnUnsatisfiable,
    in_order,
    on_unsatisfiable_of,
    parse_after,
)
from service.policy.priorities import MAX_PRIORITY, MIN_PRIORITY

# Overrides a generator may produce: an added key under ``argus`` whose name cannot hit
# the policy's refused classes, and a value of safe characters. The service accepts any
# override its policy allows; the schema holds to a subset that is always valid.
OVERRIDE_GENERATED_PATTERN = r"^\+argus\.x[a-z0-9]{0,24}=[A-Za-z0-9_.-]{0,64}$"
PRINTABLE = "^[ -~]*$"  # what a generator writes in a note (the rule: no control chars)
PATH_MARK = "x-argus-path"


# -- the rules of the kinds of values ------------------------------------------------------


def _bad_char(text: str) -> str | None:
    if text.isprintable():
        return None
    return next((f"U+{ord(ch):04X}" for ch in text if not ch.isprintable()), None)


def text(value: Any, *, empty_ok: bool = False) -> str:
    """Every string of the document: a string, not empty (unless ``empty_ok``), at most
    ``MAX_STRING_LEN`` characters, no control or non-printable character."""
    if not isinstance(value, str):
        raise problem(f"must be a string, got {describe(value)}")
    if not value and not empty_ok:
        raise problem("must not be empty")
    if len(value) > MAX_STRING_LEN:
        raise problem(f"must be at most {MAX_STRING_LEN} characters long")
    bad = _bad_char(value)
    if bad:
        raise problem(f"must not contain control or non-printable characters (found {bad})")
    return value


def _rules(info: ValidationInfo) -> PathRules:
    return info.context["rules"]


def _path(value: Any, info: ValidationInfo) -> str:
    try:
        return check_path(text(value), _rules(info))
    except SandboxError as exc:
        raise problem(str(exc)) from exc


def _count(low: int, high: int, default: int | None = None, *, nullable: bool = False
           ) -> Callable[[Any], int | None]:
    def check(value: Any) -> int | None:
        if value is None and nullable:
            return default
        # JSON has one number type: 1.0 is the integer 1, as JSON Schema's "integer" (and
        # so the OpenAPI document) says; 1.5 is not
        if isinstance(value, float) and value.is_integer() and low <= value <= high:
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise problem(f"must be an integer from {low} to {high}, got {describe(value)}")
        if not low <= value <= high:
            raise problem(f"must be from {low} to {high}, got {value}")
        return value
    return check


def count(low: int, high: int, about: str) -> Any:
    """A required integer in ``low..high``."""
    return Annotated[int, Field(ge=low, le=high, description=about), rule(_count(low, high))]


def optional_count(low: int, high: int, about: str, default: int | None = None) -> Any:
    """An integer in ``low..high``, or null / left out: ``default`` (the field's)."""
    return Annotated[int | None, Field(ge=low, le=high, description=about),
                     rule(_count(low, high, default, nullable=True))]


def _workload(value: Any) -> str:
    value = text(value)
    if value not in WORKLOADS:
        raise problem(f"must be one of {', '.join(WORKLOAD_NAMES)}, got {describe(value)}")
    return value


def _model_id(value: Any, info: ValidationInfo) -> str:
    value = text(value)
    if value.startswith("/"):
        return _path(value, info)
    if not is_hf_repo_id(value):
        raise problem("must be an absolute path or a Hugging Face repo id 'org/name', "
                      f"got {describe(value)}")
    return value


def _workload_of(info: ValidationInfo) -> str | None:
    return info.data.get("workload")  # absent when the workload itself is invalid


def _val_file(value: Any, info: ValidationInfo) -> str | None:
    workload = _workload_of(info)
    if workload is not None and WORKLOADS[workload].needs_val_file and value is None:
        raise problem(f"required for workload {workload}")
    return None if value is None else _path(value, info)


def _trainer_device(value: Any, info: ValidationInfo) -> str | None:
    if value is None:
        return None
    value = text(value)
    workload = _workload_of(info)
    if workload is not None and not WORKLOADS[workload].takes_device:
        raise problem(f"only allowed for workload sft, not {workload}")
    if value not in TRAINER_DEVICES:
        raise problem(f"must be one of {', '.join(TRAINER_DEVICES)} or null, "
                      f"got {describe(value)}")
    return value


def _overrides(value: Any, info: ValidationInfo) -> tuple[str, ...]:
    """Each item's problem at ``overrides[i]`` (the policy: ``service.jobspec.overrides``;
    the keys the workload sets are checked only when the workload is valid)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise problem(f"must be a list of 'key=value' strings, got {describe(value)}")
    if len(value) > MAX_OVERRIDES:
        raise problem(f"at most {MAX_OVERRIDES} items, got {len(value)}")
    workload = _workload_of(info)
    owned = owned_keys(workload) if workload is not None else {}
    errors = []
    for index, item in enumerate(value):
        try:
            found = check_override(text(item), owned, _rules(info))
        except PydanticCustomError as exc:
            found = exc.context["message"]  # type: ignore[index]
        if found:
            errors.append(InitErrorDetails(type=problem(found), loc=(index,), input=item))
    if errors:
        raise ValidationError.from_exception_data("overrides", errors)
    return tuple(value)


def _after(value: Any) -> tuple[tuple[str, str], ...]:
    after, problems = parse_after(value)
    if problems:
        raise ValidationError.from_exception_data("after", [
            InitErrorDetails(type=problem(p), loc=(), input=value) for p in problems])
    return in_order((c.value, p) for c, p in after.pairs)


def _on_unsatisfiable(value: Any) -> str:
    policy, found = on_unsatisfiable_of(value)
    if found is not None:
        raise problem(found)
    return policy.value


def _note(note: NoteField) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        value = text(value, empty_ok=True)
        if len(value) > note.max_length:
            raise problem(f"must be at most {note.max_length} characters long")
        return value or None
    return check


_LABEL_KEY_RE = re.compile(LABEL_KEY)


def _labels(value: Any) -> dict[str, str]:
    """A map of at most ``MAX_LABELS`` keys (``LABEL_KEY``) to values of at most
    ``MAX_LABEL_VALUE`` printable characters; each problem at ``labels[key]``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise problem(f"must be a mapping of label keys to string values, got {describe(value)}")
    if len(value) > MAX_LABELS:
        raise problem(f"at most {MAX_LABELS} labels, got {len(value)}")
    errors = []
    for key, item in value.items():
        found = None
        if not isinstance(key, str) or not _LABEL_KEY_RE.match(key):
            found = ("a key must be a lower-case name of letters, digits, '.', '_' and '-' "
                     "(at most 63, starting and ending with a letter or digit), optionally "
                     f"after 'prefix/' of the same form, got {describe(key)}")
        elif not isinstance(item, str):
            found = f"must be a string, got {describe(item)}"
        elif len(item) > MAX_LABEL_VALUE:
            found = f"must be at most {MAX_LABEL_VALUE} characters long"
        elif _bad_char(item) or not item.isascii():
            found = "must be printable ASCII (no control characters)"
        if found:
            errors.append(InitErrorDetails(type=problem(found), loc=(str(key),), input=item))
    if errors:
        raise ValidationError.from_exception_data("labels", errors)
    return dict(value)


_PATH = Field(max_length=MAX_STRING_LEN, json_schema_extra={PATH_MARK: True})
Path = Annotated[str, _PATH, rule(_path)]
_HF_ID = {"type": "string", "pattern": f"^{HF_REPO_ID_RE.pattern}$",
          "not": {"pattern": r"\.\.|--"}}
_NULLABLE_TEXT = {"type": "string", "maxLength": MAX_STRING_LEN, "pattern": PRINTABLE}


# -- the declaration -------------------------------------------------------------------------


class _Document(BaseModel):
    """A JobSpec: YAML (a flat mapping; no anchors, aliases, merge keys, tags or complex
    keys) or a JSON object with the same fields."""

    # the fields in the order problems are listed; the notes (NOTES) follow

    model_config = ConfigDict(extra="forbid", title="JobSpec", validate_default=True)

    workload: Annotated[Literal[WORKLOAD_NAMES], rule(_workload)]  # type: ignore[valid-type]
    submission_id: Annotated[str | None,
                             WithJsonSchema({"anyOf": [_NULLABLE_TEXT, {"type": "null"}],
                                             "description": "accepted and ignored"}),
                             rule(lambda v: None if v is None else text(v, empty_ok=True))
                             ] = None
    code_path: Annotated[Path, Field(description="verl checkout, put on PYTHONPATH")]
    model_id: Annotated[str, WithJsonSchema({
        "anyOf": [{PATH_MARK: True}, _HF_ID], "examples": ["Qwen/Qwen2.5-0.5B-Instruct"]}),
        rule(_model_id)]
    train_file: Path
    val_file: Annotated[str | None,
                        WithJsonSchema({"anyOf": [{PATH_MARK: True}, {"type": "null"}]}),
                        rule(_val_file)] = None
    nnodes: count(1, MAX_NNODES, "nodes of the gang")
    n_gpus_per_node: count(1, MAX_GPUS_PER_NODE, "GPUs on each node")
    total_epochs: optional_count(1, MAX_EPOCHS, "default 1", default=1) = 1
    total_training_steps: optional_count(1, MAX_STEPS, "default: verl's") = None
    save_freq: optional_count(-1, MAX_STEPS, "-1: off") = None
    test_freq: optional_count(-1, MAX_STEPS, "-1: off") = None
    trainer_device: Annotated[Literal[TRAINER_DEVICES] | None,  # type: ignore[valid-type]
                              Field(description="sft only"), rule(_trainer_device)] = None
    overrides: Annotated[
        list[Annotated[str, Field(pattern=OVERRIDE_GENERATED_PATTERN)]] | None,
        Field(max_length=MAX_OVERRIDES,
              description="Hydra overrides key=value; the service accepts any its override "
                          "policy allows, the pattern is a subset that always is"),
        rule(_overrides)] = None
    priority: optional_count(MIN_PRIORITY, MAX_PRIORITY,
                             "higher is admitted first; default and what users may ask for: config"
                             ) = None
    max_runtime_s: optional_count(1, MAX_RUNTIME_S,
                                  "time limit of each attempt from its driver's start (stopped "
                                  "past it, TIME_LIMIT); default: config (none)") = None
    max_attempts: Annotated[optional_count(
        1, MAX_ATTEMPTS, "attempts that count against the retry budget (preemptions do not); "
        "default and ceiling: the configured max_attempts"), Shown(
        "Max attempts", "the JobSpec's retry budget: attempts that count (preemptions do "
        "not); null: the configured max_attempts")] = None
    # an object alone: a nullable object makes generators write a class per JobSpec kind
    labels: Annotated[dict[str, str] | None, WithJsonSchema({
        "type": "object", "maxProperties": MAX_LABELS, "propertyNames": {"pattern": LABEL_KEY},
        "additionalProperties": {"type": "string", "maxLength": MAX_LABEL_VALUE,
                                 "pattern": PRINTABLE},
        "description": "key: value labels shown with the task and filtered on "
                       "(?label=key=value), put in the Ray job's metadata"}),
        rule(_labels), Shown("Labels", "the JobSpec's labels (key: value); filter with "
                             "?label=key=value")] = None
    # the JSON Schema leaves after out: a generator of valid specs cannot know task ids
    after: SkipJsonSchema[Annotated[Any, rule(_after)]] = None
    on_unsatisfiable: Annotated[
        Literal[tuple(p.value for p in OnUnsatisfiable)] | None,  # type: ignore[misc]
        Field(description="a dependency that can never hold: cancel (default) or keep "
                          "waiting (see after, docs/pipelines.md)"),
        rule(_on_unsatisfiable)] = None


JobSpecDocument: type[BaseModel] = create_model(  # the notes: one field each (NOTES)
    "JobSpecDocument", __base__=_Document, __doc__=_Document.__doc__,
    **{note.name: (Annotated[str | None, Field(max_length=note.max_length,
                                               pattern=PRINTABLE, description=note.about),
                             rule(_note(note)), note.shown], None) for note in NOTES})
FIELDS: tuple[str, ...] = tuple(JobSpecDocument.model_fields)
_KNOWN = frozenset(FIELDS)



# -- validation --------------------------------------------------------------------------------


def validate_jobspec(doc: dict[Any, Any], rules: PathRules) -> JobSpec:
    """The document as a ``JobSpec``, or ``JobSpecError`` with every problem: unknown
    fields first, then each field's in the declaration's order."""
    details = [error_detail(str(key), f"unknown field (known fields: {', '.join(FIELDS)})")
               for key in doc if key not in _KNOWN]
    known = doc if not details else {k: v for k, v in doc.items() if k in _KNOWN}
    try:
        found = JobSpecDocument.model_validate(known, context={"rules": rules})
    except ValidationError as exc:
        details += [_detail(e) for e in exc.errors(include_url=False, include_input=False)]
        raise JobSpecError(details) from None
    if details:
        raise JobSpecError(details)
    values = found.__dict__.copy()  # the fields' values (the rules normalised them)
    del values["submission_id"]  # accepted and ignored
    return JobSpec(**values)


def _detail(error: Any) -> dict[str, Any]:
    field, *rest = error["loc"]
    name = f"{field}{''.join(f'[{i}]' for i in rest)}"
    if error["type"] == "missing":
        return error_detail(name, "required field is missing")
    return error_detail(name, error["msg"])


# -- the JSON Schema -----------------------------------------------------------------------------


def _with_paths(node: Any, path: dict[str, Any]) -> Any:
    """``node`` with each declared path (``x-argus-path``) made ``path``."""
    if isinstance(node, dict):
        if node.get(PATH_MARK):
            own = {k: v for k, v in node.items() if k not in (PATH_MARK, "maxLength", "type")}
            return {**path, **own}
        return {k: _with_paths(v, path) for k, v in node.items()}
    if isinstance(node, list):
        return [_with_paths(v, path) for v in node]
    return node


@cache
def _declared() -> dict[str, Any]:
    return json_schema_of(JobSpecDocument)


def declared_schema(path: dict[str, Any]) -> dict[str, Any]:
    """The declaration's JSON Schema with each path as ``path``: a deep copy."""
    return _with_paths(_declared(), path)


def path_schema(allowed_roots: Sequence[str], users_root: str | None = None
                ) -> dict[str, Any]:
    """A JobSpec path of a deployment: its pattern under ``allowed_roots``, not in the
    users' trees under ``users_root`` (a submitter's own is the rule's, not the schema's)."""
    roots = norm_roots(allowed_roots)
    path: dict[str, Any] = {
        "type": "string", "pattern": path_pattern(roots), "maxLength": MAX_STRING_LEN,
        "examples": [f"{roots[0].rstrip('/')}/datasets/gsm8k/train.parquet"]}
    if users_root is not None:
        path["not"] = {"pattern": tree_pattern(norm_abs(users_root)),
                       "description": "the users' trees: only the submitter's own"}
    return path


def _workload_variant(name: str, path: dict[str, Any]) -> dict[str, Any]:
    workload = WORKLOADS[name]
    properties: dict[str, Any] = {"workload": {"const": name}}
    required = ["workload"]
    if workload.needs_val_file:
        properties["val_file"] = path
        required.append("val_file")
    if not workload.takes_device:
        properties["trainer_device"] = {"const": None}
    return {"properties": properties, "required": required}


def jobspec_json_schema(allowed_roots: Sequence[str] = ("/private",),
                        users_root: str | None = None) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the JobSpec document, for ``allowed_roots``; paths
    under ``users_root`` (the users' private trees) are left out.

    Strict enough that a property-based generator (schemathesis, hypothesis-jsonschema)
    produces specs ``validate_jobspec`` accepts; what depends on the workload is one
    variant each (val_file required and not null, trainer_device only where the workload
    takes one)."""
    path = path_schema(allowed_roots, users_root)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            **declared_schema(path),
            "anyOf": [_workload_variant(name, path) for name in WORKLOAD_NAMES]}
