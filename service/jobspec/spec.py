"""JobSpec: the YAML (or JSON) body of ``POST /api/v2/tasks``, parsed and validated.

``parse_jobspec`` (YAML) and ``parse_jobspec_json`` (a JSON object: the same fields, the
same validator and size limit) never stop at the first problem: ``JobSpecError.details`` lists every
offending field with the reason, so a user fixes a spec in one round trip.

Rules beyond the field table, and why:

* The body goes through ``service.jobspec.yamldoc`` (bounded depth, nodes, scalar sizes and
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
  ``/``) follow ``service.jobspec.sandbox``: absolute, a narrow character set, under
  ``settings.resolved_allowed_roots`` after normalisation. The users' trees
  (``<shared_root>/users/<user>/``) are private: a spec may name paths in its own user's
  tree only; a path in another user's tree is refused, naming the field.
* ``model_id`` that is not a path is a Hugging Face repo id ``org/name``.
* ``priority`` is an integer in ``service.policy.priorities``' range; who may ask for how much is
  the API's check (it knows the caller's role), not the document's.
* ``max_runtime_s`` is the attempt's time limit in whole seconds (1 s .. 30 days), counted
  from its driver's start: past it Argus stops the attempt and the task fails with
  TIME_LIMIT (not retried). The scheduler also reads it as a promise: a task that will
  surely end before the nodes kept for a waiting gang drain may run there meanwhile.
  Omitted: ``scheduler.default_max_runtime_s`` (none by default).
* ``overrides`` items follow ``service.jobspec.overrides`` (shape, keys Argus sets, the override
  policy, path-valued overrides under the allowed roots). When the workload itself is
  invalid, the keys it would set are unknown and only that check is skipped.
* ``after`` (``{ok: [task_id...], notok: [...], any: [...]}``) and ``on_unsatisfiable``
  (``cancel`` | ``wait``) follow ``service.policy.dependencies``; here only their shape is
  checked (whether the parents exist and may be named is the store's check). The JSON
  Schema leaves ``after`` out: a generator of valid specs cannot know existing task ids.

The fields and their rules are declared once, in ``service.jobspec.schema``
(``JobSpecDocument``): the validation here and the JSON Schema (``jobspec_json_schema``,
for the OpenAPI document and for generators of valid specs) are both generated from it;
this module is the front door in front of it (size, encoding, YAML's limits).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from service.config import Settings
from service.domain.layout import user_root, users_root
from service.jobspec import yamldoc
from service.jobspec.model import JobSpec, JobSpecError, error_detail
from service.jobspec.sandbox import (
    PathRules,
    describe,
)
from service.jobspec.schema import validate_jobspec

YAML_LIMITS = yamldoc.Limits(max_depth=3)  # fields; after: a mapping of lists


def path_rules(settings: Settings, user: str | None) -> PathRules:
    """Where a JobSpec of ``user`` may point: the allowed roots, and of the users' trees
    only ``user``'s own (none when ``user`` is None)."""
    return _path_rules(tuple(settings.resolved_allowed_roots), settings.shared_root, user)


@functools.lru_cache(maxsize=1024)
def _path_rules(roots: tuple[str, ...], shared_root: str, user: str | None) -> PathRules:
    # strings only (no file is looked at): the same rules for every JobSpec of one user
    # under one configuration, made once instead of at every submit (normalising each
    # root and tree took ~20 us of a POST); a frozen PathRules, shared safely
    return PathRules.make(roots, users_root(shared_root),
                          None if user is None else user_root(shared_root, user))


def parse_jobspec(text: str | bytes, settings: Settings, user: str | None = None
                  ) -> JobSpec:
    """Parse and validate a JobSpec YAML body of ``user``. Raises JobSpecError listing
    every problem.

    CPU-bound and bounded (see ``service.jobspec.yamldoc.Limits``): callers on an event loop run
    it in an executor.
    """
    doc = _load_yaml(text, settings.max_body_bytes)
    if not isinstance(doc, dict):
        got = "an empty document" if doc is None else describe(doc)
        message = f"must be a YAML mapping of JobSpec fields, got {got}"
        raise JobSpecError([error_detail("body", message)])
    return _within_ceiling(validate_jobspec(doc, path_rules(settings, user)), settings)


def _within_ceiling(spec: JobSpec, settings: Settings) -> JobSpec:
    """``spec``, unless it asks more attempts than the configured ``max_attempts`` (the
    default and the ceiling of a task's own; None: ``MAX_ATTEMPTS`` bounds it alone)."""
    ceiling = settings.scheduler.max_attempts
    if spec.max_attempts is not None and ceiling is not None and spec.max_attempts > ceiling:
        raise JobSpecError([error_detail("max_attempts", (
            f"must be at most {ceiling} (the configured max_attempts), got {spec.max_attempts}"))])
    return spec


def parse_jobspec_json(text: str | bytes, settings: Settings, user: str | None = None
                       ) -> JobSpec:
    """The same JobSpec sent as a JSON object: the same size limit and the same
    validator (a JSON body is never parsed as YAML). Duplicate keys, NaN and Infinity,
    which JSON parsers disagree on, are refused."""
    text = _text_within(text, settings.max_body_bytes)
    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError as exc:
        raise JobSpecError([error_detail("body", "JSON nested too deeply")]) from exc
    except ValueError as exc:
        raise JobSpecError([error_detail("body", f"not valid JSON: {str(exc)[:200]}")]) from exc
    if not isinstance(doc, dict):
        message = f"must be a JSON object of JobSpec fields, got {type(doc).__name__}"
        raise JobSpecError([error_detail("body", message)])
    return _within_ceiling(validate_jobspec(doc, path_rules(settings, user)), settings)


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
    return _within_ceiling(validate_jobspec(dict(doc), path_rules(settings, user)), settings)


def _text_within(text: str | bytes, max_bytes: int) -> str:
    """The body as text, once it is known to be within the size limit (413) and UTF-8."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise JobSpecError(
            [error_detail("body", f"body is {size} bytes, over the limit of {max_bytes} bytes")],
            status=413,
        )
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise JobSpecError(
                [error_detail("body", f"body is not valid UTF-8 (byte {exc.start})")]
            ) from exc
    return text


def _load_yaml(text: str | bytes, max_bytes: int) -> Any:
    text = _text_within(text, max_bytes)
    try:
        return yamldoc.load(text, YAML_LIMITS)
    except yamldoc.YamlDocError as exc:
        raise JobSpecError(exc.details) from exc
