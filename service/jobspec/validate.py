"""The JobSpec's rules, every problem of a document collected (``Validator``): fields,
kinds, paths under the allowed roots, overrides, dependencies, the notes."""

from __future__ import annotations

from typing import Any

from service.domain.workloads import WORKLOAD_NAMES, WORKLOADS, owned_keys
from service.jobspec.model import (
    FIELDS,
    MAX_EPOCHS,
    MAX_GPUS_PER_NODE,
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
    error_detail,
)
from service.jobspec.overrides import check_override
from service.jobspec.sandbox import (
    PathRules,
    SandboxError,
    check_path,
    describe,
    is_hf_repo_id,
)
from service.policy.dependencies import in_order, on_unsatisfiable_of, parse_after
from service.policy.priorities import MAX_PRIORITY, MIN_PRIORITY


def _bad_char(text: str) -> str | None:
    if text.isprintable():
        return None
    for ch in text:
        if not ch.isprintable():
            return f"U+{ord(ch):04X}"
    return None


_MISSING = object()


class Validator:
    def __init__(self, doc: dict[Any, Any], rules: PathRules) -> None:
        self.doc = doc
        self.roots = rules
        self.details: list[dict[str, Any]] = []

    def error(self, field: str, message: str) -> None:
        self.details.append(error_detail(field, message))

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
            **{note.name: self.note(note) for note in NOTES},
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

    def note(self, note: NoteField) -> str | None:
        text = self.string(note.name, self.doc.get(note.name), optional=True, empty_ok=True)
        if text is not None and len(text) > note.max_length:
            self.error(note.name, f"must be at most {note.max_length} characters long")
            return None
        return text or None

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
