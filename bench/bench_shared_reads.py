"""What touching users' trees safely costs: the service's reads and writes under the shared
root (``service.engine.artifacts.Artifacts``, through ``service.cluster.sharedfs``), per
call, in this process's CPU time.

* ``read_log``: an archived driver log of ``--log-kib`` (256) KiB, read whole (what
  ``GET /tasks/{id}/logs`` does for an ended attempt);
* ``read_exit_code``: the entrypoint's exit marker (the reconcile, for a lost supervisor);
* ``task_lock_held``: the task's lock, opened and tried (each lost or ended attempt);
* ``write_submission``: ``jobspec.yaml`` and ``submit.json`` of a new attempt (every
  submit; two fsyncs, so it is mostly the disk's);
* ``archive_log``: the driver log written when an attempt ends.

``--code DIR`` imports the service from another checkout, so two revisions run side by
side on one machine (``--code`` of a ``git worktree`` of the old one); the host line
and a calibration loop's time are printed with the figures, so a figure from another
host can be compared. No floor: the figure is compared with the revision before, which
must not cost more than 5 % more (issue: hostile files).

    .venv/bin/python bench/bench_shared_reads.py [--rounds 2000] [--code DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: bench.hostinfo

from bench.hostinfo import host_line

SID = "mvp2-alice-ppo-20261206-070000-1a2b--a01"
TASK = "mvp2-alice-ppo-20261206-070000-1a2b"


def per_call_us(fn: Callable[[], object], rounds: int) -> float:
    """Median CPU µs per call over 5 batches of ``rounds`` calls."""
    batches = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(rounds):
            fn()
        batches.append((time.process_time() - start) / rounds * 1e6)
    return statistics.median(batches)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--log-kib", type=int, default=256)
    p.add_argument("--code", help="a checkout whose service to import (default: this one)")
    args = p.parse_args()
    code = Path(args.code or Path(__file__).resolve().parents[1]).resolve()
    sys.path.insert(0, str(code))
    from service.engine.artifacts import Artifacts

    with tempfile.TemporaryDirectory() as tmp:
        art = Artifacts(tmp)
        log = ("step:1 - loss:0.5 " + "x" * 60 + "\n") * (args.log_kib * 1024 // 80)
        art.archive_log(SID, "alice", log)
        (Path(art.attempt_dir(SID, "alice")) / "exit_code").write_text("0\n")
        lock = Path(art.task_lock(TASK, "alice"))
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(f"{SID} on node-1 pid 7 since 2026-12-06T07:00:00Z\n")
        assert art.read_log(SID, "alice") == log and art.read_exit_code(SID, "alice") == 0
        held = os.open(lock, os.O_WRONLY)
        fcntl.flock(held, fcntl.LOCK_EX)
        assert art.task_lock_held(TASK, "alice")
        payload = {"submission_id": SID, "entrypoint": "python3 -m x", "argv": ["x"] * 20}
        rows = {
            "read_log": per_call_us(lambda: art.read_log(SID, "alice"), args.rounds // 10),
            "read_exit_code": per_call_us(lambda: art.read_exit_code(SID, "alice"),
                                          args.rounds),
            "task_lock_held": per_call_us(lambda: art.task_lock_held(TASK, "alice"),
                                          args.rounds),
            "write_submission": per_call_us(lambda: art.write_submission(
                SID, "alice", "workload: ppo\n", payload), args.rounds // 20),
            "archive_log": per_call_us(lambda: art.archive_log(SID, "alice", log),
                                       args.rounds // 20),
        }
        os.close(held)
    print(f"{host_line()}; code {code}")
    for name, us in rows.items():
        print(f"{name:18s} {us:9.1f} us/call (CPU)")


if __name__ == "__main__":
    main()
