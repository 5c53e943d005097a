"""Pipelines as pure values: the document, its DAG, output references, the derived state.

A pipeline document (YAML, or JSON which YAML reads too)::

    name: sft-ppo-eval
    stages:
      sft:
        jobspec: {workload: sft, ...}            # a JobSpec, as POST /tasks takes
      ppo:
        after: {ok: [sft]}                       # stage names, Slurm's conditions
        jobspec:
          model_id: "{{stages.sft.latest_checkpoint}}"
          ...
      eval:
        after: {any: [ppo]}
        on_unsatisfiable: cancel                 # or wait (service.policy.dependencies)
        jobspec: {...}

Each stage becomes a normal task. Its ``after`` names earlier stages (the edges); the
graph must be acyclic, at most ``MAX_STAGES`` stages and ``dependencies.MAX_DEPTH`` deep.

Output references, ``{{stages.<name>.<output>}}`` anywhere inside a string of a stage's
JobSpec, name an ancestor stage's outputs (``OUTPUTS``): ``checkpoint_dir`` (the stage's
``trainer.default_local_dir``), ``latest_checkpoint`` (its newest complete
``global_step_<k>`` directory, verl's layout) and ``job_dir`` (its latest attempt's
directory: Hydra run dir, driver log). They are resolved when the stage becomes runnable
and the result is validated like any JobSpec of the owner (never outside their tree).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.domain.states import PipelineState, TaskState
from service.jobspec import yamldoc
from service.policy.dependencies import (
    MAX_DEPTH,
    After,
    OnUnsatisfiable,
    on_unsatisfiable_of,
    parse_after,
)

MAX_STAGES = 64
STAGE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
PIPELINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
OUTPUTS = ("checkpoint_dir", "latest_checkpoint", "job_dir")
REF = re.compile(r"\{\{\s*stages\.([a-z][a-z0-9_]{0,31})\.([a-z_]+)\s*\}\}")
DOC_LIMITS = yamldoc.Limits(max_depth=6, max_nodes=16_384, budget_s=1.0)
STAGE_FIELDS = ("jobspec", "after", "on_unsatisfiable")


class PipelineError(ValueError):
    """The document is not a valid pipeline; ``details`` names every problem."""

    def __init__(self, details: list[dict[str, Any]]) -> None:
        self.details = details
        super().__init__("invalid pipeline: " + "; ".join(
            f"{d['field']}: {d['message']}" for d in details))


@dataclass(frozen=True)
class StageDoc:
    name: str
    jobspec: Mapping[str, Any]  # as written, references unresolved
    after: After  # parents by stage name
    on_unsatisfiable: OnUnsatisfiable
    refs: frozenset[tuple[str, str]]  # (stage, output) its JobSpec refers to


@dataclass(frozen=True)
class PipelineDoc:
    name: str
    stages: tuple[StageDoc, ...]  # parents before children (document order kept else)


def parse_pipeline(text: str) -> PipelineDoc:
    """Parse and check a pipeline document (shape, names, edges, cycles, depth,
    references). The stages' JobSpecs are checked by the caller (``jobspec``), which knows
    the owner's paths. Raises PipelineError listing every problem."""
    try:
        doc = yamldoc.load(text, DOC_LIMITS)
    except yamldoc.YamlDocError as exc:
        raise PipelineError(exc.details) from exc
    problems: list[dict[str, Any]] = []

    def error(field: str, message: str) -> None:
        problems.append({"field": field, "message": message})

    if not isinstance(doc, dict):
        raise PipelineError([{"field": "body", "message": "must be a mapping with name "
                              "and stages"}])
    for key in doc:
        if key not in ("name", "stages"):
            error(str(key)[:40], "unknown field (known: name, stages)")
    name = doc.get("name")
    if not isinstance(name, str) or not PIPELINE_NAME.fullmatch(name):
        error("name", f"must match {PIPELINE_NAME.pattern}")
    raw = doc.get("stages")
    if not isinstance(raw, dict) or not raw:
        error("stages", "must be a non-empty mapping of stage name -> stage")
        raise PipelineError(problems)
    if len(raw) > MAX_STAGES:
        error("stages", f"{len(raw)} stages, over the limit of {MAX_STAGES}")
        raise PipelineError(problems)
    stages = [_stage(key, value, set(raw), error) for key, value in raw.items()]
    if problems:
        raise PipelineError(problems)
    ordered = _topological(stages, error)
    if problems:
        raise PipelineError(problems)
    _check_refs(ordered, error)
    if problems:
        raise PipelineError(problems)
    return PipelineDoc(name=str(name), stages=tuple(ordered))


def _stage(key: Any, value: Any, names: set[Any],
           error: Callable[[str, str], None]) -> StageDoc:
    field = f"stages.{str(key)[:40]}"
    if not isinstance(key, str) or not STAGE_NAME.fullmatch(key):
        error(field, f"stage name must match {STAGE_NAME.pattern}")
    if not isinstance(value, dict):
        error(field, "must be a mapping with jobspec (and after, on_unsatisfiable)")
        return StageDoc(str(key), {}, After(), OnUnsatisfiable.CANCEL, frozenset())
    for extra in value:
        if extra not in STAGE_FIELDS:
            error(f"{field}.{str(extra)[:40]}",
                  f"unknown field (known: {', '.join(STAGE_FIELDS)})")
    after, after_problems = parse_after(value.get("after"), is_ref=lambda s: s in names)
    for problem in after_problems:
        error(f"{field}.after", problem)
    if any(parent == key for _, parent in after.pairs):
        error(f"{field}.after", "a stage cannot depend on itself")
    policy, problem = on_unsatisfiable_of(value.get("on_unsatisfiable"))
    if problem is not None:
        error(f"{field}.on_unsatisfiable", problem)
    spec = value.get("jobspec")
    if not isinstance(spec, dict):
        error(f"{field}.jobspec", "must be a JobSpec mapping")
        spec = {}
    for inner in ("after", "on_unsatisfiable"):
        if inner in spec:
            error(f"{field}.jobspec.{inner}", "set it on the stage, not in its JobSpec")
    refs = frozenset(find_refs(spec))
    for stage, output in refs:
        if output not in OUTPUTS:
            error(f"{field}.jobspec", f"unknown output {output!r} of stage {stage} "
                  f"(known: {', '.join(OUTPUTS)})")
    return StageDoc(str(key), spec, after, policy, refs)


def _topological(stages: list[StageDoc], error: Callable[[str, str], None]
                 ) -> list[StageDoc]:
    """Parents before children (Kahn, document order among the ready); a cycle or a chain
    deeper than ``MAX_DEPTH`` is an error."""
    by_name = {s.name: s for s in stages}
    depth: dict[str, int] = {}
    done: list[StageDoc] = []
    left = list(stages)
    while left:
        ready = [s for s in left if all(p in depth for _, p in s.after.pairs)]
        if not ready:
            error("stages", "the stages' after form a cycle: "
                  + ", ".join(sorted(s.name for s in left)))
            return done
        for stage in ready:
            depth[stage.name] = 1 + max((depth[p] for _, p in stage.after.pairs),
                                        default=-1)
            if depth[stage.name] > MAX_DEPTH:
                error(f"stages.{stage.name}", f"dependency chain is {depth[stage.name]} "
                      f"stages deep, over the limit of {MAX_DEPTH}")
            done.append(by_name[stage.name])
        left = [s for s in left if s.name not in depth]
    return done


def ancestors(stages: Sequence[StageDoc]) -> dict[str, frozenset[str]]:
    """Every stage's ancestors (``stages`` parents first)."""
    out: dict[str, frozenset[str]] = {}
    for stage in stages:
        found: set[str] = set()
        for _, parent in stage.after.pairs:
            found |= {parent, *out.get(parent, ())}
        out[stage.name] = frozenset(found)
    return out


def _check_refs(stages: Sequence[StageDoc], error: Callable[[str, str], None]) -> None:
    """A stage may refer only to its ancestors' outputs: they have ended by the time it is
    released (any other stage might still run, or never)."""
    up = ancestors(stages)
    for stage in stages:
        for ref_stage, _ in sorted(stage.refs):
            if ref_stage not in up[stage.name]:
                error(f"stages.{stage.name}.jobspec",
                      f"refers to stage {ref_stage}, which is not one of its ancestors "
                      "(name it in after, directly or through another stage)")


def find_refs(value: Any) -> set[tuple[str, str]]:
    """Every ``(stage, output)`` referred to in the strings of ``value``."""
    if isinstance(value, str):
        return {(m[1], m[2]) for m in REF.finditer(value)}
    if isinstance(value, Mapping):
        return set().union(*(find_refs(v) for v in value.values()))
    if isinstance(value, list | tuple):
        return set().union(*(find_refs(v) for v in value))
    return set()


def substitute(value: Any, outputs: Mapping[tuple[str, str], str]) -> Any:
    """``value`` with every reference replaced by ``outputs[(stage, output)]`` (KeyError
    for one not given)."""
    if isinstance(value, str):
        return REF.sub(lambda m: outputs[(m[1], m[2])], value)
    if isinstance(value, Mapping):
        return {k: substitute(v, outputs) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [substitute(v, outputs) for v in value]
    return value


def derive_state(stages: Sequence[tuple[TaskState, bool]], cancel_requested: bool
                 ) -> PipelineState:
    """A pipeline's state from its stages' ``(state, skipped)``: RUNNING while any stage
    has not ended; then CANCELED when a person canceled the pipeline, FAILED when a stage
    failed, CANCELED when a stage was canceled (skipped stages, whose dependency could
    never hold, do not count), else SUCCEEDED."""
    if any(not state.is_terminal() for state, _ in stages):
        return PipelineState.RUNNING
    if cancel_requested:
        return PipelineState.CANCELED
    if any(state is TaskState.FAILED for state, _ in stages):
        return PipelineState.FAILED
    if any(state is TaskState.CANCELED and not skipped for state, skipped in stages):
        return PipelineState.CANCELED
    return PipelineState.SUCCEEDED
