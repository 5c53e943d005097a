"""Failure classification, table-driven with real-looking Ray messages and driver logs."""

from __future__ import annotations

import pytest

from service.domain.states import FailureKind, RayStatus
from service.jobspec.submission import driver_shell
from service.policy.failures import DriverEnd, classify, driver_end, summarize, supervisor_lost

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
