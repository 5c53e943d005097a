"""The JobSpec fields shown with a task (``SHOWN``), made from their marks (``Shown``, in
``JobSpecDocument``'s declaration, ``service.jobspec.schema``): the task JSON
(``service.web.api.views.task_json``), the API's Task shape (``service.web.shapes.tasks``)
and the console's task page (``_task.html``) iterate them, each value read by name from
the task's stored spec (``TaskRow.spec``). A shown field is thus its declaration there and
a ``JobSpec`` attribute (its type and default), and no other line."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, get_origin, get_type_hints

from service.jobspec.model import JobSpec, Shown
from service.jobspec.schema import JobSpecDocument


@dataclass(frozen=True)
class ShownField:
    """A JobSpec field marked ``Shown`` in ``JobSpecDocument``: its name, the mark's title
    and description, and its type and default as the ``JobSpec`` attribute states them."""

    name: str
    title: str
    about: str
    type: Any  # the JobSpec attribute's annotation (the Task shape's type)
    empty: Callable[[], Any]  # its value when the stored spec has none (the default)

    @property
    def structured(self) -> bool:
        """A map or a list (JSON text as SQLite reads it from the stored spec)."""
        return get_origin(self.type) in (dict, list, tuple, Mapping, Sequence)

    def value(self, spec: Mapping[str, Any]) -> Any:
        """Its value in ``spec`` (a task's stored JobSpec, ``TaskRow.spec``); the
        default where the spec has none (stored before the field existed)."""
        found = spec.get(self.name)
        return self.empty() if found is None else found


def _shown() -> tuple[ShownField, ...]:
    hints = get_type_hints(JobSpec)
    out = []
    for name, info in JobSpecDocument.model_fields.items():
        for mark in info.metadata:
            if isinstance(mark, Shown):
                attr = next(f for f in dataclass_fields(JobSpec) if f.name == name)
                empty = (attr.default_factory if attr.default_factory is not MISSING
                         else (lambda d=attr.default: d))
                out.append(ShownField(name, mark.title, mark.about, hints[name], empty))
    return tuple(out)


# the shown fields, in the document's order: the task JSON (``task_json``), the API's Task
# shape and the console's task page show these and no other JobSpec field of their own
SHOWN: tuple[ShownField, ...] = _shown()
