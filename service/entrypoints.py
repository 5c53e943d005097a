"""verl entrypoints: the Ray Job command line and submit request for a JobSpec (SPEC A2).

One table, ``ENTRYPOINTS``, maps a workload to the verl module it runs and the ordered
Hydra parameters Argus sets for it. Adding a workload is one more entry. The same table
tells the JobSpec validator which keys a user override may not touch (``owned_keys``),
so the keys Argus sets and the keys it protects cannot drift apart.

The argv is ``python3 -m <module> <Argus params> <operator default overrides> <user
overrides>``; each element is one token, and ``build_submit_request`` joins them with
``shlex.join`` so no value can break out into the shell Ray runs the entrypoint with.
A parameter whose value is None (an optional JobSpec field left out) is omitted, so verl
keeps its own default rather than receiving the string "None".

Keys checked against verl 0.9.1's wheel (``verl/trainer/config``):

* ``main_ppo`` reads ``ppo_trainer.yaml`` (see ``_generated_ppo_trainer.yaml``): it has
  ``algorithm.adv_estimator`` (default gae), ``data.train_files``, ``data.val_files``,
  ``actor_rollout_ref.model.path``, ``critic.model.path`` and ``trainer.{nnodes,
  n_gpus_per_node, total_epochs, total_training_steps, save_freq, test_freq,
  default_local_dir, resume_mode, project_name, experiment_name, logger}``.
* ``sft_trainer_ray`` reads ``sft_trainer_engine.yaml`` (``@hydra.main(config_name=
  "sft_trainer_engine")``): ``data.train_files``, ``data.val_files`` (default null),
  ``model.path`` (from the ``model@model: hf_model`` default), and ``trainer.{nnodes,
  n_gpus_per_node, device, total_epochs, total_training_steps, save_freq, test_freq,
  default_local_dir, resume_mode, project_name, experiment_name, logger}``; its logger
  defaults to ``[console, wandb]``, which Argus replaces with ``[console]`` as for PPO.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.cluster import SubmitRequest
from service.config import Settings, thaw
from service.ids import submission_id

if TYPE_CHECKING:  # jobspec imports this module for owned_keys(); avoid the cycle
    from service.jobspec import JobSpec

PYTHON = "python3"
PROJECT_NAME = "argus"
LOGGER = "[console]"
DRIVER_RESOURCE = "worker_node"  # custom resource only worker nodes advertise


@dataclass(frozen=True, slots=True)
class Context:
    """What a parameter's value may depend on besides the JobSpec."""

    spec: JobSpec
    task_id: str
    checkpoint_dir: str


Value = str | int | None


@dataclass(frozen=True, slots=True)
class Param:
    """One ``key=value`` Argus puts on the verl command line.

    ``field`` names the JobSpec field the value comes from (so an error can point a user
    who tries to override the key at the right field); None for values Argus decides.
    """

    key: str
    value: Callable[[Context], Value]
    field: str | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    module: str
    params: tuple[Param, ...]


def _field(key: str, name: str) -> Param:
    return Param(key, lambda ctx: getattr(ctx.spec, name), field=name)


def _const(key: str, value: str) -> Param:
    return Param(key, lambda ctx: value)


def _trainer_params(*, device: bool) -> tuple[Param, ...]:
    params = [
        _field("trainer.nnodes", "nnodes"),
        _field("trainer.n_gpus_per_node", "n_gpus_per_node"),
    ]
    if device:
        params.append(_field("trainer.device", "trainer_device"))
    params += [
        _field("trainer.total_epochs", "total_epochs"),
        _field("trainer.total_training_steps", "total_training_steps"),
        _field("trainer.save_freq", "save_freq"),
        _field("trainer.test_freq", "test_freq"),
        Param("trainer.default_local_dir", lambda ctx: ctx.checkpoint_dir),
        _const("trainer.resume_mode", "auto"),
        _const("trainer.project_name", PROJECT_NAME),
        Param("trainer.experiment_name", lambda ctx: ctx.task_id),
        _const("trainer.logger", LOGGER),
    ]
    return tuple(params)


def _ppo_like(adv_estimator: str, *, critic: bool) -> Workload:
    params = [
        _const("algorithm.adv_estimator", adv_estimator),
        _field("data.train_files", "train_file"),
        _field("data.val_files", "val_file"),
        _field("actor_rollout_ref.model.path", "model_id"),
    ]
    if critic:
        params.append(_field("critic.model.path", "model_id"))
    return Workload("verl.trainer.main_ppo", (*params, *_trainer_params(device=False)))


def _sft() -> Workload:
    return Workload(
        module="verl.trainer.sft_trainer_ray",
        params=(
            _field("data.train_files", "train_file"),
            _field("data.val_files", "val_file"),
            _field("model.path", "model_id"),
            *_trainer_params(device=True),
        ),
    )


ENTRYPOINTS: dict[str, Workload] = {
    "ppo": _ppo_like("gae", critic=True),
    "grpo": _ppo_like("grpo", critic=False),
    "sft": _sft(),
}


def owned_keys(workload: str) -> Mapping[str, str | None]:
    """Hydra keys Argus sets for ``workload`` -> the JobSpec field that sets each (or None).

    Raises KeyError for an unknown workload.
    """
    return {p.key: p.field for p in ENTRYPOINTS[workload].params}


def checkpoint_dir(task_id: str, settings: Settings) -> str:
    """Per task, not per attempt: a retried attempt resumes with ``resume_mode=auto``."""
    return str(settings.checkpoints_dir() / task_id)


def _render(value: str | int) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"cannot render {value!r} as a Hydra value")
    return str(value)


def build_entrypoint(spec: JobSpec, task_id: str, settings: Settings) -> list[str]:
    """The verl command line for ``spec`` as an argv list (one token per element)."""
    workload = ENTRYPOINTS[spec.workload]
    ctx = Context(spec=spec, task_id=task_id, checkpoint_dir=checkpoint_dir(task_id, settings))
    argv = [PYTHON, "-m", workload.module]
    for param in workload.params:
        value = param.value(ctx)
        if value is not None:
            argv.append(f"{param.key}={_render(value)}")
    argv.extend(settings.default_overrides.get(spec.workload, ()))
    argv.extend(spec.overrides)
    return argv


def _runtime_env(spec: JobSpec, settings: Settings) -> dict:
    runtime_env = thaw(settings.runtime_env)
    env_vars = runtime_env.setdefault("env_vars", {})
    if not isinstance(env_vars, dict):
        raise ValueError("ray.runtime_env.env_vars must be a mapping")
    configured = env_vars.get("PYTHONPATH")
    env_vars["PYTHONPATH"] = f"{spec.code_path}:{configured}" if configured else spec.code_path
    return runtime_env


def _entrypoint_resources(settings: Settings) -> dict[str, float]:
    """The configured driver resources, with at least one ``worker_node`` slot so the
    driver always lands on a worker, never on the 0-CPU head."""
    resources = {name: float(amount) for name, amount in settings.entrypoint_resources.items()}
    resources[DRIVER_RESOURCE] = max(resources.get(DRIVER_RESOURCE, 0.0), 1.0)
    return resources


def build_submit_request(
    spec: JobSpec, *, task_id: str, attempt_no: int, user: str | None, settings: Settings
) -> SubmitRequest:
    """Everything Ray needs to start attempt ``attempt_no`` of ``task_id``."""
    return SubmitRequest(
        submission_id=submission_id(task_id, attempt_no),
        entrypoint=shlex.join(build_entrypoint(spec, task_id, settings)),
        runtime_env=_runtime_env(spec, settings),
        entrypoint_num_cpus=float(settings.entrypoint_num_cpus),
        entrypoint_resources=_entrypoint_resources(settings),
        metadata={
            "argus_task_id": task_id,
            "argus_attempt": str(attempt_no),
            "argus_user": user or "",
        },
    )
