"""Failure classification, table-driven with real-looking Ray messages and driver logs."""

from __future__ import annotations

import pytest

from service.domain.states import FailureKind, RayStatus, TaskState
from service.jobspec.submission import driver_shell
from service.policy.dependencies import Condition, Dep, cancel_reason
from service.policy.failures import (
    DriverEnd,
    classify,
    driver_end,
    gave_up,
    public_summary,
    summarize,
    supervisor_lost,
)

K = FailureKind
SID = "mvp2-ppo-20251223-143201-7f3a--a01"
RAY_TASK_ERROR = """\
Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):
  File "/workspace/verl/verl/trainer/main_ppo.py", line 96, in run
    trainer.init_workers()
ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=1234, ip=10.0.0.2)
  File "/workspace/verl/verl/single_controller/ray/base.py", line 211, in _check_resource_available
    raise ValueError(
ValueError: Total available GPUs 2.0 is less than total desired GPUs 4
"""

CASES = [
    ("verl float form", "ValueError: Total available GPUs 2.0 is less than total desired GPUs 4",
     "", K.INSUFFICIENT_RESOURCES),
    ("verl integer form", "ValueError: Total available GPUs 0 is less than total desired GPUs 8",
     "", K.INSUFFICIENT_RESOURCES),
    ("inside RayTaskError", RAY_TASK_ERROR, "", K.INSUFFICIENT_RESOURCES),
    ("only in the log tail",
     "Job entrypoint command failed with exit code 1, last available logs: (worker lines)",
     "INFO starting\n" + RAY_TASK_ERROR, K.INSUFFICIENT_RESOURCES),
    ("missing train file",
     "Job entrypoint command failed with exit code 1",
     "FileNotFoundError: [Errno 2] No such file or directory: '/private/data/train.parquet'",
     K.USER_ERROR),
    ("hydra bad override",
     "Could not override 'trainer.bogus'.\nTo append to your config use +trainer.bogus=1\n"
     "Key 'bogus' is not in struct", "", K.USER_ERROR),
    ("verl 0.9 config object refuses its values (seen with real verl 0.9.1)",
     "Job entrypoint command failed with exit code 1",
     "Error executing job with overrides: ['algorithm.adv_estimator=gae', 'trainer.nnodes=1']\n"
     "Error in call to target 'verl.workers.config.actor.FSDPActorConfig':\n"
     "AssertionError(\"[actor] Please set at least one of 'actor.ppo_micro_batch_size' or "
     "'actor.ppo_micro_batch_size_per_gpu' if use_dynamic_bsz is not enabled.\")\n"
     "full_key: actor_rollout_ref.actor\n\n"
     "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n",
     K.USER_ERROR),
    ("hydra hides the traceback of an app error",
     "Job entrypoint command failed with exit code 1",
     "Error executing job with overrides: ['trainer.nnodes=1']\n"
     "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n",
     K.RUNTIME_ERROR),
    ("omegaconf key", "omegaconf.errors.ConfigAttributeError: Key 'foo' is not in struct",
     "", K.USER_ERROR),
    ("trainer module missing", "/usr/bin/python3: No module named verl.trainer.main_ppo", "",
     K.USER_ERROR),
    ("module not found error",
     "ModuleNotFoundError: No module named 'verl'", "", K.USER_ERROR),
    ("runtime env setup",
     "Job failed due to an application error: RuntimeEnvSetupError: Failed to set up "
     "runtime environment.", "", K.USER_ERROR),
    ("bad model id",
     "OSError: org/nope is not a local folder and is not a valid model identifier listed "
     "on 'https://huggingface.co/models'", "", K.USER_ERROR),
    ("code exception",
     "Job entrypoint command failed with exit code 1",
     "Traceback (most recent call last):\n  File \"x.py\", line 3\n"
     "ZeroDivisionError: division by zero", K.RUNTIME_ERROR),
    ("cuda oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "", K.RUNTIME_ERROR),
    ("an earlier driver of the task held its lock: this one never started",
     "Job entrypoint command failed with exit code 75, last available logs:\n"
     "argus: not started: an earlier driver of this task still runs (it holds "
     "/private/users/a/locks/t.lock: w1 pid 7 since 2026-11-27T03:00:00Z)", "",
     K.CLUSTER_LOST),
    ("the busy line inside the entrypoint Ray's log starts with is not the line",
     "Job entrypoint command failed with exit code 1",
     f"Running entrypoint for job x: {driver_shell('python3 -m m', '/p/m', '/p/l.lock', SID)}\n"
     "KeyError: 'x'\n", K.RUNTIME_ERROR),
    ("killed, no text", "Job entrypoint command failed with exit code -9", "", K.UNKNOWN),
    ("nothing at all", "", None, K.UNKNOWN),
    ("near miss is not verl's check",
     "Total available GPUs is less than total desired GPUs", "", K.UNKNOWN),
]


@pytest.mark.parametrize(("message", "log_tail", "kind"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_classify(message: str, log_tail: str | None, kind: FailureKind) -> None:
    assert classify(RayStatus.FAILED, message, log_tail) is kind


def test_success_is_not_a_failure() -> None:
    with pytest.raises(ValueError, match="SUCCEEDED"):
        classify(RayStatus.SUCCEEDED, "", "")


def test_summary_picks_the_telling_line() -> None:
    assert summarize(K.INSUFFICIENT_RESOURCES, RAY_TASK_ERROR, None) == (
        "INSUFFICIENT_RESOURCES: Total available GPUs 2.0 is less than total desired GPUs 4")
    log = "Traceback (most recent call last):\n  File \"x\"\nKeyError: 'actor'\nbye\n"
    assert summarize(K.RUNTIME_ERROR, "exit code 1", log) == "RUNTIME_ERROR: KeyError: 'actor'"
    assert summarize(K.UNKNOWN, "line one\nexit code -9\n", None) == "UNKNOWN: exit code -9"
    assert summarize(K.UNKNOWN, "", None) == "UNKNOWN"
    assert len(summarize(K.UNKNOWN, "x" * 5000, None)) == 300


@pytest.mark.parametrize("status,message,lost", [
    (RayStatus.FAILED, "Unexpected error occurred: failed to get job supervisor.", True),
    (RayStatus.FAILED, "Job supervisor actor died: ActorDiedError", True),
    (RayStatus.FAILED, "Job entrypoint command failed with exit code 1", False),
    (RayStatus.FAILED, "Traceback ... Unexpected error occurred", False),  # not Ray's line
    (RayStatus.STOPPED, "Job supervisor actor died: stopped", False),
    (RayStatus.FAILED, None, False),
])
def test_supervisor_lost_is_ray_losing_the_supervisor(status, message, lost):
    assert supervisor_lost(status, message) is lost


@pytest.mark.parametrize("code,end", [
    (0, DriverEnd.SUCCEEDED), (1, DriverEnd.FAILED), (-9, DriverEnd.FAILED),
    (None, DriverEnd.GONE),
])
def test_driver_end_by_its_exit_marker(code, end):
    assert driver_end(code) is end


# -- what other users see of a summary ----------------------------------------------------

SECRET = "WANDB_API_KEY=wk-s3cret"
OOM = "RuntimeError: CUDA error: out of memory"
LOST = "Ray no longer knows job t-1--a02 (head restarted?)"
PUBLIC = [
    # (what writes it, the summary, what others see)
    ("no summary", None, None),
    ("the job's exception line", summarize(K.RUNTIME_ERROR, "exit code 1", OOM),
     "RUNTIME_ERROR"),
    ("the brief's example", "RUNTIME_ERROR: CUDA error: out of memory", "RUNTIME_ERROR"),
    ("a secret on the last line", summarize(K.UNKNOWN, f"exit code 1\n{SECRET}", None),
     "UNKNOWN"),
    ("verl's resource line", summarize(K.INSUFFICIENT_RESOURCES, RAY_TASK_ERROR, None),
     "INSUFFICIENT_RESOURCES"),
    ("a user error", summarize(K.USER_ERROR, "", f"FileNotFoundError: /data/{SECRET}"),
     "USER_ERROR"),
    ("kind alone", summarize(K.UNKNOWN, "", None), "UNKNOWN"),
    ("cut at 300", summarize(K.RUNTIME_ERROR, "", "ValueError: " + SECRET * 40),
     "RUNTIME_ERROR"),
    ("multi-line after the kind", f"UNKNOWN: line\n{SECRET}", "UNKNOWN"),
    ("time limit (engine)", summarize(K.TIME_LIMIT, *["ran past its max_runtime_s (3600 s): "
                                                      "stopped"] * 2),
     "TIME_LIMIT: ran past its max_runtime_s (3600 s): stopped"),
    ("time limit, fractional", "TIME_LIMIT: ran past its max_runtime_s (1.5 s): stopped",
     "TIME_LIMIT: ran past its max_runtime_s (1.5 s): stopped"),
    ("the time limit's words after another kind are the job's",
     "RUNTIME_ERROR: ran past its max_runtime_s (3600 s): stopped", "RUNTIME_ERROR"),
    ("time limit sentence with more after it",
     f"TIME_LIMIT: ran past its max_runtime_s (3600 s): stopped {SECRET}", "TIME_LIMIT"),
    ("preempted (engine)", "PREEMPTED: preempted for t-9", "PREEMPTED: preempted for t-9"),
    ("preempted quoting Ray", f"PREEMPTED: {SECRET}", "PREEMPTED"),
    ("Ray lost the job (engine)", summarize(K.CLUSTER_LOST, LOST, LOST),
     f"CLUSTER_LOST: {LOST}"),
    ("Ray lost the supervisor (engine)", summarize(
        K.CLUSTER_LOST, *["Ray lost the job's supervisor (Job supervisor actor died: "
                          f"{SECRET}) and the driver left no exit marker: the run is gone"] * 2),
     "CLUSTER_LOST: Ray lost the job's supervisor and the driver left no exit marker"),
    ("lock busy: the entrypoint's line", summarize(
        K.CLUSTER_LOST, "exit code 75", "argus: not started: an earlier driver of this task "
        "still runs (it holds /private/users/a/locks/t.lock)"), "CLUSTER_LOST"),
    ("gave up (engine)", gave_up(3, 3, summarize(K.CLUSTER_LOST, LOST, LOST)),
     f"gave up after 3 attempts (max_attempts=3); last failure CLUSTER_LOST: {LOST}"),
    ("gave up on the job's words", gave_up(2, 2, summarize(
        K.INSUFFICIENT_RESOURCES, RAY_TASK_ERROR + SECRET, None)),
     "gave up after 2 attempts (max_attempts=2); last failure INSUFFICIENT_RESOURCES"),
    ("gave up, the brief's example",
     "gave up after 4 attempts (max_attempts=4); last failure RUNTIME_ERROR: boom",
     "gave up after 4 attempts (max_attempts=4); last failure RUNTIME_ERROR"),
    ("gave up on something unknown", f"gave up after 4 attempts (max_attempts=4); "
     f"last failure {SECRET}", "gave up after 4 attempts (max_attempts=4)"),
    ("submission not built (applier)",
     f"UNKNOWN: cannot build the Ray submission: bad override {SECRET}",
     "UNKNOWN: cannot build the Ray submission"),
    ("submission refused (applier)", f"USER_ERROR: Ray rejected the submission: {SECRET}",
     "USER_ERROR: Ray rejected the submission"),
    ("canceled (API, store)", "canceled by request", "canceled by request"),
    ("canceled while on Ray (engine)", "canceled by request (Ray status STOPPED)",
     "canceled by request (Ray status STOPPED)"),
    ("the cancel came late (engine)", "finished before the cancel took effect",
     "finished before the cancel took effect"),
    ("the exit marker (engine)", "the driver exited 0 (its exit marker); Ray lost the final "
     f"status: Unexpected error occurred: {SECRET}",
     "the driver exited 0 (its exit marker); Ray lost the final status"),
    ("dependency (dependency tick)", cancel_reason(Dep("t-1", Condition.OK, TaskState.FAILED)),
     "dependency never satisfied: t-1 ended FAILED (after ok)"),
    ("references (dependency tick)", "cannot resolve the stage's references: stage a: "
     "latest_checkpointed_iteration.txt is not a step",
     "cannot resolve the stage's references: stage a: latest_checkpointed_iteration.txt is "
     "not a step"),
    ("a form nobody writes", SECRET, None),
    ("a kind's name inside a word", f"RUNTIME_ERRORS: {SECRET}", None),
    ("Argus's words with more after them", f"canceled by request {SECRET}", None),
]


@pytest.mark.parametrize(("summary", "public"), [c[1:] for c in PUBLIC],
                         ids=[c[0] for c in PUBLIC])
def test_public_summary_keeps_argus_words_and_drops_the_jobs(summary, public) -> None:
    assert public_summary(summary) == public
    if public is not None:
        assert "s3cret" not in public and "out of memory" not in public
