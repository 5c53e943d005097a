"""The Ray submit request for one attempt of a task: argv, entrypoint, runtime_env.

The argv is ``python3 -m <module> <Argus params> <operator default overrides> <user
overrides>`` (the workload's facts come from ``service.domain.workloads``); each element is one
token, and ``build_submit_request`` joins them with ``shlex.join`` so no value can break
out into the shell Ray runs the entrypoint with. A parameter whose value is None (an
optional JobSpec field left out) is omitted, so verl keeps its own default rather than
receiving the string "None".

The shell then writes the driver's exit code to the attempt's exit marker
(``service.domain.layout.EXIT_MARKER``) and exits with it: Ray sees the same code, and the
scheduler has the driver's own word when a head failover lost Ray's final status.
"""

from __future__ import annotations

import posixpath
import shlex

from service.cluster.boundary import SubmitRequest
from service.config import Settings, thaw
from service.domain.ids import submission_id
from service.domain.layout import EXIT_MARKER, attempt_dir, checkpoint_dir
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


def with_exit_marker(command: str, marker_path: str) -> str:
    """``command`` (already quoted) followed by writing its exit code to ``marker_path``
    and exiting with it."""
    return f'{command}{_MARKER_SEP} echo "$code" > {shlex.quote(marker_path)}; exit "$code"'


def driver_argv(entrypoint: str) -> list[str]:
    """The driver's argv in an entrypoint built here (the exit marker's shell left out)."""
    return shlex.split(entrypoint.partition(_MARKER_SEP)[0])


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


def build_submit_request(
    spec: JobSpec, *, task_id: str, attempt_no: int, user: str | None, settings: Settings
) -> SubmitRequest:
    """Everything Ray needs to start attempt ``attempt_no`` of ``task_id``."""
    needs = driver(settings.entrypoint_resources, settings.entrypoint_num_cpus)
    sid = submission_id(task_id, attempt_no)
    command = shlex.join(build_entrypoint(spec, task_id, attempt_no, settings, user))
    marker = posixpath.join(attempt_dir(settings.shared_root, user, sid), EXIT_MARKER)
    return SubmitRequest(
        submission_id=sid,
        entrypoint=with_exit_marker(command, marker),
        runtime_env=_runtime_env(spec, settings),
        entrypoint_num_cpus=needs.num_cpus,
        entrypoint_resources=dict(needs.resources),
        metadata={
            "argus_task_id": task_id,
            "argus_attempt": str(attempt_no),
            "argus_user": user or "",
        },
    )
