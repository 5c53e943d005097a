"""The Ray job that fences an out-of-admission node (issue 55): what it runs and how it is
told apart from a task's attempt. No I/O; the adapters submit it.

Argus decides when a gang is submitted; Ray decides where it lands. A cordoned or drained
node is absent to admission (``service.scheduling.cordon``), but a driver asking for
``worker_node`` or a verl placement group asking for GPUs may still be placed there by
Ray. The fence closes that gap on Ray's side: one Ray job per fenced node whose small
driver (``FENCE_SCRIPT``, run with ``python3 -c`` so the head needs nothing but Ray)
holds the node's free resources with actors pinned to it by
``NodeAffinitySchedulingStrategy(node_id, soft=False)``, one actor per resource and
grab, taking what attempts there give back as they end (a drain), until it is stopped.
What it holds is what admission would count on: the GPUs, the CPUs, and the custom
resources of the task drivers (``ray.entrypoint_resources``: ``worker_node``).

The fence asks for no entrypoint resources, so Ray runs its driver on the head (which
offers none); its actors take only what was free on the fenced node. Its submission id
starts with ``FENCE_PREFIX`` and its metadata carries ``argus_fence`` (the node's name)
and ``argus_fence_node_id``; the service asks Ray only about its own attempts' ids, so a
fence is never read as an attempt, nor its actors as a gang's placement groups.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping

from service.cluster.boundary import FenceJob, SubmitRequest
from service.domain.states import RayStatus

FENCE_PREFIX = "argus-fence-"
META_NODE = "argus_fence"  # the fenced node's name
META_NODE_ID = "argus_fence_node_id"  # its Ray node id (hex)
META_HOLDS = "argus_fence_holds"  # the resources it holds, comma-separated
PYTHON = "python3"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

# The driver, run as ``python3 -c FENCE_SCRIPT NODE_ID RESOURCES`` (RESOURCES: names,
# comma-separated). Every second: the node still alive? (else it ends: a node that comes
# back has a new id and gets a new fence); for each resource with no grab under way and
# some free there, one actor asks for all of it (a quantity above 1 whole: Ray's rule), a
# grab not placed within 10 s (someone took it first) is dropped and tried again. Stopping
# the job ends the driver, and Ray frees what its actors held.
FENCE_SCRIPT = '''\
# argus fence: holds the free resources of one node so that Ray places nothing new there
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

node_id, kinds = sys.argv[1], [k for k in sys.argv[2].split(",") if k]
ray.init(logging_level="WARNING", log_to_driver=False)


@ray.remote(num_cpus=0)
class Hold:
    def ready(self):
        return True


def options(kind, amount):
    pin = NodeAffinitySchedulingStrategy(node_id, soft=False)
    if kind == "GPU":
        return dict(num_gpus=amount, scheduling_strategy=pin)
    if kind == "CPU":
        return dict(num_cpus=amount, scheduling_strategy=pin)
    return dict(resources={kind: amount}, scheduling_strategy=pin)


held = {kind: 0.0 for kind in kinds}
actors = []  # every holder, kept: a dropped handle would end its actor
grabs = {}  # kind -> (actor, ready ref, amount, since)
said = None
print(f"argus fence on node {node_id}: holding {', '.join(kinds)}", flush=True)
while True:
    if node_id not in {n["NodeID"] for n in ray.nodes() if n["Alive"]}:
        print(f"node {node_id} left the cluster; the fence ends", flush=True)
        break
    free = ray._private.state.available_resources_per_node().get(node_id, {})
    for kind in kinds:
        if kind in grabs:
            actor, ref, amount, since = grabs[kind]
            if ray.wait([ref], timeout=0)[0]:
                held[kind] += amount
                del grabs[kind]
            elif time.monotonic() - since > 10:
                ray.kill(actor)
                del grabs[kind]
            continue
        left = float(free.get(kind, 0.0))
        amount = float(int(left)) if left >= 1 else round(left, 4)
        if amount > 0:
            actor = Hold.options(**options(kind, amount)).remote()
            actors.append(actor)
            grabs[kind] = (actor, actor.ready.remote(), amount, time.monotonic())
    now = ", ".join(f"{kind}={held[kind]:g}" for kind in kinds)
    if now != said:
        print(f"argus fence holds {now}", flush=True)
        said = now
    time.sleep(1.0)
'''


def safe_name(name: str) -> str:
    """``name`` as a part of a submission id (a NodeName may be an address)."""
    return _UNSAFE.sub("_", name)[:63] or "node"


def fence_request(name: str, node_id: str, holds: Iterable[str], token: str) -> SubmitRequest:
    """The Ray job that fences node ``name`` (Ray id ``node_id``), holding ``holds``;
    ``token`` makes its submission id new (Ray keeps every id it has seen)."""
    kinds = sorted(set(holds))
    return SubmitRequest(
        submission_id=f"{FENCE_PREFIX}{safe_name(name)}-{token}",
        entrypoint=shlex.join([PYTHON, "-c", FENCE_SCRIPT, node_id, ",".join(kinds)]),
        runtime_env={},
        entrypoint_num_cpus=0.0,  # no resources asked: Ray runs the driver on the head
        entrypoint_resources={},
        metadata={META_NODE: name, META_NODE_ID: node_id, META_HOLDS: ",".join(kinds)},
    )


def fence_of(submission_id: str, metadata: Mapping[str, str] | None,
             status: RayStatus) -> FenceJob | None:
    """The fence a listed Ray job is (None: not a fence of Argus's)."""
    meta = metadata or {}
    if not submission_id.startswith(FENCE_PREFIX) or not meta.get(META_NODE):
        return None
    return FenceJob(submission_id, meta[META_NODE], meta.get(META_NODE_ID, ""), status)


def fence_holds(settings_resources: Mapping[str, float]) -> tuple[str, ...]:
    """What a fence holds: GPUs, CPUs and the task drivers' custom resources."""
    return tuple(sorted({"GPU", "CPU", *settings_resources}))
