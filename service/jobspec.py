"""JobSpec: the YAML body of ``POST /api/v2/tasks``, parsed and validated (SPEC A1).

``parse_jobspec`` never stops at the first problem: ``JobSpecError.details`` lists every
offending field with the reason, so a user fixes a spec in one round trip.

Rules beyond the field table in the spec, and why:

* YAML is read with PyYAML's safe loader (no custom tags). A field given twice is an
  error (PyYAML would silently keep the last one).
* An optional field may be omitted or null; both mean its default.
* Integers are YAML integers: ``true`` is not 1 and ``2.0`` is not 2. ``nnodes`` is at
  most 1024 and ``n_gpus_per_node`` at most 64. ``save_freq``/``test_freq`` are >= -1,
  where -1 (verl's default) means off (verl also treats 0 as off).
* Every string is free of control characters (newline, tab, NUL...), so nothing can
  smuggle a second line or a truncated argument anywhere.
* Paths (``code_path``, ``train_file``, ``val_file``, ``model_id`` when it starts with
  ``/``) are absolute, made of letters, digits and ``. _ - + @ /`` only, and lie under
  ``settings.resolved_allowed_roots`` after ``os.path.normpath`` (``..`` cannot escape;
  the path need not exist yet, and symlinks are not followed, as the service may not
  see the storage). The narrow character set is on purpose: paths reach Hydra unquoted,
  where ``, [ ] { } $ = ' "`` have meaning, and ``code_path`` goes on ``PYTHONPATH``,
  where ``:`` would add a second entry.
* ``model_id`` that is not a path is a Hugging Face repo id ``org/name`` (each part
  letters, digits, ``. _ -``, starting and ending with a letter or digit, <= 96 chars).
* ``overrides`` items are Hydra overrides ``key=value``. key: an optional leading ``+``,
  ``++`` or ``~``, then dotted identifiers ``[A-Za-z_][A-Za-z0-9_]*``, each optionally
  followed by one ``[index]``; ``~key`` may omit ``=value``. value: any printable
  characters, possibly empty (spaces, quotes, ``;``, ``$()`` are fine: each override is
  one argv token, shell-quoted when the entrypoint is joined). A key that Argus sets for
  the workload (``trainer.nnodes``, ``data.train_files``, ... see
  ``service.entrypoints.owned_keys``), or a parent of one (``trainer``), is refused.
  When the workload itself is invalid this check is skipped, as the set is unknown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import yaml

from service.config import Settings
from service.entrypoints import ENTRYPOINTS, owned_keys

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
)
MAX_NNODES = 1024
MAX_GPUS_PER_NODE = 64
MAX_EPOCHS = 100_000
MAX_STEPS = 1_000_000_000
MAX_STRING_LEN = 4096
MAX_OVERRIDES = 256
TRAINER_DEVICES = ("cpu", "cuda")
NEEDS_VAL_FILE = frozenset({"ppo", "grpo"})

_PATH_CHARS_RE = re.compile(r"[A-Za-z0-9._+@/-]*")
_HF_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HF_REPO_ID_RE = re.compile(rf"{_HF_PART}/{_HF_PART}")
_SEGMENT = r"[A-Za-z_][A-Za-z0-9_]*(?:\[[0-9]+\])?"
_OVERRIDE_RE = re.compile(
    rf"(?P<op>\+\+|\+|~)?(?P<key>{_SEGMENT}(?:\.{_SEGMENT})*)(?:=(?P<value>.*))?",
    re.DOTALL,
)
_INDEX_RE = re.compile(r"\[[0-9]+\]")


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

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (overrides as a list); ``from_dict`` reads it back."""
        out = asdict(self)
        out["overrides"] = list(self.overrides)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobSpec:
        """Rebuild a JobSpec stored by ``to_dict`` (trusted input, not re-validated)."""
        return cls(**{**d, "overrides": tuple(d.get("overrides") or ())})


class JobSpecError(ValueError):
    """The body is not a valid JobSpec.

    ``details``: one ``{"field", "message"}`` dict per problem (malformed YAML adds
    ``line`` and ``column``, 1-based). ``status``: the HTTP status the API should answer
    with (400, or 413 for a body over the size limit).
    """

    def __init__(self, details: Iterable[dict[str, Any]], status: int = 400) -> None:
        self.details = list(details)
        self.status = status
        summary = "; ".join(f"{d['field']}: {d['message']}" for d in self.details)
        super().__init__(f"invalid JobSpec: {summary}")


def parse_jobspec(text: str | bytes, settings: Settings) -> JobSpec:
    """Parse and validate a JobSpec YAML body. Raises JobSpecError listing every problem."""
    doc = _load_yaml(text, settings.max_body_bytes)
    if not isinstance(doc, dict):
        got = "an empty document" if doc is None else _describe(doc)
        message = f"must be a YAML mapping of JobSpec fields, got {got}"
        raise JobSpecError([_detail("body", message)])
    return _Validator(doc, settings).run()


# -- YAML ----------------------------------------------------------------------------


def _detail(field: str, message: str) -> dict[str, Any]:
    return {"field": field, "message": message}


# libyaml's loader when PyYAML was built with it: same safe constructors, ~10x faster
# parsing, which is most of a submit's CPU.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(text: str | bytes, max_bytes: int) -> Any:
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise JobSpecError(
            [_detail("body", f"body is {size} bytes, over the limit of {max_bytes} bytes")],
            status=413,
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise JobSpecError(
                [_detail("body", f"body is not valid UTF-8 (byte {exc.start})")]
            ) from exc
    try:
        loader = _SafeLoader(text)  # the reader already rejects NUL and the like
        try:
            node = loader.get_single_node()
            duplicates = _duplicate_keys(node)
            if duplicates:
                raise JobSpecError(duplicates)
            return loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        raise JobSpecError([_yaml_detail(exc)]) from exc
    except yaml.YAMLError as exc:
        raise JobSpecError([_detail("body", f"malformed YAML: {exc}")]) from exc


def _yaml_detail(exc: yaml.MarkedYAMLError) -> dict[str, Any]:
    what = "; ".join(part for part in (exc.context, exc.problem) if part) or "cannot parse"
    mark = exc.problem_mark or exc.context_mark
    detail = _detail("body", f"malformed YAML: {what}")
    if mark is not None:
        detail["line"] = mark.line + 1
        detail["column"] = mark.column + 1
        detail["message"] += f" (line {mark.line + 1}, column {mark.column + 1})"
    return detail


def _duplicate_keys(node: yaml.Node | None) -> list[dict[str, Any]]:
    if not isinstance(node, yaml.MappingNode):
        return []
    seen: set[str] = set()
    out = []
    for key_node, _value in node.value:
        key = str(key_node.value)
        if key in seen:
            line = key_node.start_mark.line + 1
            out.append(_detail(key, f"field given more than once (again on line {line})"))
        seen.add(key)
    return out


# -- validation ----------------------------------------------------------------------


def _describe(value: Any) -> str:
    """A value as a YAML user would recognise it, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value!r} (a number)"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"{shown!r} (a string)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _bad_char(text: str) -> str | None:
    for ch in text:
        if not ch.isprintable():
            return f"U+{ord(ch):04X}"
    return None


def _norm_abs(path: str) -> str:
    # normpath keeps a leading "//" (POSIX allows it a meaning); fold it to "/".
    return "/" + os.path.normpath(path).lstrip("/")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


_MISSING = object()


class _Validator:
    def __init__(self, doc: dict[Any, Any], settings: Settings) -> None:
        self.doc = doc
        self.roots = tuple(_norm_abs(r) for r in settings.resolved_allowed_roots)
        self.details: list[dict[str, Any]] = []

    def error(self, field: str, message: str) -> None:
        self.details.append(_detail(field, message))

    def run(self) -> JobSpec:
        for key in self.doc:
            if key not in FIELDS:
                self.error(str(key), f"unknown field (known fields: {', '.join(FIELDS)})")
        workload = self.workload()
        self.string("submission_id", self.doc.get("submission_id"), optional=True)
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
        }
        if self.details:
            raise JobSpecError(self.details)
        return JobSpec(**values)

    # -- presence ------------------------------------------------------------------

    def required(self, field: str) -> Any:
        if field not in self.doc:
            self.error(field, "required field is missing")
            return _MISSING
        return self.doc[field]

    # -- kinds of values -------------------------------------------------------------

    def string(self, field: str, value: Any, *, optional: bool = False) -> str | None:
        if value is _MISSING or (optional and value is None):
            return None
        if not isinstance(value, str):
            self.error(field, f"must be a string, got {_describe(value)}")
            return None
        if not value:
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
        if not text.startswith("/"):
            self.error(field, f"must be an absolute path, got {_describe(text)}")
            return None
        bad = sorted({ch for ch in text if not _PATH_CHARS_RE.fullmatch(ch)})
        if bad:
            self.error(field, f"contains characters not allowed in paths: {''.join(bad)!r} "
                              "(allowed: letters, digits and . _ - + @ /)")
            return None
        norm = _norm_abs(text)
        if not any(_under(norm, root) for root in self.roots):
            self.error(field, f"{norm!r} is outside the allowed roots ({', '.join(self.roots)})")
            return None
        return norm

    def integer(self, field: str, value: Any, low: int, high: int) -> int | None:
        if value is _MISSING:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(field, f"must be an integer from {low} to {high}, got {_describe(value)}")
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
        if value not in ENTRYPOINTS:
            self.error("workload", f"must be one of {', '.join(ENTRYPOINTS)}, "
                                   f"got {_describe(value)}")
            return None
        return value

    def model_id(self) -> str | None:
        text = self.string("model_id", self.required("model_id"))
        if text is None:
            return None
        if text.startswith("/"):
            return self.path("model_id", text)
        if not _HF_REPO_ID_RE.fullmatch(text) or ".." in text or "--" in text:
            self.error("model_id", "must be an absolute path or a Hugging Face repo id "
                                   f"'org/name', got {_describe(text)}")
            return None
        return text

    def val_file(self, workload: str | None) -> str | None:
        if workload in NEEDS_VAL_FILE:
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
        if workload is not None and workload != "sft":
            self.error("trainer_device", f"only allowed for workload sft, not {workload}")
            return None
        if value not in TRAINER_DEVICES:
            self.error("trainer_device", f"must be one of {', '.join(TRAINER_DEVICES)} or "
                                         f"null, got {_describe(value)}")
            return None
        return value

    def overrides(self, workload: str | None) -> tuple[str, ...]:
        value = self.doc.get("overrides")
        if value is None:
            return ()
        if not isinstance(value, list):
            self.error("overrides", f"must be a list of 'key=value' strings, "
                                    f"got {_describe(value)}")
            return ()
        if len(value) > MAX_OVERRIDES:
            self.error("overrides", f"at most {MAX_OVERRIDES} items, got {len(value)}")
            return ()
        owned = owned_keys(workload) if workload is not None else {}
        out = []
        for index, item in enumerate(value):
            checked = self.override(f"overrides[{index}]", item, owned)
            if checked is not None:
                out.append(checked)
        return tuple(out)

    def override(self, field: str, item: Any, owned: Mapping[str, str | None]) -> str | None:
        text = self.string(field, item)
        if text is None:
            return None
        match = _OVERRIDE_RE.fullmatch(text)
        if match is None or (match["value"] is None and match["op"] != "~"):
            self.error(field, "must be a Hydra override 'key=value' (key: dotted identifiers "
                              "with optional [index], optionally led by +, ++ or ~), "
                              f"got {_describe(text)}")
            return None
        key = _INDEX_RE.sub("", match["key"])
        hits = [k for k in owned if k == key or k.startswith(key + ".")]
        if hits == [key]:
            source = owned[key]
            hint = f"use the JobSpec field '{source}'" if source else "it cannot be overridden"
            self.error(field, f"'{key}' is set by Argus; {hint}")
            return None
        if hits:
            self.error(field, f"'{key}' would replace keys set by Argus: {', '.join(hits)}")
            return None
        return text
