"""Ray's resource names and what a Ray job's driver asks for (pure values)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GPU = "GPU"
CPU = "CPU"


@dataclass(frozen=True, slots=True)
class Driver:
    """What the Ray job's driver needs on one node (``entrypoint_resources`` + CPUs)."""

    resources: Mapping[str, float]
    num_cpus: float = 0.0

    def needs(self) -> dict[str, float]:
        out = {k: float(v) for k, v in self.resources.items() if v > 0}
        if self.num_cpus > 0:
            out[CPU] = out.get(CPU, 0.0) + float(self.num_cpus)
        return out
