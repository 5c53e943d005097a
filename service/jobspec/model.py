"""The JobSpec as a value (``JobSpec``: validated and normalised), its fields' limits, and
the error a bad document raises (with one detail per problem). The document's fields and
their rules are declared in ``service.jobspec.schema``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from service.policy.dependencies import OnUnsatisfiable, in_order

MAX_NNODES = 1024


MAX_GPUS_PER_NODE = 64


MAX_EPOCHS = 100_000


MAX_STEPS = 1_000_000_000


MAX_RUNTIME_S = 30 * 86400  # a limit beyond a month is no limit anyone means


MAX_STRING_LEN = 4096


MAX_DESCRIPTION = 500  # characters of the free-text note


MAX_LABELS = 16  # labels of one task
MAX_LABEL_VALUE = 63  # characters of a label's value
# a label's key: a DNS-label-like name (lower case, digits, '.', '_', '-'; 1..63, starting
# and ending with a letter or digit), optionally after a 'prefix/' of the same form
LABEL_NAME = r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?"
LABEL_KEY = rf"^({LABEL_NAME}/)?{LABEL_NAME}$"
# a filter on a label (``?label=`` of the task list): key=value
LABEL_FILTER = rf"^{LABEL_KEY[1:-1]}=[ -~]{{0,{MAX_LABEL_VALUE}}}$"


MAX_ATTEMPTS = 100  # a task's own retry budget, when the config sets no ceiling


@dataclass(frozen=True)
class NoteField:
    """An optional line of printable text in the JobSpec that Argus keeps and shows with
    the task (task JSON, console, CLI) and never acts on. Declared once, in ``NOTES``: the
    JobSpec's declaration (``service.jobspec.schema``: its rule and its JSON Schema), the
    API's Task shape, the task JSON and the console's task page read the declaration
    (``shown``: its mark), so a new note is this entry and a ``JobSpec`` attribute."""

    name: str
    max_length: int
    about: str  # what it is, in both schemas
    title: str  # the console's, beside its value

    @property
    def shown(self) -> Shown:
        """A note is shown with its task (its mark in ``JobSpecDocument``)."""
        return Shown(self.title, f"the JobSpec's {self.name}: {self.about}")


NOTES: tuple[NoteField, ...] = (
    NoteField("description", MAX_DESCRIPTION, "a free-text note shown with the task",
              "Description"),
)


@dataclass(frozen=True)
class Shown:
    """Marks a field of ``JobSpecDocument`` (``service.jobspec.schema``, in its
    ``Annotated``) as shown with its task as submitted: the task JSON and the API's Task
    shape, and the console's task page, read ``SHOWN`` (made from these marks) and nothing
    else, so a shown field is its declaration there and a ``JobSpec`` attribute."""

    title: str  # the console's, beside its value
    about: str  # the Task shape's description of it


MAX_OVERRIDES = 256


TRAINER_DEVICES = ("cpu", "cuda")


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
    priority: int | None = None  # None: the configured default (service.policy.priorities)
    max_runtime_s: int | None = None  # None: the configured default (none unless set)
    # (condition, parent task id) pairs (service.policy.dependencies): BLOCKED until they hold
    after: tuple[tuple[str, str], ...] = ()
    on_unsatisfiable: str = OnUnsatisfiable.CANCEL.value
    description: str | None = None  # a free-text note, shown with the task
    labels: Mapping[str, str] = field(default_factory=dict)  # key -> value, shown, filtered on
    # attempts that count against the retry budget (None: the configured max_attempts)
    max_attempts: int | None = None

    @property
    def total_gpus(self) -> int:
        return self.nnodes * self.n_gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (overrides as a list); ``from_dict`` reads it back.

        Field by field, not ``dataclasses.asdict``: its deep copy of every value was ~45 us
        of each submit's ~50 us here; the values are strings and numbers but for the three
        containers made afresh below."""
        out = {name: getattr(self, name) for name in _FIELD_NAMES}
        out["labels"] = dict(self.labels)
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
        return cls(**{**d, "labels": dict(d.get("labels") or {}),
                      "overrides": tuple(d.get("overrides") or ()),
                      "after": in_order((c, p) for c, ps in after.items() for p in ps)})


_FIELD_NAMES = tuple(f.name for f in fields(JobSpec))


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


def error_detail(field: str, message: str) -> dict[str, Any]:
    return {"field": field, "message": message}
