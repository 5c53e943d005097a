"""JobSpec: the YAML (or JSON) body of ``POST /api/v2/tasks``, parsed and validated.

``parse_jobspec`` (YAML) and ``parse_jobspec_json`` (a JSON object: the same fields, the
same validator and size limit) never stop at the first problem: ``JobSpecError.details`` lists every
offending field with the reason, so a user fixes a spec in one round trip.

Rules beyond the field table, and why:

* The body goes through ``service.yamldoc`` (bounded depth, nodes, scalar sizes and
  time; no anchors, aliases, merge keys, complex keys or tags; a field given twice is
  an error): a JobSpec is a flat mapping of scalars plus the ``overrides`` list.
* An optional field may be omitted or null; both mean its default. ``submission_id`` is
  accepted and ignored (the service derives its ids), empty included, but it must still
  be a clean string.
* Integers are YAML integers: ``true`` is not 1 and ``2.0`` is not 2. ``nnodes`` is at
  most 1024 and ``n_gpus_per_node`` at most 64. ``save_freq``/``test_freq`` are >= -1,
  where -1 (verl's default) means off (verl also treats 0 as off).
* Every string is free of control characters (newline, tab, NUL...), so nothing can
  smuggle a second line or a truncated argument anywhere.
* Paths (``code_path``, ``train_file``, ``val_file``, ``model_id`` when it starts with
  ``/``) follow ``service.sandbox``: absolute, a narrow character set, under
  ``settings.resolved_allowed_roots`` after normalisation. The users' trees
  (``<shared_root>/users/<user>/``) are private: a spec may name paths in its own user's
  tree only; a path in another user's tree is refused, naming the field.
* ``model_id`` that is not a path is a Hugging Face repo id ``org/name``.
* ``priority`` is an integer in ``service.priorities``' range; who may ask for how much is
  the API's check (it knows the caller's role), not the document's.
* ``max_runtime_s`` is the attempt's time limit in whole seconds (1 s .. 30 days), counted
  from its driver's start: past it Argus stops the attempt and the task fails with
  TIME_LIMIT (not retried). The scheduler also reads it as a promise: a task that will
  surely end before the nodes kept for a waiting gang drain may run there meanwhile.
  Omitted: ``scheduler.default_max_runtime_s`` (none by default).
* ``overrides`` items follow ``service.overrides`` (shape, keys Argus sets, the override
  policy, path-valued overrides under the allowed roots). When the workload itself is
  invalid, the keys it would set are unknown and only that check is skipped.
* ``after`` (``{ok: [task_id...], notok: [...], any: [...]}``) and ``on_unsatisfiable``
  (``cancel`` | ``wait``) follow ``service.dependencies``; here only their shape is
  checked (whether the parents exist and may be named is the store's check). The JSON
  Schema leaves ``after`` out: a generator of valid specs cannot know existing task ids.

``jobspec_json_schema`` describes the same document as JSON Schema (for the OpenAPI
document and for generators of valid specs); a unit test keeps the two in step.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from service import yamldoc
from service.config import Settings
from service.dependencies import OnUnsatisfiable, in_order, on_unsatisfiable_of, parse_after
from service.layout import user_root, users_root
from service.overrides import check_override
from service.priorities import MAX_PRIORITY, MIN_PRIORITY
from service.sandbox import (
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
from service.workloads import WORKLOAD_NAMES, WORKLOADS, owned_keys

FIELDS: tuple[str, ...] = (
    "workload",
    "submission_id",
    "code_path",
    "model_id",
    "train_file",
    "val_file",
    "nnodes",
    "n_gpus_per_node",
    "total_epochs",
    "total_training_steps",
    "save_freq",
    "test_freq",
    "trainer_device",
    "overrides",
    "priority",
    "max_runtime_s",
    "after",
    "on_unsatisfiable",
)
MAX_NNODES = 1024
MAX_GPUS_PER_NODE = 64
MAX_EPOCHS = 100_000
MAX_STEPS = 1_000_000_000
MAX_RUNTIME_S = 30 * 86400  # a limit beyond a month is no limit anyone means
MAX_STRING_LEN = 4096
MAX_OVERRIDES = 256
TRAINER_DEVICES = ("cpu", "cuda")
YAML_LIMITS = yamldoc.Limits(max_depth=3)  # fields; after: a mapping of lists


@dataclass(frozen=True)
class JobSpec:
    """A validated, normalised JobSpec (paths normalised, defaults filled in)."""

    workload: str
    code_path: str
    model_id: str
    train_file: str
    val_file: str | None
    nnodes: int
    n_gpus_per_node: int
    total_epochs: int = 1
    total_training_steps: int | None = None
    save_freq: int | None = None
    test_freq: int | None = None
    trainer_device: str | None = None
    overrides: tuple[str, ...] = ()
    priority: int | None = None  # None: the configured default (service.priorities)
    max_runtime_s: int | None = None  # None: the configured default (none unless set)
    # (condition, parent task id) pairs (service.dependencies): BLOCKED until they hold
    after: tuple[tuple[str, str], ...] = ()
    on_unsatisfiable: str = OnUnsatisfiable.CANCEL.value

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (overrides as a list); ``from_dict`` reads it back."""
        out = asdict(self)
        out["overrides"] = list(self.overrides)
        after: dict[str, list[str]] = {}
        for condition, parent in self.after:  # the document's form: parse_jobspec reads it
            after.setdefault(condition, []).append(parent)
        out["after"] = after
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobSpec:
        """Rebuild a JobSpec stored by ``to_dict`` (trusted input, not re-validated)."""
        after = d.get("after") or {}
        return cls(**{**d, "overrides": tuple(d.get("overrides") or ()),
                      "after": in_order((c, p) for c, ps in after.items() for p in ps)})


class JobSpecError(ValueError):
    """The body is not a valid JobSpec.

    ``details``: one ``{"field", "message"}`` dict per problem (problems in the YAML
    itself add ``line`` and ``column``, 1-based). ``status``: the HTTP status the API
    should answer with (400, or 413 for a body over the size limit).
    """

    def __init__(self, details: Iterable[dict[str, Any]], status: int = 400) -> None:
        self.details = list(details)
        self.status = status
        summary = "; ".join(f"{d['field']}: {d['message']}" for d in self.details)
        super().__init__(f"invalid JobSpec: {summary}")


def path_rules(settings: Settings, user: str | None) -> PathRules:
    """Where a JobSpec of ``user`` may point: the allowed roots, and of the users' trees
    only ``user``'s own (none when ``user`` is None)."""
    root = settings.shared_root
    return PathRules.make(settings.resolved_allowed_roots, users_root(root),
                          None if user is None else user_root(root, user))


def parse_jobspec(text: str | bytes, settings: Settings, user: str | None = None
                  ) -> JobSpec:
    """Parse and validate a JobSpec YAML body of ``user``. Raises JobSpecError listing
    every problem.

    CPU-bound and bounded (see ``service.yamldoc.Limits``): callers on an event loop run
    it in an executor.
    """
    doc = _load_yaml(text, settings.max_body_bytes)
    if not isinstance(doc, dict):
        got = "an empty document" if doc is None else describe(doc)
        message = f"must be a YAML mapping of JobSpec fields, got {got}"
        raise JobSpecError([_detail("body", message)])
    return _Validator(doc, path_rules(settings, user)).run()


def parse_jobspec_json(text: str | bytes, settings: Settings, user: str | None = None
                       ) -> JobSpec:
    """The same JobSpec sent as a JSON object: the same size limit and the same
    validator (a JSON body is never parsed as YAML). Duplicate keys, NaN and Infinity,
    which JSON parsers disagree on, are refused."""
    text = _text_within(text, settings.max_body_bytes)
    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError as exc:
        raise JobSpecError([_detail("body", "JSON nested too deeply")]) from exc
    except ValueError as exc:
        raise JobSpecError([_detail("body", f"not valid JSON: {str(exc)[:200]}")]) from exc
    if not isinstance(doc, dict):
        message = f"must be a JSON object of JobSpec fields, got {type(doc).__name__}"
        raise JobSpecError([_detail("body", message)])
    return _Validator(doc, path_rules(settings, user)).run()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise ValueError(f"duplicate key {key[:64]!r}")
        doc[key] = value
    return doc


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")
def validate_document(doc: Mapping[str, Any], settings: Settings, user: str | None = None
                      ) -> JobSpec:
    """``parse_jobspec`` for a document already read (a pipeline's stage): the same
    rules, JobSpecError listing every problem."""
    return _Validator(dict(doc), path_rules(settings, user)).run()


def _detail(field: str, message: str) -> dict[str, Any]:
    return {"field": field, "message": message}


def _text_within(text: str | bytes, max_bytes: int) -> str:
    """The body as text, once it is known to be within the size limit (413) and UTF-8."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise JobSpecError(
            [_detail("body", f"body is {size} bytes, over the limit of {max_bytes} bytes")],
            status=413,
        )
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise JobSpecError(
                [_detail("body", f"body is not valid UTF-8 (byte {exc.start})")]
            ) from exc
    return text


def _load_yaml(text: str | bytes, max_bytes: int) -> Any:
    text = _text_within(text, max_bytes)
    try:
        return yamldoc.load(text, YAML_LIMITS)
    except yamldoc.YamlDocError as exc:
        raise JobSpecError(exc.details) from exc


# -- validation ----------------------------------------------------------------------


def _bad_char(text: str) -> str | None:
    if text.isprintable():
        return None
    for ch in text:
        if not ch.isprintable():
            return f"U+{ord(ch):04X}"
    return None


_MISSING = object()


class _Validator:
    def __init__(self, doc: dict[Any, Any], rules: PathRules) -> None:
        self.doc = doc
        self.roots = rules
        self.details: list[dict[str, Any]] = []

    def error(self, field: str, message: str) -> None:
        self.details.append(_detail(field, message))

    def run(self) -> JobSpec:
        for key in self.doc:
            if key not in FIELDS:
                self.error(str(key), f"unknown field (known fields: {', '.join(FIELDS)})")
        workload = self.workload()
        self.string("submission_id", self.doc.get("submission_id"), optional=True,
                    empty_ok=True)
        values: dict[str, Any] = {
            "workload": workload,
            "code_path": self.path("code_path", self.required("code_path")),
            "model_id": self.model_id(),
            "train_file": self.path("train_file", self.required("train_file")),
            "val_file": self.val_file(workload),
            "nnodes": self.integer("nnodes", self.required("nnodes"), 1, MAX_NNODES),
            "n_gpus_per_node": self.integer(
                "n_gpus_per_node", self.required("n_gpus_per_node"), 1, MAX_GPUS_PER_NODE
            ),
            "total_epochs": self.optional_int("total_epochs", 1, MAX_EPOCHS, default=1),
            "total_training_steps": self.optional_int("total_training_steps", 1, MAX_STEPS),
            "save_freq": self.optional_int("save_freq", -1, MAX_STEPS),
            "test_freq": self.optional_int("test_freq", -1, MAX_STEPS),
            "trainer_device": self.trainer_device(workload),
            "overrides": self.overrides(workload),
            "priority": self.optional_int("priority", MIN_PRIORITY, MAX_PRIORITY),
            "max_runtime_s": self.optional_int("max_runtime_s", 1, MAX_RUNTIME_S),
            **self.dependencies(),
        }
        if self.details:
            raise JobSpecError(self.details)
        return JobSpec(**values)

    def dependencies(self) -> dict[str, Any]:
        after, problems = parse_after(self.doc.get("after"))
        for problem in problems:
            self.error("after", problem)
        policy, problem = on_unsatisfiable_of(self.doc.get("on_unsatisfiable"))
        if problem is not None:
            self.error("on_unsatisfiable", problem)
        return {"after": in_order((c.value, p) for c, p in after.pairs),
                "on_unsatisfiable": policy.value}

    # -- presence ------------------------------------------------------------------

    def required(self, field: str) -> Any:
        if field not in self.doc:
            self.error(field, "required field is missing")
            return _MISSING
        return self.doc[field]

    # -- kinds of values -------------------------------------------------------------

    def string(self, field: str, value: Any, *, optional: bool = False,
               empty_ok: bool = False) -> str | None:
        if value is _MISSING or (optional and value is None):
            return None
        if not isinstance(value, str):
            self.error(field, f"must be a string, got {describe(value)}")
            return None
        if not value and not empty_ok:
            self.error(field, "must not be empty")
            return None
        if len(value) > MAX_STRING_LEN:
            self.error(field, f"must be at most {MAX_STRING_LEN} characters long")
            return None
        bad = _bad_char(value)
        if bad:
            self.error(field, f"must not contain control or non-printable characters "
                              f"(found {bad})")
            return None
        return value

    def path(self, field: str, value: Any, *, optional: bool = False) -> str | None:
        text = self.string(field, value, optional=optional)
        if text is None:
            return None
        try:
            return check_path(text, self.roots)
        except SandboxError as exc:
            self.error(field, str(exc))
            return None

    def integer(self, field: str, value: Any, low: int, high: int) -> int | None:
        if value is _MISSING:
            return None
        # JSON has one number type: 1.0 is the integer 1, as JSON Schema's "integer" (and
        # so the OpenAPI document) says; 1.5 is not
        if isinstance(value, float) and value.is_integer() and low <= value <= high:
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(field, f"must be an integer from {low} to {high}, got {describe(value)}")
            return None
        if not low <= value <= high:
            self.error(field, f"must be from {low} to {high}, got {value}")
            return None
        return value

    def optional_int(self, field: str, low: int, high: int, default: int | None = None
                     ) -> int | None:
        value = self.doc.get(field)
        return default if value is None else self.integer(field, value, low, high)

    # -- fields with their own rules ----------------------------------------------

    def workload(self) -> str | None:
        value = self.string("workload", self.required("workload"))
        if value is None:
            return None
        if value not in WORKLOADS:
            self.error("workload", f"must be one of {', '.join(WORKLOAD_NAMES)}, "
                                   f"got {describe(value)}")
            return None
        return value

    def model_id(self) -> str | None:
        text = self.string("model_id", self.required("model_id"))
        if text is None:
            return None
        if text.startswith("/"):
            return self.path("model_id", text)
        if not is_hf_repo_id(text):
            self.error("model_id", "must be an absolute path or a Hugging Face repo id "
                                   f"'org/name', got {describe(text)}")
            return None
        return text

    def val_file(self, workload: str | None) -> str | None:
        if workload is not None and WORKLOADS[workload].needs_val_file:
            value = self.doc.get("val_file")
            if value is None:
                self.error("val_file", f"required for workload {workload}")
                return None
            return self.path("val_file", value)
        return self.path("val_file", self.doc.get("val_file"), optional=True)

    def trainer_device(self, workload: str | None) -> str | None:
        value = self.string("trainer_device", self.doc.get("trainer_device"), optional=True)
        if value is None:
            return None
        if workload is not None and not WORKLOADS[workload].takes_device:
            self.error("trainer_device", f"only allowed for workload sft, not {workload}")
            return None
        if value not in TRAINER_DEVICES:
            self.error("trainer_device", f"must be one of {', '.join(TRAINER_DEVICES)} or "
                                         f"null, got {describe(value)}")
            return None
        return value

    def overrides(self, workload: str | None) -> tuple[str, ...]:
        value = self.doc.get("overrides")
        if value is None:
            return ()
        if not isinstance(value, list):
            self.error("overrides", f"must be a list of 'key=value' strings, "
                                    f"got {describe(value)}")
            return ()
        if len(value) > MAX_OVERRIDES:
            self.error("overrides", f"at most {MAX_OVERRIDES} items, got {len(value)}")
            return ()
        owned = owned_keys(workload) if workload is not None else {}
        out = []
        for index, item in enumerate(value):
            field = f"overrides[{index}]"
            text = self.string(field, item)
            if text is None:
                continue
            problem = check_override(text, owned, self.roots)
            if problem:
                self.error(field, problem)
            else:
                out.append(text)
        return tuple(out)


# -- JSON Schema -------------------------------------------------------------------------

# Overrides a generator may produce: an added key under ``argus`` whose name cannot hit
# the policy's refused classes, and a value of safe characters. The service accepts any
# override its policy allows; the schema holds to a subset that is always valid.
_OVERRIDE_GENERATED_PATTERN = r"^\+argus\.x[a-z0-9]{0,24}=[A-Za-z0-9_.-]{0,64}$"


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
    produces specs ``parse_jobspec`` accepts: paths match the roots, model ids are paths
    or HF repo ids, overrides a safe ``key=value`` shape. Rules JSON Schema cannot say
    (a path's normalised form, the override policy, sft-only ``trainer_device``) are
    left to the validator, whose 400 names them.
    """
    roots = norm_roots(allowed_roots)
    path: dict[str, Any] = {
        "type": "string", "pattern": path_pattern(roots), "maxLength": MAX_STRING_LEN,
        "examples": [f"{roots[0].rstrip('/')}/datasets/gsm8k/train.parquet"]}
    if users_root is not None:
        path["not"] = {"pattern": tree_pattern(norm_abs(users_root)),
                       "description": "the users' trees: only the submitter's own"}
    hf_id = {"type": "string", "pattern": f"^{HF_REPO_ID_RE.pattern}$", "not": {
        "pattern": r"\.\.|--"}}

    def count(low: int, high: int, description: str) -> dict[str, Any]:
        return {"type": "integer", "minimum": low, "maximum": high,
                "description": description}

    def nullable(schema: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [schema, {"type": "null"}]}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "JobSpec",
        "type": "object",
        "additionalProperties": False,
        "required": ["workload", "code_path", "model_id", "train_file", "nnodes",
                     "n_gpus_per_node"],
        "properties": {
            "workload": {"enum": list(WORKLOAD_NAMES)},
            "submission_id": nullable({"type": "string", "maxLength": MAX_STRING_LEN,
                                       "pattern": "^[ -~]*$",
                                       "description": "accepted and ignored"}),
            "code_path": {**path, "description": "verl checkout, put on PYTHONPATH"},
            "model_id": {"anyOf": [path, hf_id], "examples": ["Qwen/Qwen2.5-0.5B-Instruct"]},
            "train_file": path,
            "val_file": nullable(path),
            "nnodes": count(1, MAX_NNODES, "nodes of the gang"),
            "n_gpus_per_node": count(1, MAX_GPUS_PER_NODE, "GPUs on each node"),
            "total_epochs": nullable(count(1, MAX_EPOCHS, "default 1")),
            "total_training_steps": nullable(count(1, MAX_STEPS, "default: verl's")),
            "save_freq": nullable(count(-1, MAX_STEPS, "-1: off")),
            "test_freq": nullable(count(-1, MAX_STEPS, "-1: off")),
            "trainer_device": {"enum": [*TRAINER_DEVICES, None],
                               "description": "sft only"},
            "priority": nullable(count(
                MIN_PRIORITY, MAX_PRIORITY,
                "higher is admitted first; default and what users may ask for: config")),
            "max_runtime_s": nullable(count(
                1, MAX_RUNTIME_S,
                "time limit of each attempt from its driver's start (stopped past it, "
                "TIME_LIMIT); default: config (none)")),
            "on_unsatisfiable": nullable({
                "type": "string", "enum": [p.value for p in OnUnsatisfiable],
                "description": "a dependency that can never hold: cancel (default) or "
                               "keep waiting (see after, docs/pipelines.md)"}),
            "overrides": nullable({
                "type": "array", "maxItems": MAX_OVERRIDES,
                "items": {"type": "string", "pattern": _OVERRIDE_GENERATED_PATTERN},
                "description": "Hydra overrides key=value; the service accepts any its "
                               "override policy allows, the pattern is a subset that "
                               "always is",
            }),
        },
        # what depends on the workload: one variant each (val_file required and not
        # null, trainer_device only where the workload takes one)
        "anyOf": [_workload_variant(name, path) for name in WORKLOAD_NAMES],
    }
