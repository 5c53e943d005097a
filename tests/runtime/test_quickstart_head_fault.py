"""Runtime tier: the quick start end to end through a head fault. ``scripts/quickstart.sh``
brings up its cluster (ports mode, a PID namespace per node) and the real ``argus-api``;
``scripts/quickstart.sh head-fault`` runs a 60-step stand-in task, SIGKILLs the head's GCS
at step 5 with ``scripts/fault_kill_head_ray.sh local head`` and exits 0 only when the task
ends SUCCEEDED on attempt 1 with every step logged once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.quickstart import QuickStartRun, usable

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(900)]

if why := usable():
    pytest.skip(why, allow_module_level=True)


@pytest.fixture
def running_quickstart() -> Iterator[QuickStartRun]:
    qs = QuickStartRun()
    try:
        qs.up(timeout_s=420)
        yield qs
    finally:
        down = qs.down(timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr


def test_a_quickstart_run_survives_the_head_fault_script(running_quickstart):
    done = running_quickstart.script("head-fault", timeout_s=420)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "killed GCS on head" in out
    assert "SUCCEEDED on attempt 1, every step once" in out
    assert "CLUSTER_BACK" in out, "the task's events show the outage"
