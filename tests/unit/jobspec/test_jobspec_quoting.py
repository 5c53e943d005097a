"""No JobSpec value can inject a shell command into the Ray entrypoint.

Ray runs a job's entrypoint string with ``/bin/sh -c``. For every string that reaches
the command line, each test checks two things: ``shlex.split`` gives back exactly the argv
Argus built, and running the entrypoint through ``/bin/sh -c`` (with a small Python program
that prints its argv as JSON in place of ``python3``) prints that same argv and creates no
canary file, which an injected ``touch``/redirect would.

Two layers are tested: the entrypoint builder quotes whatever it is given (JobSpecs built
directly, bypassing validation), and validation lets shell metacharacters through only
where they are harmless (override values), rejecting them in paths and ids.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from service.config import Settings
from service.jobspec.model import JobSpec, JobSpecError
from service.jobspec.spec import parse_jobspec
from service.jobspec.submission import (
    NODE_PYTHONPATH,
    build_entrypoint,
    build_submit_request,
    driver_argv,
)

TASK = "mvp2-sft-20251223-143201-7f3a"
SETTINGS = Settings()
ECHO_ARGV = "import json, sys; json.dump(sys.argv[1:], sys.stdout)"
# {c} is the canary path; each payload would create it if it reached the shell unquoted.
PAYLOADS = [
    "; touch {c}",
    "$(touch {c})",
    "`touch {c}`",
    "' ; touch {c} ; '",
    '" ; touch {c} ; "',
    "x && touch {c}",
    "x || touch {c}",
    "x | touch {c}",
    "x > {c}",
    "x & touch {c}",
    "'\"'$(touch {c})'\"'",
    "\\'; touch {c}; \\'",
    "* ? [a-z]* ~ {{a,b}} # $HOME ${{HOME}} !! %s",
]
BASE = JobSpec(
    workload="sft",
    code_path="/private/code/verl",
    model_id="org/model",
    train_file="/private/data/train.parquet",
    val_file="/private/data/val.parquet",
    nnodes=1,
    n_gpus_per_node=1,
    trainer_device="cpu",
)


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    # A file for globs to match: an unquoted * or ? would expand to it and change the argv.
    (tmp_path / "decoy").write_text("")
    return tmp_path / "canary"


def _run_shell(entrypoint: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``entrypoint`` (the task lock's prologue line, if any, as it is) with the
    driver's ``python3`` replaced by the argv printer."""
    prologue, newline, driver = entrypoint.partition("\n")
    if not newline:
        prologue, driver = "", entrypoint
    subshell = driver.startswith("(")  # the driver line of an entrypoint built here
    driver = driver.removeprefix("(")
    assert driver.startswith("python3 ")
    driver = shlex.join([sys.executable, "-c", ECHO_ARGV]) + driver[len("python3"):]
    command = f"{prologue}\n({driver}" if subshell else driver
    return subprocess.run(
        ["/bin/sh", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=30,
        check=False,
    )


def _assert_argv_survives(argv: list[str], entrypoint: str, canary: Path) -> None:
    assert driver_argv(entrypoint) == argv and entrypoint != shlex.join(argv)  # + marker
    proc = _run_shell(entrypoint, canary.parent)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == argv[1:]
    assert not canary.exists()


def _assert_safe(spec: JobSpec, canary: Path) -> None:
    # the shared root in tmp: the entrypoint's lock prologue makes its locks dir there
    settings = dataclasses.replace(SETTINGS, shared_root=str(canary.parent / "shared"))
    req = build_submit_request(spec, task_id=TASK, attempt_no=1, user="u", settings=settings)
    _assert_argv_survives(build_entrypoint(spec, TASK, 1, settings, "u"), req.entrypoint,
                          canary)


def test_the_canary_catches_an_unquoted_entrypoint(canary: Path) -> None:
    """Control: the same harness does see an injection when nothing is quoted."""
    argv = build_entrypoint(
        JobSpec(**{**BASE.to_dict(), "overrides": (f"a.b=x; touch {canary}",)}), TASK, 1, SETTINGS
    )
    _run_shell(" ".join(argv), canary.parent)
    assert canary.exists()


@pytest.mark.parametrize(
    ("field", "key"),
    [("model_id", "model.path"), ("train_file", "data.train_files"),
     ("val_file", "data.val_files"), ("trainer_device", "trainer.device")],
)
@pytest.mark.parametrize("payload", PAYLOADS)
def test_builder_quotes_every_string_field(
    field: str, key: str, payload: str, canary: Path
) -> None:
    value = "/private/x" + payload.format(c=canary)
    spec = JobSpec(**{**BASE.to_dict(), "overrides": (), field: value})
    assert f"{key}={value}" in build_entrypoint(spec, TASK, 1, SETTINGS)
    _assert_safe(spec, canary)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_code_path_goes_to_pythonpath_not_the_command_line(payload: str, canary: Path) -> None:
    value = "/private/x" + payload.format(c=canary)
    spec = JobSpec(**{**BASE.to_dict(), "code_path": value})
    req = build_submit_request(spec, task_id=TASK, attempt_no=1, user=None, settings=SETTINGS)
    assert req.runtime_env["env_vars"]["PYTHONPATH"] == f"{value}:{NODE_PYTHONPATH}"
    assert value not in req.entrypoint
    _assert_safe(spec, canary)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_builder_quotes_the_task_id(payload: str, canary: Path) -> None:
    # Task ids are made by service.domain.ids; the attempt's id (and so its Hydra run dir) is
    # derived from the task id, and anything but a task id is refused before any argv
    # exists, so a task id never carries a metacharacter onto the command line.
    task_id = TASK + payload.format(c=canary)
    with pytest.raises(ValueError, match="not a task id"):
        build_entrypoint(BASE, task_id, 1, SETTINGS)
    with pytest.raises(ValueError, match="not a task id"):
        build_submit_request(BASE, task_id=task_id, attempt_no=1, user=None, settings=SETTINGS)
    assert not canary.exists()


# Braces outside ${...} would make a Hydra dict value, which the override policy refuses.
OVERRIDE_PAYLOADS = [p for p in PAYLOADS if "{{a,b}}" not in p]


@pytest.mark.parametrize("payload", OVERRIDE_PAYLOADS)
def test_validated_overrides_carry_metacharacters_safely(payload: str, canary: Path) -> None:
    # The canary by its relative name (the shell runs in its folder): an absolute path
    # outside the allowed roots is refused anywhere in an override value.
    value = payload.format(c=canary.name)
    doc = {**BASE.to_dict(), "overrides": [f"a.b={value}", f"+c.d[0]=x {value}"]}
    spec = parse_jobspec(yaml.safe_dump(doc), SETTINGS)
    assert spec.overrides == (f"a.b={value}", f"+c.d[0]=x {value}")
    _assert_safe(spec, canary)


def test_brace_payload_is_refused_as_a_dict_value() -> None:
    doc = {**BASE.to_dict(), "overrides": ["a.b=* ? [a-z]* ~ {a,b} # $HOME ${HOME}"]}
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(yaml.safe_dump(doc), SETTINGS)
    assert [(d["field"], d["message"]) for d in info.value.details] == [
        ("overrides[0]", "'a.b': dict values are not accepted; set each key with its own "
                         "dotted override (a.b.c=1), so each can be checked")]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_operator_default_overrides_are_quoted_too(payload: str, canary: Path) -> None:
    settings = Settings(default_overrides={"sft": (f"a.b={payload.format(c=canary)}",)})
    req = build_submit_request(BASE, task_id=TASK, attempt_no=1, user=None, settings=settings)
    _assert_argv_survives(build_entrypoint(BASE, TASK, 1, settings), req.entrypoint, canary)


@pytest.mark.parametrize("field", ["code_path", "model_id", "train_file", "val_file",
                                   "trainer_device", "workload"])
@pytest.mark.parametrize("payload", PAYLOADS)
def test_validation_refuses_metacharacters_in_paths_and_ids(field: str, payload: str) -> None:
    doc = {**BASE.to_dict(), "overrides": []}
    doc[field] = "/private/x" + payload.format(c="/tmp/canary")
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(yaml.safe_dump(doc), SETTINGS)
    assert [d["field"] for d in info.value.details] == [field]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_submission_id_never_reaches_the_command_line(payload: str, canary: Path) -> None:
    doc = {**BASE.to_dict(), "submission_id": payload.format(c=canary)}
    spec = parse_jobspec(yaml.safe_dump(doc), SETTINGS)
    req = build_submit_request(spec, task_id=TASK, attempt_no=1, user=None, settings=SETTINGS)
    assert str(canary) not in req.entrypoint
    _assert_safe(spec, canary)
