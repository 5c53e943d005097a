"""Runtime tier: the head's GCS SIGKILLed with the workers on the head's host and address
(a one-box lab, host networking; issue 55, item 5).

One head and two workers, each a real ``argus-node run`` on this host: one IP, no network or
PID namespace, a Ray temp dir and a block of Ray ports (dashboard-agent ports included) per
node, ``ARGUS_TTL_S=20 ARGUS_REFRESH_S=2 ARGUS_POLL_S=1``. A detached actor runs on a
worker (a thread in it counts); the head's GCS is SIGKILLed by the project's fault script.
Every worker must be back in the cluster within :data:`HEAL_S` (head.json names the restarted
head, its GCS lists both workers alive), and the running work kept as on distinct hosts
(``test_node_runtime.py``, ``test_head_faults.py``): the same cluster id, the workers'
raylet pids unchanged, the actor the same process with its count gone on.

Before the fix (the head's ``ray start --head`` refused, "already running", while the
workers' raylets named its address) the workers were back after 302 s, once their raylets
had given up the 300 s reconnect budget: new raylets, the actor lost. With
``ARGUS_TEST_ONE_HOST_HEAL_S=400`` the test measures that (and then fails on the kept work);
the heal time is printed (``pytest -s``). See docs/node-runtime.md, "One host".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from raypool import discovery
from raypool.headrecord import HeadRecord
from raypool.local.launcher import (
    LocalCluster,
    count_workers,
    node_pids,
)

from .onehost import one_host_cluster
from .waiting import poll

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(900)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
WORKERS = 2
HEAL_S = float(os.environ.get("ARGUS_TEST_ONE_HOST_HEAL_S", "30"))
NAMESPACE = "argus-one-host"

if not shutil.which("supervisord", path=os.path.dirname(sys.executable)) \
        and not shutil.which("supervisord"):
    pytest.skip("runtime tier needs supervisord", allow_module_level=True)

# A detached actor on a worker: a thread in it counts every 0.2 s whatever the GCS does.
CREATE = """
import json, os, sys, threading, time, ray
ray.init(address=sys.argv[1], namespace=sys.argv[2], log_to_driver=False)
@ray.remote(num_cpus=0, resources={"worker_node": 1})
class Ticker:
    def __init__(self):
        self.n = 0
        threading.Thread(target=self._count, daemon=True).start()
    def _count(self):
        while True:
            self.n += 1
            time.sleep(0.2)
    def state(self):
        return {"pid": os.getpid(), "n": self.n,
                "node": ray.get_runtime_context().get_node_id()}
ticker = Ticker.options(name="ticker", lifetime="detached").remote()
print(json.dumps(ray.get(ticker.state.remote(), timeout=60)))
"""
READ = """
import json, sys, ray
ray.init(address=sys.argv[1], namespace=sys.argv[2], log_to_driver=False)
ticker = ray.get_actor("ticker")
print(json.dumps(ray.get(ticker.state.remote(), timeout=20)))
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """Head + 2 workers on this host's IP (``onehost.py``)."""
    with one_host_cluster("aro", NAMESPACE, [f"w{i}" for i in range(1, WORKERS + 1)],
                          {}) as c:
        yield c


def head_record(c: LocalCluster) -> HeadRecord | None:
    return discovery.read_record(c.head_file, c.cluster_name).record


def driver(script: str, address: str) -> dict:
    """Run a short Ray driver in its own process (a driver in this one would die with the
    GCS); its last line of output is JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "ARGUS_"))}
    done = subprocess.run([sys.executable, "-c", script, address, NAMESPACE], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def log_tail(c: LocalCluster, name: str, program: str, lines: int = 15) -> str:
    path = os.path.join(c.state_dir, "shared", "common", "logs", name, f"{program}.log")
    try:
        with open(path) as f:
            return f"--- {name} {program}\n" + "".join(f.readlines()[-lines:])
    except OSError as exc:
        return f"--- {name} {program}: {exc}"


def test_head_gcs_killed_with_workers_on_the_heads_address(cluster):
    c = cluster
    before = head_record(c)
    assert before is not None and before.cluster_id
    assert {n.ip for n in c.nodes} == {before.head_ip}  # one address for every node
    created = driver(CREATE, before.gcs_address)
    raylets = {n.name: node_pids(c, n.name, "raylet") for n in c.nodes[1:]}
    assert all(len(pids) == 1 for pids in raylets.values()), raylets
    on_worker = [n.name for n in c.nodes[1:]
                 if any(p in raylets[n.name] for p in psutil_parents(created["pid"]))]
    assert on_worker, "the actor runs on a worker"

    subprocess.run([os.path.join(SCRIPTS, "fault_kill_head_ray.sh"), "local", "head"],
                   env=dict(os.environ, ARGUS_LOCAL_DIR=c.state_dir), check=True,
                   capture_output=True, text=True, timeout=60)
    start = time.monotonic()  # the kill is the script's last act

    def back() -> bool:
        record = head_record(c)
        return (record is not None and record.generation != before.generation
                and count_workers(record.gcs_address) == WORKERS)

    def explain() -> str:
        return "\n".join([log_tail(c, "head", "head-watchdog")]
                         + [log_tail(c, n.name, "worker-watchdog") for n in c.nodes[1:]])

    poll(back, HEAL_S, f"every worker back in the cluster within {HEAL_S:g}s", explain)
    heal = time.monotonic() - start
    print(f"\none host, head GCS SIGKILLed: every worker back after {heal:.1f}s")
    after = head_record(c)
    assert after is not None and after.cluster_id == before.cluster_id  # the embedded store
    assert {n.name: node_pids(c, n.name, "raylet") for n in c.nodes[1:]} == raylets, \
        "the workers kept their raylets"
    states: list[dict] = []

    def answers() -> bool:
        try:
            states.append(driver(READ, after.gcs_address))
        except (AssertionError, subprocess.TimeoutExpired, ValueError):
            return False
        return True

    poll(answers, 60, "the actor answers through the restarted head", explain)
    now = states[-1]
    assert now["pid"] == created["pid"] and now["node"] == created["node"]
    assert now["n"] > created["n"]  # the same actor, its count gone on (never restarted)


def psutil_parents(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).parents()]
    except psutil.Error:
        return []
