"""Every fact about a workload, in one table: what verl runs and what Argus sets for it.

``WORKLOADS`` maps a workload name to the verl module it runs, the ordered Hydra
parameters Argus puts on its command line, the default overrides an operator may replace
in config, and the JobSpec rules that depend on the workload (``val_file`` required, a
``trainer_device`` accepted). Adding a workload is one more entry. Validation
(``owned_keys``), the submit request (``service.jobspec.submission``), config (workload names
and default overrides) and the scheduler (``driver``) all read this module, so the keys
Argus sets, the keys it protects and the resources it asks for cannot drift apart.

Pure: no I/O, nothing imported from the modules that read it.

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
* Both are ``@hydra.main`` programs: Argus sets ``hydra.run.dir`` (and
  ``hydra.sweep.dir``) to the attempt's job directory, so Hydra writes its ``.hydra/``
  record and log there, never an ``outputs/`` tree into the raylet's working directory.
* verl 0.9's PPO trainer starts TransferQueue storage actors on every node, the 0-CPU
  head included, and dies with ``ActorUnschedulableError`` unless they are pinned to
  workers: the default override below does that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from service.domain.resources import Driver

PYTHON = "python3"
PROJECT_NAME = "argus"
LOGGER = "[console]"
DRIVER_RESOURCE = "worker_node"  # custom resource only worker nodes advertise
TQ_PIN = "+transfer_queue.backend.SimpleStorage.required_node_resource=" + DRIVER_RESOURCE


@dataclass(frozen=True, slots=True)
class Context:
    """What a parameter's value may depend on.

    ``spec`` is the validated JobSpec (any object with its fields as attributes: this
    module does not import the validator, which imports it).
    """

    spec: Any
    task_id: str
    checkpoint_dir: str
    attempt_dir: str


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
    default_overrides: tuple[str, ...] = ()
    needs_val_file: bool = False
    takes_device: bool = False  # the JobSpec's trainer_device applies


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
        Param("hydra.run.dir", lambda ctx: ctx.attempt_dir),
        Param("hydra.sweep.dir", lambda ctx: ctx.attempt_dir),
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
    return Workload(
        module="verl.trainer.main_ppo",
        params=(*params, *_trainer_params(device=False)),
        default_overrides=(TQ_PIN,),
        needs_val_file=True,
    )


def _sft() -> Workload:
    return Workload(
        module="verl.trainer.sft_trainer_ray",
        params=(
            _field("data.train_files", "train_file"),
            _field("data.val_files", "val_file"),
            _field("model.path", "model_id"),
            *_trainer_params(device=True),
        ),
        takes_device=True,
    )


WORKLOADS: Mapping[str, Workload] = {
    "ppo": _ppo_like("gae", critic=True),
    "grpo": _ppo_like("grpo", critic=False),
    "sft": _sft(),
}
WORKLOAD_NAMES: tuple[str, ...] = tuple(WORKLOADS)
DEFAULT_OVERRIDES: Mapping[str, tuple[str, ...]] = {
    name: wl.default_overrides for name, wl in WORKLOADS.items()
}


def owned_keys(workload: str) -> dict[str, str | None]:
    """Hydra keys Argus sets for ``workload`` -> the JobSpec field that sets each (or None).

    Raises KeyError for an unknown workload.
    """
    return {p.key: p.field for p in WORKLOADS[workload].params}


def driver(entrypoint_resources: Mapping[str, float], entrypoint_num_cpus: float) -> Driver:
    """What every Ray job driver asks for: the configured entrypoint resources with at
    least one ``worker_node`` slot (the driver always lands on a worker, never on the
    0-CPU head), plus its CPUs. The scheduler admits with it; the submit request sends it.
    """
    resources = {name: float(amount) for name, amount in entrypoint_resources.items()}
    resources[DRIVER_RESOURCE] = max(resources.get(DRIVER_RESOURCE, 0.0), 1.0)
    return Driver(resources, float(entrypoint_num_cpus))
