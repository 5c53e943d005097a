"""The stand-in trainer: verl 0.9.1's resource behaviour without any GPU software.

NOT verl. It reproduces what matters at the Ray boundary: the fail-fast GPU check (same
expression, same message as ``verl.single_controller.ray.base.ResourcePoolManager.
_check_resource_available``) and one STRICT_PACK placement group per node with bundles
``{"CPU": 3, "GPU": 1}`` waited for without a timeout, like ``RayResourcePool``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CPUS_PER_BUNDLE = 3  # verl's default max_colocate_count


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

    @classmethod
    def from_overrides(cls, values: Mapping[str, str]) -> RunConfig:
        return cls(
            nnodes=_int(values, "trainer.nnodes", None, 1),
            n_gpus_per_node=_int(values, "trainer.n_gpus_per_node", None, 1),
            experiment_name=values.get("trainer.experiment_name", "standin"),
            duration_s=_float(values, "argus_demo.duration_s", 5.0),
            check_delay_s=_float(values, "argus_demo.check_delay_s", 0.0),
            exit_code=_int(values, "argus_demo.exit_code", 0, 0),
        )


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
    def touch() -> str:
        ctx = ray.get_runtime_context()
        return f"node {ctx.get_node_id()[:8]} gpu {ray.get_gpu_ids()}"

    refs = [
        touch.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=i)).remote()
        for pg in pgs for i in range(cfg.n_gpus_per_node)
    ]
    for line in ray.get(refs):
        _say(trainer, f"worker ready: {line}")
    steps = max(1, int(cfg.duration_s))
    for step in range(1, steps + 1):
        time.sleep(cfg.duration_s / steps)
        _say(trainer, f"step {step}/{steps}")
    _say(trainer, f"done, exit code {cfg.exit_code}")
    return cfg.exit_code


def main(argv: Sequence[str], trainer: str) -> int:
    try:
        cfg = RunConfig.from_overrides(parse_overrides(argv))
    except UsageError as exc:
        _say(trainer, f"usage error: {exc}")
        return 2
    return run(cfg, trainer)
