"""Take GPUs outside Argus: a separate Ray driver holding ``num_gpus`` with plain actors.

    python gpu_holder.py <gcs_address> <node_id>:<gpus>[:<cpus>] [...]

Each actor asks for ``num_gpus`` (and ``cpus``, none by default) pinned to its node. Once
every actor runs it prints ``HOLDING`` and keeps the GPUs until its standard input closes,
then exits (Ray frees the GPUs when the driver goes). Another user's job looks exactly
like this to Argus.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    gcs, *holds = argv
    ray.init(address=gcs, logging_level="WARNING", log_to_driver=False)

    @ray.remote(num_cpus=0)
    class Holder:
        def ready(self) -> bool:
            return True

    actors = []
    for item in holds:
        node_id, gpus, *cpus = item.split(":")
        actors.append(Holder.options(
            num_gpus=float(gpus), num_cpus=float(cpus[0]) if cpus else 0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote())
    ray.get([a.ready.remote() for a in actors])
    print("HOLDING", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
