"""The stand-in trainer: verl 0.9.1's resource behaviour without any GPU software.

NOT verl. It reproduces what matters at the Ray boundary: the fail-fast GPU check (same
expression, same message as ``verl.single_controller.ray.base.ResourcePoolManager.
_check_resource_available``) and one STRICT_PACK placement group per node with bundles
``{"CPU": 3, "GPU": 1}`` waited for without a timeout, like ``RayResourcePool``.
Then "training": ``trainer.total_training_steps`` steps (or one per second of
``argus_demo.duration_s``), saving and resuming verl's checkpoint layout under
``trainer.default_local_dir`` (see ``standin_checkpoint``) so that a stopped run's next
attempt visibly resumes.

Everything but ``run`` is pure (``train`` takes its clock and printer), so the unit tier
tests it without Ray.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import standin_checkpoint as ckpt

CPUS_PER_BUNDLE = 3  # verl's default max_colocate_count
# Set on a node's `ray start` (its workers inherit it): a planted bad GPU. A worker there
# reports it, and the run fails at its first step with ``CUDA error: <value>`` as a GPU
# with uncorrectable ECC errors fails a real run (the integration tier's bad node).
GPU_FAULT_ENV = "ARGUS_STANDIN_GPU_FAULT"
RESUME_MODES = ("auto", "disable", "resume_path")  # verl's trainer.resume_mode values
NULLS = ("null", "~")  # Hydra's null literals (verl's defaults say null for "not set")


class UsageError(ValueError):
    """A command-line value the stand-in cannot use."""


def parse_overrides(argv: Sequence[str]) -> dict[str, str]:
    """Hydra-style ``key=value`` / ``+key=value`` / ``++key=value`` tokens to a dict."""
    out: dict[str, str] = {}
    for token in argv:
        key, sep, value = token.partition("=")
        if not sep or not key.lstrip("+"):
            raise UsageError(f"argument {token!r} is not of the form key=value")
        out[key.lstrip("+")] = value
    return out


def _int(values: Mapping[str, str], key: str, default: int | None, minimum: int) -> int:
    raw = values.get(key)
    if raw is None:
        if default is None:
            raise UsageError(f"{key} is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{key} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise UsageError(f"{key} must be >= {minimum}, got {value}")
    return value


def _optional_int(values: Mapping[str, str], key: str, minimum: int) -> int | None:
    raw = values.get(key)
    if raw is None or raw.strip().lower() in NULLS:
        return None
    return _int(values, key, None, minimum)


def _optional_str(values: Mapping[str, str], key: str) -> str | None:
    raw = values.get(key)
    if raw is None or raw.strip().lower() in NULLS or not raw.strip():
        return None
    return raw


def _float(values: Mapping[str, str], key: str, default: float) -> float:
    raw = values.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{key} must be a number, got {raw!r}") from None
    if value < 0:
        raise UsageError(f"{key} must be >= 0, got {value}")
    return value


@dataclass(frozen=True)
class RunConfig:
    nnodes: int
    n_gpus_per_node: int
    experiment_name: str
    duration_s: float
    check_delay_s: float
    exit_code: int
    total_training_steps: int | None = None
    save_freq: int = -1  # verl saves only when > 0
    default_local_dir: str | None = None  # no directory: no checkpoints at all
    resume_mode: str = "auto"
    resume_from_path: str | None = None

    @classmethod
    def from_overrides(cls, values: Mapping[str, str]) -> RunConfig:
        cfg = cls(
            nnodes=_int(values, "trainer.nnodes", None, 1),
            n_gpus_per_node=_int(values, "trainer.n_gpus_per_node", None, 1),
            experiment_name=values.get("trainer.experiment_name", "standin"),
            duration_s=_float(values, "argus_demo.duration_s", 5.0),
            check_delay_s=_float(values, "argus_demo.check_delay_s", 0.0),
            exit_code=_int(values, "argus_demo.exit_code", 0, 0),
            total_training_steps=_optional_int(values, "trainer.total_training_steps", 1),
            save_freq=_optional_int(values, "trainer.save_freq", -1) or -1,  # 0: off too
            default_local_dir=_optional_str(values, "trainer.default_local_dir"),
            resume_mode=values.get("trainer.resume_mode", "auto").strip(),
            resume_from_path=_optional_str(values, "trainer.resume_from_path"),
        )
        if cfg.resume_mode not in RESUME_MODES:
            raise UsageError(f"trainer.resume_mode must be one of {', '.join(RESUME_MODES)}, "
                             f"got {cfg.resume_mode!r}")
        if cfg.save_freq > 0 and cfg.default_local_dir is None:
            raise UsageError("trainer.save_freq >= 1 needs trainer.default_local_dir "
                             "(the stand-in has no default checkpoint directory)")
        if cfg.resume_mode == "resume_path" and (
                cfg.resume_from_path is None or ckpt.step_of(cfg.resume_from_path) is None):
            raise UsageError("trainer.resume_mode=resume_path needs trainer.resume_from_path "
                             "naming a global_step_<k> directory")
        return cfg

    @property
    def total_steps(self) -> int:
        """The run's length in steps: ``total_training_steps``, else one per second."""
        if self.total_training_steps is not None:
            return self.total_training_steps
        return max(1, int(self.duration_s))

    @property
    def step_s(self) -> float:
        """Seconds per step: the whole run (from step 1) lasts ``duration_s``."""
        return self.duration_s / self.total_steps

    def saves_after(self, step: int) -> bool:
        """verl's rule: every ``save_freq`` steps and after the last one, when on."""
        return self.save_freq > 0 and (step % self.save_freq == 0 or step == self.total_steps)


def check_resource_available(node_available_resources: Mapping[str, Mapping[str, float]],
                             process_on_nodes: Sequence[int]) -> None:
    """verl 0.9.1's check, same arithmetic (so the same int/float formatting)."""
    node_available_gpus = {
        node: node_info.get("GPU", 0) if "GPU" in node_info else node_info.get("NPU", 0)
        for node, node_info in node_available_resources.items()
    }
    total_available_gpus = sum(node_available_gpus.values())
    total_required_gpus = sum(process_on_nodes)
    if total_available_gpus < total_required_gpus:
        raise ValueError(
            f"Total available GPUs {total_available_gpus} is less than total desired GPUs "
            f"{total_required_gpus}"
        )


def _say(trainer: str, text: str) -> None:
    print(f"[standin-verl {trainer}] {text}", flush=True)


class ResumeError(RuntimeError):
    """The checkpoint named by ``resume_mode=resume_path`` is not there (verl fails too)."""


def resume_from(cfg: RunConfig, say: Callable[[str], None]) -> int:
    """The last completed step to continue after (0: from scratch), saying which.

    ``auto`` reads the tracker under ``default_local_dir``; a missing, garbled or dangling
    tracker means from scratch (as in verl). ``disable`` and a run without a checkpoint
    directory always start from scratch.
    """
    if cfg.resume_mode == "disable":
        say("trainer.resume_mode=disable: training from step 1")
        return 0
    if cfg.resume_mode == "resume_path":
        assert cfg.resume_from_path is not None  # checked by from_overrides
        step = ckpt.step_of(cfg.resume_from_path)
        assert step is not None
        if not Path(cfg.resume_from_path).is_dir():
            raise ResumeError(f"checkpoint {cfg.resume_from_path} does not exist")
        say(f"resumed from checkpoint {ckpt.STEP_PREFIX}{step}")
        return step
    if cfg.default_local_dir is None:
        return 0
    latest = ckpt.find_latest(cfg.default_local_dir)
    if latest.problem:
        say(f"ignoring the checkpoint tracker: {latest.problem}")
    if latest.step is None:
        say("no checkpoint to resume from")
        return 0
    say(f"resumed from checkpoint {ckpt.STEP_PREFIX}{latest.step}")
    return latest.step


def step_line(step: int, total: int, step_s: float) -> str:
    """verl's console logger line for one step (``step:N - key:value - ...``), with
    made-up but smooth curves: a loss that falls and a reward that rises over the run."""
    x = step / total
    loss = 0.1 + 2.0 * math.exp(-3.0 * x)
    score = 1.0 - math.exp(-3.0 * x)
    return (f"step:{step} - train/loss:{loss:.4f} - critic/score/mean:{score:.4f} - "
            f"actor/lr:1e-06 - timing_s/step:{step_s:.3f}")


def train(cfg: RunConfig, say: Callable[[str], None],
          sleep: Callable[[float], None] = time.sleep) -> int:
    """The training loop after the workers are up: resume, steps, checkpoints.

    Returns the last step done (the resumed-from step when nothing was left to do).
    """
    done = resume_from(cfg, say)
    total = cfg.total_steps
    if done >= total:
        say(f"checkpoint step {done} >= total steps {total}: nothing left to train")
        return done
    for step in range(done + 1, total + 1):
        sleep(cfg.step_s)
        say(step_line(step, total, cfg.step_s))
        if cfg.saves_after(step):
            assert cfg.default_local_dir is not None  # checked by from_overrides
            ckpt.save(cfg.default_local_dir, step,
                      {"total_steps": total, "experiment_name": cfg.experiment_name})
            say(f"saved checkpoint {ckpt.STEP_PREFIX}{step}")
    return total


def run(cfg: RunConfig, trainer: str) -> int:
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init()
    _say(trainer, f"experiment {cfg.experiment_name}: {cfg.nnodes}x{cfg.n_gpus_per_node} GPUs")
    if cfg.check_delay_s:
        _say(trainer, f"waiting {cfg.check_delay_s}s before the resource check")
        time.sleep(cfg.check_delay_s)
    check_resource_available(ray._private.state.available_resources_per_node(),
                             [cfg.n_gpus_per_node] * cfg.nnodes)
    _say(trainer, "resource check passed")

    bundle = {"CPU": CPUS_PER_BUNDLE, "GPU": 1}
    pgs = [
        placement_group([dict(bundle) for _ in range(cfg.n_gpus_per_node)],
                        strategy="STRICT_PACK", name=f"{cfg.experiment_name}:pg{i}")
        for i in range(cfg.nnodes)
    ]
    _say(trainer, f"waiting for {len(pgs)} placement group(s)")
    ray.get([pg.ready() for pg in pgs])  # no timeout: verl waits forever too

    @ray.remote(num_cpus=1, num_gpus=1)
    def touch() -> tuple[str, str]:
        import os

        ctx = ray.get_runtime_context()
        return (f"node {ctx.get_node_id()[:8]} gpu {ray.get_gpu_ids()}",
                os.environ.get(GPU_FAULT_ENV, ""))

    refs = [
        touch.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=i)).remote()
        for pg in pgs for i in range(cfg.n_gpus_per_node)
    ]
    faults = []
    for line, fault in ray.get(refs):
        _say(trainer, f"worker ready: {line}")
        if fault:
            faults.append(fault)
    _say(trainer, f"Total training steps: {cfg.total_steps}")  # verl's trainer says so too
    if faults:  # a planted bad GPU: the first step never ends well
        time.sleep(cfg.step_s)
        raise RuntimeError(f"CUDA error: {faults[0]}")
    try:
        train(cfg, lambda text: _say(trainer, text))
    except ResumeError as exc:
        _say(trainer, f"error: {exc}")
        return 1
    _say(trainer, f"done, exit code {cfg.exit_code}")
    return cfg.exit_code


def main(argv: Sequence[str], trainer: str) -> int:
    try:
        cfg = RunConfig.from_overrides(parse_overrides(argv))
    except UsageError as exc:
        _say(trainer, f"usage error: {exc}")
        return 2
    return run(cfg, trainer)
