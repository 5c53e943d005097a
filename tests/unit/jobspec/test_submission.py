"""The submit request: exact argv per workload, default overrides, runtime_env, resources."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from service.config import WORKLOADS, Settings, thaw
from service.config_load import settings_from_mapping
from service.domain.layout import LOCK_BUSY_EXIT, LOCK_BUSY_LINE, task_lock
from service.domain.workloads import WORKLOADS as TABLE
from service.domain.workloads import driver, owned_keys
from service.engine.artifacts import Artifacts
from service.jobspec.model import JobSpec
from service.jobspec.submission import (
    build_entrypoint,
    build_submit_request,
    driver_argv,
    driver_shell,
)

TASK = "mvp2-ppo-20251223-143201-7f3a"
CKPT = f"/private/checkpoints/{TASK}"
RUN_DIR = f"/private/jobs/{TASK}--a01"
TQ = "+transfer_queue.backend.SimpleStorage.required_node_resource=worker_node"
SETTINGS = Settings()

SPEC = JobSpec(
    workload="ppo",
    code_path="/private/code/verl",
    model_id="Qwen/Qwen2.5-0.5B-Instruct",
    train_file="/private/data/train.parquet",
    val_file="/private/data/test.parquet",
    nnodes=2,
    n_gpus_per_node=4,
    total_epochs=3,
    total_training_steps=50,
    save_freq=10,
    test_freq=5,
    overrides=("actor_rollout_ref.rollout.name=vllm", "trainer.val_before_train=False"),
)


def _spec(**changes: object) -> JobSpec:
    return JobSpec.from_dict({**SPEC.to_dict(), **changes})


def test_ppo_argv_exactly() -> None:
    assert build_entrypoint(SPEC, TASK, 1, SETTINGS) == [
        "python3", "-m", "verl.trainer.main_ppo",
        "algorithm.adv_estimator=gae",
        "data.train_files=/private/data/train.parquet",
        "data.val_files=/private/data/test.parquet",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "critic.model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=4",
        "trainer.total_epochs=3",
        "trainer.total_training_steps=50",
        "trainer.save_freq=10",
        "trainer.test_freq=5",
        f"trainer.default_local_dir={CKPT}",
        "trainer.resume_mode=auto",
        "trainer.project_name=argus",
        f"trainer.experiment_name={TASK}",
        "trainer.logger=[console]",
        f"hydra.run.dir={RUN_DIR}",
        f"hydra.sweep.dir={RUN_DIR}",
        TQ,
        "actor_rollout_ref.rollout.name=vllm",
        "trainer.val_before_train=False",
    ]


def test_grpo_argv_exactly() -> None:
    spec = _spec(workload="grpo", total_training_steps=None, save_freq=None, test_freq=None,
                 overrides=[])
    assert build_entrypoint(spec, TASK, 1, SETTINGS) == [
        "python3", "-m", "verl.trainer.main_ppo",
        "algorithm.adv_estimator=grpo",
        "data.train_files=/private/data/train.parquet",
        "data.val_files=/private/data/test.parquet",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=4",
        "trainer.total_epochs=3",
        f"trainer.default_local_dir={CKPT}",
        "trainer.resume_mode=auto",
        "trainer.project_name=argus",
        f"trainer.experiment_name={TASK}",
        "trainer.logger=[console]",
        f"hydra.run.dir={RUN_DIR}",
        f"hydra.sweep.dir={RUN_DIR}",
        TQ,
    ]


def test_sft_argv_exactly() -> None:
    spec = _spec(workload="sft", trainer_device="cpu", model_id="/private/models/qwen",
                 overrides=["data.micro_batch_size_per_gpu=2"])
    assert build_entrypoint(spec, TASK, 1, SETTINGS) == [
        "python3", "-m", "verl.trainer.sft_trainer_ray",
        "data.train_files=/private/data/train.parquet",
        "data.val_files=/private/data/test.parquet",
        "model.path=/private/models/qwen",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=4",
        "trainer.device=cpu",
        "trainer.total_epochs=3",
        "trainer.total_training_steps=50",
        "trainer.save_freq=10",
        "trainer.test_freq=5",
        f"trainer.default_local_dir={CKPT}",
        "trainer.resume_mode=auto",
        "trainer.project_name=argus",
        f"trainer.experiment_name={TASK}",
        "trainer.logger=[console]",
        f"hydra.run.dir={RUN_DIR}",
        f"hydra.sweep.dir={RUN_DIR}",
        "data.micro_batch_size_per_gpu=2",
    ]


def test_sft_omits_null_optional_fields() -> None:
    spec = _spec(workload="sft", val_file=None, trainer_device=None, total_training_steps=None,
                 save_freq=None, test_freq=None, overrides=[])
    argv = build_entrypoint(spec, TASK, 1, SETTINGS)
    assert argv[3:] == [
        "data.train_files=/private/data/train.parquet",
        "model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=4",
        "trainer.total_epochs=3",
        f"trainer.default_local_dir={CKPT}",
        "trainer.resume_mode=auto",
        "trainer.project_name=argus",
        f"trainer.experiment_name={TASK}",
        "trainer.logger=[console]",
        f"hydra.run.dir={RUN_DIR}",
        f"hydra.sweep.dir={RUN_DIR}",
    ]
    assert not any("None" in token for token in argv)


def test_default_overrides_come_from_settings_before_user_overrides() -> None:
    settings = settings_from_mapping(
        {"ray": {"shared_root": "/data/argus"},
         "v2": {"verl": {"default_overrides": {"ppo": ["+x.y=1", "a.b=c d"],
                                                "sft": ["trainer.seed=7"]}}}}
    )
    argv = build_entrypoint(SPEC, TASK, 1, settings)
    assert argv[-4:] == ["+x.y=1", "a.b=c d", *SPEC.overrides]
    assert TQ not in argv  # the operator replaced the ppo defaults
    assert f"trainer.default_local_dir=/data/argus/checkpoints/{TASK}" in argv
    sft = build_entrypoint(_spec(workload="sft", overrides=[]), TASK, 1, settings)
    assert sft[-1] == "trainer.seed=7"
    grpo = build_entrypoint(_spec(workload="grpo", overrides=[]), TASK, 1, settings)
    assert grpo[-1] == TQ  # grpo not configured: built-in default stays


def test_every_config_workload_has_an_entrypoint() -> None:
    assert set(TABLE) == set(WORKLOADS)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_owned_keys_are_exactly_the_keys_argus_sets(workload: str) -> None:
    spec = _spec(workload=workload, overrides=[],
                 trainer_device="cuda" if workload == "sft" else None)
    argv = build_entrypoint(spec, TASK, 1, Settings(default_overrides={}))
    assert [token.split("=", 1)[0] for token in argv[3:]] == list(owned_keys(workload))


def test_owned_keys_name_the_jobspec_field_behind_each_key() -> None:
    keys = owned_keys("ppo")
    assert keys["trainer.nnodes"] == "nnodes"
    assert keys["critic.model.path"] == "model_id"
    assert keys["trainer.experiment_name"] is None
    assert "critic.model.path" not in owned_keys("grpo")
    assert owned_keys("sft")["trainer.device"] == "trainer_device"
    jobspec_fields = set(JobSpec.__dataclass_fields__)
    for workload in WORKLOADS:
        assert {f for f in owned_keys(workload).values() if f} <= jobspec_fields


# -- submit request ----------------------------------------------------------------------


def test_submit_request_fields() -> None:
    req = build_submit_request(SPEC, task_id=TASK, attempt_no=3, user="alice",
                               settings=SETTINGS)
    argv = build_entrypoint(SPEC, TASK, 3, SETTINGS, "alice")
    assert req.submission_id == f"{TASK}--a03"
    marker = f"/private/users/alice/jobs/{TASK}--a03/exit_code"
    lock = f"/private/locks/{TASK}.lock"  # the task's id names no user: the legacy tree
    assert req.entrypoint == driver_shell(shlex.join(argv), marker, lock, f"{TASK}--a03")
    assert driver_argv(req.entrypoint) == argv
    assert req.runtime_env == {"env_vars": {"PYTHONPATH": "/private/code/verl:${PYTHONPATH}"}}
    assert req.entrypoint_num_cpus == 1.0
    assert req.entrypoint_resources == {"worker_node": 1.0}
    assert req.metadata == {"argus_task_id": TASK, "argus_attempt": "3", "argus_user": "alice"}
    assert all(isinstance(v, str) for v in req.metadata.values())


def test_labels_go_into_the_ray_job_s_metadata() -> None:
    spec = replace(SPEC, labels={"team": "nlp", "argus.dev/run": "3"})
    req = build_submit_request(spec, task_id=TASK, attempt_no=1, user="alice",
                               settings=SETTINGS)
    assert req.metadata == {"argus_task_id": TASK, "argus_attempt": "1", "argus_user": "alice",
                            "argus_label.team": "nlp", "argus_label.argus.dev/run": "3"}


def test_submit_request_without_user_has_an_empty_user() -> None:
    req = build_submit_request(SPEC, task_id=TASK, attempt_no=1, user=None, settings=SETTINGS)
    assert req.metadata["argus_user"] == ""


@pytest.mark.parametrize(("node", "expected"), [
    ("/opt/site", "/private/code/verl:/opt/site"),
    (None, "/private/code/verl:"),
])
def test_ray_keeps_the_nodes_pythonpath_behind_the_code_path(
    node: str | None, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found on a GPU host whose Ray and verl came from PYTHONPATH: a job's PYTHONPATH of
    only ``code_path`` hid them, and every worker died on ``import ray``. Ray sets a
    worker's env_vars through ``update_envs``, which expands ``${PYTHONPATH}``."""
    from ray._private.utils import update_envs

    req = build_submit_request(SPEC, task_id=TASK, attempt_no=1, user=None, settings=SETTINGS)
    if node is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", node)
    update_envs(req.runtime_env["env_vars"])
    assert os.environ["PYTHONPATH"] == expected


def test_runtime_env_keeps_config_and_prepends_code_path() -> None:
    settings = settings_from_mapping({"ray": {
        "entrypoint_num_cpus": 2,
        "runtime_env": {"env_vars": {"PYTHONPATH": "/opt/extra", "HF_HOME": "/private/hf"},
                        "working_dir": None, "pip": ["x==1"]},
    }})
    before = thaw(settings.runtime_env)
    req = build_submit_request(SPEC, task_id=TASK, attempt_no=1, user=None, settings=settings)
    assert req.runtime_env == {
        "env_vars": {"PYTHONPATH": "/private/code/verl:/opt/extra:${PYTHONPATH}",
                    "HF_HOME": "/private/hf"},
        "working_dir": None,
        "pip": ["x==1"],
    }
    assert req.entrypoint_num_cpus == 2.0
    assert thaw(settings.runtime_env) == before  # the frozen settings are untouched


def test_runtime_env_with_bad_env_vars_is_a_clear_error() -> None:
    settings = settings_from_mapping({"ray": {"runtime_env": {"env_vars": ["A=1"]}}})
    with pytest.raises(ValueError, match="env_vars must be a mapping"):
        build_submit_request(SPEC, task_id=TASK, attempt_no=1, user=None, settings=settings)


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ({}, {"worker_node": 1.0}),
        ({"worker_node": 0.5}, {"worker_node": 1.0}),
        ({"worker_node": 2}, {"worker_node": 2.0}),
        ({"memory_gb": 4}, {"memory_gb": 4.0, "worker_node": 1.0}),
    ],
)
def test_driver_always_asks_for_a_worker_node_slot(
    configured: dict[str, float], expected: dict[str, float]
) -> None:
    settings = settings_from_mapping({"ray": {"entrypoint_resources": configured}})
    req = build_submit_request(SPEC, task_id=TASK, attempt_no=1, user=None, settings=settings)
    assert req.entrypoint_resources == expected
    # the scheduler admits with the same floor it sends
    needs = driver(settings.entrypoint_resources, settings.entrypoint_num_cpus)
    assert (dict(needs.resources), needs.num_cpus) == (expected, req.entrypoint_num_cpus)


# -- per-user places ------------------------------------------------------------------------


def test_hydra_run_dir_and_checkpoints_in_the_owners_tree() -> None:
    task = "mvp2-alice-ppo-20251223-143201-7f3a"
    keys = dict(a.split("=", 1) for a in build_entrypoint(SPEC, task, 2, SETTINGS, "alice")
                if "=" in a)
    jobs = f"/private/users/alice/jobs/{task}--a02"
    assert keys["hydra.run.dir"] == keys["hydra.sweep.dir"] == jobs
    assert keys["trainer.default_local_dir"] == f"/private/users/alice/checkpoints/{task}"


def test_a_task_from_before_users_keeps_its_checkpoint_dir() -> None:
    # Its earlier attempts checkpointed under <shared_root>/checkpoints: the next one
    # resumes from there; its new attempt's files go to the owner's tree.
    keys = dict(a.split("=", 1) for a in build_entrypoint(SPEC, TASK, 2, SETTINGS, "admin")
                if "=" in a)
    assert keys["trainer.default_local_dir"] == f"/private/checkpoints/{TASK}"
    assert keys["hydra.run.dir"] == f"/private/users/admin/jobs/{TASK}--a02"


def test_layout_refuses_what_is_not_a_name_or_an_id() -> None:
    from service.domain.layout import attempt_dir, checkpoint_dir

    with pytest.raises(ValueError, match="user name"):
        attempt_dir("/private", "../x", f"{TASK}--a01")
    with pytest.raises(ValueError, match="not a task id"):
        checkpoint_dir("/private", "alice", "../../etc")
    with pytest.raises(ValueError, match="not a task id"):
        checkpoint_dir("/private", None, "../../etc")


def test_the_task_lock_sits_beside_the_checkpoints_tree() -> None:
    task = "mvp2-alice-ppo-20251223-143201-7f3a"
    assert task_lock("/private", "alice", task) == f"/private/users/alice/locks/{task}.lock"
    assert task_lock("/private", None, TASK) == f"/private/locks/{TASK}.lock"
    with pytest.raises(ValueError, match="not a task id"):
        task_lock("/private", "alice", "../../etc")


SID = f"{TASK}--a01"
FAST = {"watch_s": 0.1, "grace_s": 0.5}  # the watcher's pace, shortened for the tests


def _shell(entrypoint: str, cwd: Path, **kwargs: object) -> subprocess.Popen[str]:
    """The entrypoint as Ray runs it: ``/bin/sh -c`` in a session of its own."""
    return subprocess.Popen(["/bin/sh", "-c", entrypoint], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, **kwargs)


def _driver(tmp_path: Path, lock: Path, argv: list[str], marker: str = "m",
            pace: dict[str, float] = FAST, **kwargs: object) -> subprocess.Popen[str]:
    entrypoint = driver_shell(shlex.join(argv), str(tmp_path / marker), str(lock), SID, **pace)
    return _shell(entrypoint, tmp_path, **kwargs)


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def task_lock_of(tmp_path: Path) -> tuple[Artifacts, str, str, Path]:
    artifacts = Artifacts(tmp_path / "shared")
    user, task = "alice", "mvp2-alice-ppo-20251223-143201-7f3a"
    return artifacts, user, task, artifacts.task_lock(task, user)


@pytest.mark.parametrize("code", [0, 3])
def test_the_exit_marker_keeps_the_drivers_exit_code(tmp_path: Path, code: int) -> None:
    marker = tmp_path / "it's a dir; touch x" / "exit_code"  # quoted like every path
    marker.parent.mkdir()
    lock = tmp_path / "it's; touch y" / "locks" / "t.lock"
    entrypoint = driver_shell(shlex.join(["sh", "-c", f"exit {code}"]), str(marker), str(lock),
                              SID, **FAST)
    proc = _shell(entrypoint, tmp_path)
    assert proc.wait(timeout=30) == code
    assert marker.read_text() == f"{code}\n"
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    assert lock.read_text().startswith(f"{SID} on ")  # who held it, for the next one's message
    assert proc.stderr.read() == ""
    _wait_for(lambda: _group_gone(proc.pid), "the watcher to leave with its driver")


def test_a_second_driver_of_a_task_does_not_start_while_an_orphan_runs(
    tmp_path: Path, task_lock_of: tuple[Artifacts, str, str, Path]
) -> None:
    """The compose head-fault flake, with real processes: Ray's supervisor lost, the
    driver's shell killed, the driver itself running on (PPID 1). Its inherited lock keeps
    the next attempt from starting, and the service sees it held, until the driver ends."""
    artifacts, user, task, lock = task_lock_of
    started = tmp_path / "started"
    first = _driver(tmp_path, lock, ["sh", "-c", f"touch {started}; exec sleep 60"], "m1")
    _wait_for(started.exists, "the first driver")
    first.kill()  # the shell only: the driver (its child) runs on, orphaned
    first.wait(timeout=10)
    assert artifacts.task_lock_held(task, user)
    assert artifacts.lock_holder(task, user).startswith(f"{SID} on ")
    ran = tmp_path / "ran"
    second = _driver(tmp_path, lock, ["touch", str(ran)], "m2")
    assert second.wait(timeout=30) == LOCK_BUSY_EXIT
    err = second.stderr.read()
    assert LOCK_BUSY_LINE in err and f"{SID} on " in err and f"pid {first.pid} since" in err
    assert not ran.exists() and (tmp_path / "m2").read_text() == f"{LOCK_BUSY_EXIT}\n"
    os.killpg(first.pid, signal.SIGKILL)  # the orphan ends
    _wait_for(lambda: not artifacts.task_lock_held(task, user), "the lock's release")
    third = _driver(tmp_path, lock, ["touch", str(ran)], "m3")
    assert third.wait(timeout=30) == 0 and ran.exists()
    assert not artifacts.task_lock_held(task, user)


@pytest.mark.parametrize("code", [0, 3])
def test_a_driver_that_ran_on_orphaned_leaves_its_exit_code(
    tmp_path: Path, task_lock_of: tuple[Artifacts, str, str, Path], code: int
) -> None:
    """Ray killed the shell it started (a direct child of the supervisor it lost); the
    driver and the subshell that waits for it run on, so the driver's end still leaves
    its word: the service can say SUCCEEDED on the first attempt."""
    artifacts, user, task, lock = task_lock_of
    started, go = tmp_path / "started", tmp_path / "go"
    script = f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; exit {code}"
    first = _driver(tmp_path, lock, ["sh", "-c", script])
    _wait_for(started.exists, "the driver")
    first.kill()
    first.wait(timeout=10)
    assert artifacts.task_lock_held(task, user) and not (tmp_path / "m").exists()
    go.touch()  # the orphaned driver ends on its own
    _wait_for(lambda: not artifacts.task_lock_held(task, user), "the driver's end")
    assert (tmp_path / "m").read_text() == f"{code}\n"


@pytest.mark.parametrize("ignores_term", [False, True])
def test_a_stop_request_reaches_an_orphaned_driver_through_its_watcher(
    tmp_path: Path, task_lock_of: tuple[Artifacts, str, str, Path], ignores_term: bool
) -> None:
    """What Ray can no longer stop (a cancel, a preemption, a time limit of an orphan),
    the watcher does: SIGTERM to the driver's group, SIGKILL after the grace."""
    artifacts, user, task, lock = task_lock_of
    started = tmp_path / "started"
    trap = "trap '' TERM; " if ignores_term else ""
    first = _driver(tmp_path, lock, ["sh", "-c", f"{trap}touch {started}; sleep 60"])
    _wait_for(started.exists, "the driver")
    first.kill()  # orphaned, as above
    first.wait(timeout=10)
    assert artifacts.task_lock_held(task, user)
    artifacts.request_driver_stop(task, user, "canceled")
    _wait_for(lambda: not artifacts.task_lock_held(task, user), "the driver to be stopped")
    _wait_for(lambda: _group_gone(first.pid), "the group, its watcher too, to be gone")


def test_rays_own_stop_ends_the_watcher_with_the_driver(
    tmp_path: Path, task_lock_of: tuple[Artifacts, str, str, Path]
) -> None:
    """Ray stops a job with SIGTERM to every process of its tree and waits for all of them
    before it says STOPPED (``RAY_JOB_STOP_WAIT_TIME_S``, then SIGKILL): a watcher that
    ignored SIGTERM would make every stop wait that long."""
    artifacts, user, task, lock = task_lock_of
    started = tmp_path / "started"
    # the shipped pace: a watcher that ignored SIGTERM would be there for seconds
    proc = _driver(tmp_path, lock, ["sh", "-c", f"touch {started}; exec sleep 60"], pace={})
    _wait_for(started.exists, "the driver")
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=2)  # reaped: a zombie would still count as in the group
    _wait_for(lambda: _group_gone(proc.pid), "every process of the job to end", timeout=2)
    assert not artifacts.task_lock_held(task, user)


def test_a_stale_stop_request_does_not_stop_the_next_driver(
    tmp_path: Path, task_lock_of: tuple[Artifacts, str, str, Path]
) -> None:
    artifacts, user, task, lock = task_lock_of
    lock.parent.mkdir(parents=True)
    artifacts.request_driver_stop(task, user, "canceled")  # left from an earlier attempt
    proc = _driver(tmp_path, lock, ["sh", "-c", "sleep 1; echo done"])
    assert proc.wait(timeout=30) == 0 and proc.stdout.read() == "done\n"
    assert not (lock.parent / f"{lock.name}.stop").exists()


def test_a_node_that_cannot_lock_still_runs_the_driver(tmp_path: Path) -> None:
    """No ``flock`` on the node (or storage without locks): a warning, not a refusal."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "mkdir", "tail", "touch", "uname", "date"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    ran, marker = tmp_path / "ran", tmp_path / "m"
    proc = _driver(tmp_path, tmp_path / "locks" / "t.lock", ["touch", str(ran)],
                   env={"PATH": str(bin_dir)})
    assert proc.wait(timeout=30) == 0 and ran.exists() and marker.read_text() == "0\n"
    assert "argus: warning: no task lock" in proc.stderr.read()


def test_the_watcher_pace_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0"):
        driver_shell("true", "/m", "/l", SID, watch_s=0)
    with pytest.raises(ValueError, match="not an Argus submission id"):
        driver_shell("true", "/m", "/l", "x; rm -rf /")
