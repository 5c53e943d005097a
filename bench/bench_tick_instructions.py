"""The 10k-runnable scheduler tick counted in instructions, the same from run to run.

The trace bench's tick (``bench_trace.tick_10k``: 10k runnable tasks of three users, every
one past the starvation guard with a time limit, nothing fits) is judged in thread CPU
time, and on a shared 2-core VM that time doubles when another tenant runs on the core's
sibling hyperthread: the same plan took 8 ms and 15 ms a few seconds apart. To tell
whether a change made the tick cheaper, this bench runs it under valgrind's callgrind,
which counts the instructions executed whatever the host does: with 2 ticks after the
setup's and with 12, and prints the difference over 10 (one steady tick, SQLite and the
WAL checkpointer's thread included; ``_pace``'s loop off); and with the first tick alone
and with none, whose difference is the first tick (every examined task QUEUED ->
PENDING_RESOURCES, every row read anew: the floor counts it too). About 4 minutes a
policy. Needs valgrind (the Debian package ``valgrind``). The counts repeat from run to
run on one host, not across hosts (the same code's first tick counted 73.4 M on one and
78.5 M on the next): compare a change with the code before it on the same host.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_tick_instructions.py [--policies plan,fairshare]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

FEW, MANY = 2, 12  # ticks after the first: their difference is what one tick costs
NONE, FIRST = -1, 0  # the setup alone, and the first tick: their difference is the first


def _inner(policy: str, ticks: int) -> None:
    """The measured process: the setup, then ``ticks`` + 1 ticks of ``policy`` (-1: the
    setup alone)."""
    from bench import bench_trace

    bench_trace.PACE_LOOP = 0
    bench_trace.tick_10k(bench_trace.scheduler_settings(bench_trace.POLICY_BY_NAME[policy]),
                         ticks=ticks)


def _env() -> dict[str, str]:
    """The runs' environment: sets and dicts iterate alike each run, and bytecode is
    written (where PYTHONDONTWRITEBYTECODE is set, as in CI containers, every run compiled
    the modules the first tick imports, and the first tick counted 606 M instead of ~85 M)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _instructions(valgrind: str, policy: str, ticks: int) -> int:
    cmd = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
           __file__, "--inner", policy, str(ticks)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=_env())
    found = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policies", default="plan",
                   help="trace bench policies, comma-separated (default: the shipped plan)")
    p.add_argument("--inner", nargs=2, metavar=("POLICY", "TICKS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        _inner(args.inner[0], int(args.inner[1]))
        return 0
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("bench_tick_instructions: needs valgrind (Debian: apt-get install valgrind)",
              file=sys.stderr)
        return 2
    from bench.tracesim import POLICY_BY_NAME

    names = [n for n in args.policies.split(",") if n]
    unknown = [n for n in names if n not in POLICY_BY_NAME]
    if unknown:
        print(f"unknown policies {unknown}; known: {', '.join(POLICY_BY_NAME)}",
              file=sys.stderr)
        return 2
    from bench.hostinfo import host_line

    print(host_line())
    print(f"== instructions of one tick with 10k runnable (the trace bench's tick_10k) under "
          f"callgrind: the first, and one of ticks {FEW + 2}-{MANY + 1}")
    for name in names:
        # once outside callgrind first: bytecode compiled in a measured run would count
        warm = subprocess.run([sys.executable, __file__, "--inner", name, str(FIRST)],
                              capture_output=True, text=True, check=False, env=_env())
        if warm.returncode != 0:
            raise SystemExit(f"the setup failed (exit {warm.returncode}):\n{warm.stderr[-2000:]}")
        per_tick = (_instructions(valgrind, name, MANY)
                    - _instructions(valgrind, name, FEW)) / (MANY - FEW)
        first = _instructions(valgrind, name, FIRST) - _instructions(valgrind, name, NONE)
        print(f"  {name:10} first {first / 1e6:7.1f} M, then {per_tick / 1e6:7.1f} M "
              "instructions a tick", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
