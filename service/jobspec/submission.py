"""The Ray submit request for one attempt of a task: argv, entrypoint, runtime_env.

The argv is ``python3 -m <module> <Argus params> <operator default overrides> <user
overrides>`` (the workload's facts come from ``service.domain.workloads``); each element is one
token, and ``build_submit_request`` joins them with ``shlex.join`` so no value can break
out into the shell Ray runs the entrypoint with. A parameter whose value is None (an
optional JobSpec field left out) is omitted, so verl keeps its own default rather than
receiving the string "None".

The shell around the driver does three things:

* Before the driver starts, it takes the task's lock (``service.domain.layout.task_lock``,
  ``flock`` on shared storage) and keeps it open, so the driver inherits it and holds it
  until it exits, even when its shell is killed. Ray can lose a job's supervisor in a
  head failover while the driver runs on, orphaned (ray#65025); the lock is how the
  scheduler knows that driver still runs (``service.engine.attempt_end``), and how a
  later attempt of the task refuses to start beside it: it exits ``LOCK_BUSY_EXIT`` with
  a line that says so, and the driver never starts. Where the lock cannot be taken at all
  (no ``flock``, storage without locks) the driver runs anyway, with a warning.
* With the lock taken, it starts the driver's watcher: a shell loop in the driver's
  process group that ends when the lock is free, and stops the group (SIGTERM, then
  SIGKILL after ``STOP_GRACE_S``) when the service asks by creating ``<lock>.stop``. Ray
  kills only the direct children of a job's supervisor when it loses it, so the watcher
  outlives them with the driver: it is how a cancel, a preemption or a time limit
  reaches a driver Ray no longer stops. A stale ``.stop`` is removed when the lock is
  taken.
* After the driver, a subshell (the driver's parent, which outlives Ray's shell as the
  driver does) writes the driver's exit code to the attempt's exit marker
  (``service.domain.layout.EXIT_MARKER``) and exits with it: Ray sees the same code, and
  the scheduler has the driver's own word when a head failover lost Ray's final status,
  even for a driver that ran on, orphaned, to its end.
"""

from __future__ import annotations

import math
import posixpath
import shlex

from service.cluster.boundary import SubmitRequest
from service.config import Settings, thaw
from service.domain.ids import parse_submission_id, submission_id
from service.domain.layout import (
    EXIT_MARKER,
    LOCK_BUSY_EXIT,
    LOCK_BUSY_LINE,
    STOP_REQUEST_SUFFIX,
    attempt_dir,
    checkpoint_dir,
    task_lock,
)
from service.domain.workloads import PYTHON, WORKLOADS, Context, driver
from service.jobspec.model import JobSpec


def _render(value: str | int) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"cannot render {value!r} as a Hydra value")
    return str(value)


def build_entrypoint(spec: JobSpec, task_id: str, attempt_no: int, settings: Settings,
                     user: str | None = None) -> list[str]:
    """The verl command line for attempt ``attempt_no`` of ``user``'s ``spec`` as an argv
    list (Hydra's run dir and the checkpoints in the user's tree, ``service.domain.layout``)."""
    workload = WORKLOADS[spec.workload]
    sid = submission_id(task_id, attempt_no)
    ctx = Context(spec=spec, task_id=task_id,
                  checkpoint_dir=checkpoint_dir(settings.shared_root, user, task_id),
                  attempt_dir=attempt_dir(settings.shared_root, user, sid))
    argv = [PYTHON, "-m", workload.module]
    for param in workload.params:
        value = param.value(ctx)
        if value is not None:
            argv.append(f"{param.key}={_render(value)}")
    argv.extend(settings.default_overrides.get(spec.workload, ()))
    argv.extend(spec.overrides)
    return argv


_MARKER_SEP = "; code=$?;"


#: How often the driver's watcher looks for a stop request, and how long a driver it
#: asked to stop (SIGTERM) has before it is killed.
WATCH_S = 5
STOP_GRACE_S = 30


def _lock_prologue(lock_path: str, marker: str, sid: str, watch_s: float,
                   grace_s: float) -> str:
    """Take ``lock_path`` on fd 9 for the rest of the shell and its driver, and start the
    driver's watcher (one line; see the module's docstring).

    ``exec 9>>`` is tried in a subshell first: a failed redirection of ``exec`` would end
    the shell. ``flock -E`` gives a held lock its own code, apart from flock's errors. The
    watcher is in the driver's process group, so ``kill 0`` reaches exactly that group
    (and the watcher, which ignores SIGTERM only once it is the one stopping the group:
    Ray's own stop of the job ends it at once). It does not hold the lock (``9>&-``)."""
    lock, busy = shlex.quote(lock_path), LOCK_BUSY_EXIT
    free = f'flock -n -E {busy} "$argus_lock" true 2>/dev/null; [ $? != {busy} ]'
    watcher = (
        f'(while sleep {watch_s:g}; do if {free}; then exit 0; fi; '
        f'if [ -e "$argus_lock{STOP_REQUEST_SUFFIX}" ]; then '
        f'trap "" TERM HUP; kill -s TERM 0; argus_n=0; '
        f'while [ $argus_n -lt {max(1, math.ceil(grace_s / watch_s))} ] && ! {{ {free}; }}; do '
        f'sleep {watch_s:g}; argus_n=$((argus_n + 1)); done; kill -s KILL 0; fi; done) '
        f"</dev/null >/dev/null 2>&1 9>&- &"
    )
    steps = [
        f"argus_lock={lock}",
        'mkdir -p "$(dirname "$argus_lock")" 2>/dev/null',
        f'if (: >>"$argus_lock") 2>/dev/null; then exec 9>>"$argus_lock"; '
        f"flock -n -E {busy} 9; argus_rc=$?; else argus_rc=noopen; fi",
        f'if [ "$argus_rc" = {busy} ]; then '
        f'echo "{LOCK_BUSY_LINE} (it holds $argus_lock: $(tail -n 1 "$argus_lock"))" >&2; '
        f"echo {busy} > {marker}; exit {busy}; "
        f'elif [ "$argus_rc" = 0 ]; then rm -f "$argus_lock{STOP_REQUEST_SUFFIX}"; '
        f'echo "{sid} on $(uname -n) pid $$ since $(date -u +%FT%TZ)" >&9; {watcher} '
        f'else echo "argus: warning: no task lock ($argus_lock: $argus_rc): nothing keeps '
        f'a second driver of this task from running beside this one" >&2; fi',
    ]
    return "; ".join(steps)


def driver_shell(command: str, marker_path: str, lock_path: str, sid: str, *,
                 watch_s: float = WATCH_S, grace_s: float = STOP_GRACE_S) -> str:
    """``command`` (already quoted) run under the task's lock, then writing its exit code
    to ``marker_path`` and exiting with it. The lock's prologue is the first line, the
    driver's command the second, in a subshell: the process that writes the marker is the
    driver's parent, not the shell Ray started, and lives on with the driver when Ray kills
    that shell (with the other direct children of a job supervisor it lost)."""
    parse_submission_id(sid)  # only an id: it is written into the lock file by the shell
    if not (watch_s > 0 and grace_s > 0):
        raise ValueError("watch_s and grace_s must be > 0")
    marker = shlex.quote(marker_path)
    return (f"{_lock_prologue(lock_path, marker, sid, watch_s, grace_s)}\n"
            f'({command}{_MARKER_SEP} echo "$code" > {marker}; exit "$code")')


def driver_argv(entrypoint: str) -> list[str]:
    """The driver's argv in an entrypoint built here (the shell around it left out)."""
    driver_line = entrypoint.partition("\n")[2].removeprefix("(")
    return shlex.split(driver_line.partition(_MARKER_SEP)[0])


#: Ray's reference to the PYTHONPATH of the node that starts the process.
NODE_PYTHONPATH = "${PYTHONPATH}"


def _runtime_env(spec: JobSpec, settings: Settings) -> dict:
    runtime_env = thaw(settings.runtime_env)
    env_vars = runtime_env.setdefault("env_vars", {})
    if not isinstance(env_vars, dict):
        raise ValueError("ray.runtime_env.env_vars must be a mapping")
    configured = env_vars.get("PYTHONPATH")
    # Ray expands ${PYTHONPATH} to the node's own where it starts the driver and each
    # worker (as its working_dir plugin does), so packages a node finds through PYTHONPATH
    # stay importable. A node without one leaves an empty last entry: the process's cwd,
    # already first on the path of a `python -m` driver.
    parts = [spec.code_path, *([configured] if configured else []), NODE_PYTHONPATH]
    env_vars["PYTHONPATH"] = ":".join(parts)
    return runtime_env


LABEL_METADATA = "argus_label."  # a label's key in the Ray job's metadata: this + its key


def build_submit_request(
    spec: JobSpec, *, task_id: str, attempt_no: int, user: str | None, settings: Settings
) -> SubmitRequest:
    """Everything Ray needs to start attempt ``attempt_no`` of ``task_id``."""
    needs = driver(settings.entrypoint_resources, settings.entrypoint_num_cpus)
    sid = submission_id(task_id, attempt_no)
    command = shlex.join(build_entrypoint(spec, task_id, attempt_no, settings, user))
    marker = posixpath.join(attempt_dir(settings.shared_root, user, sid), EXIT_MARKER)
    lock = task_lock(settings.shared_root, user, task_id)
    return SubmitRequest(
        submission_id=sid,
        entrypoint=driver_shell(command, marker, lock, sid),
        runtime_env=_runtime_env(spec, settings),
        entrypoint_num_cpus=needs.num_cpus,
        entrypoint_resources=dict(needs.resources),
        metadata={
            "argus_task_id": task_id,
            "argus_attempt": str(attempt_no),
            "argus_user": user or "",
            # the JobSpec's labels, one key each (Ray's metadata is str -> str)
            **{f"{LABEL_METADATA}{key}": value for key, value in spec.labels.items()},
        },
    )
