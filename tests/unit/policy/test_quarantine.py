"""The quarantine's pure rules (issue 55): what is evidence, when it is enough, the
reason written, the plan of a re-queued task."""

from __future__ import annotations

import pytest

from service.domain.nodes import REASON_MAX, reason_problem
from service.domain.reasons import NodeFault, Reason, WaitKind
from service.domain.rows import AttemptNode
from service.domain.states import FailureKind
from service.policy.quarantine import (
    Evidence,
    QuarantineMemory,
    blamed,
    decide,
    hardware_line,
    is_evidence,
    reason,
    requeue_plan,
)

T0 = 1_766_500_000.0


@pytest.mark.parametrize("text, line", [
    ("x\nRuntimeError: CUDA error: an illegal memory access was encountered\ny",
     "RuntimeError: CUDA error: an illegal memory access was encountered"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1333",
     "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1333"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
     "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered",
     "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    ("RuntimeError: CUDA error: out of memory", None),
    ("RuntimeError: CUDA error: device-side assert triggered", None),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", None),
    ("ValueError: bad config", None),
    ("", None),
])
def test_a_hardware_line_is_found_and_self_made_cuda_errors_are_not(text, line) -> None:
    assert hardware_line([None, text]) == line


def test_the_last_hardware_line_is_kept_printable_and_short() -> None:
    text = "NCCL error: first\n" + "RuntimeError: CUDA error: \x1b[31m" + "x" * 400
    line = hardware_line([text])
    assert line is not None and line.startswith("RuntimeError: CUDA error:")
    assert line.isprintable() and len(line) <= 160 and line.endswith("...")


def test_only_runtime_and_unknown_failures_are_evidence() -> None:
    assert [k for k in FailureKind if is_evidence(k)] == [FailureKind.RUNTIME_ERROR,
                                                          FailureKind.UNKNOWN]


def test_the_gang_nodes_are_blamed_else_the_driver_node() -> None:
    driver = AttemptNode("cpu-1", "driver", 0.0, T0)
    gang = [AttemptNode("gpu-2", "gang", 4.0, T0), AttemptNode("gpu-1", "gang", 4.0, T0)]
    assert blamed([driver, *gang]) == ("gpu-1", "gpu-2")
    assert blamed([driver]) == ("cpu-1",)
    assert blamed([]) == ()


def _ev(task: str, at: float, n: int = 1) -> Evidence:
    return Evidence(task, n, at, "RuntimeError: CUDA error: uncorrectable ECC error")


def test_two_different_tasks_in_the_window_are_enough_one_task_twice_is_not() -> None:
    memory = QuarantineMemory(window_s=100.0)
    memory.add(["n1"], _ev("t-a", T0))
    memory.add(["n1"], _ev("t-a", T0 + 10, n=2))
    assert decide(memory, ["n1"], 2, T0 + 10) == []
    assert memory.seen_task("t-a") and not memory.seen_task("t-b")
    memory.add(["n1", "n2"], _ev("t-b", T0 + 20))
    ((node, why),) = decide(memory, ["n1", "n2"], 2, T0 + 20)
    assert node == "n1" and "2 tasks" in why and "t-a#2" in why and "t-b#1" in why
    # past the window the first task's evidence is forgotten
    assert decide(memory, ["n1"], 2, T0 + 115) == []
    assert not memory.seen_task("t-a") and memory.seen_task("t-b")
    assert decide(memory, ["n1"], 2, T0 + 200) == [] and memory.by_node == {}


def test_a_reason_fits_the_node_reason_rules_however_long_the_evidence() -> None:
    long_id = "mvp2-ppo-20251223-143201-" + "f" * 40
    evidence = [Evidence(f"{long_id}{i}", 1, T0, "RuntimeError: CUDA error: " + "y" * 150)
                for i in range(5)]
    text = reason(evidence, 3600.0)
    assert len(text) <= REASON_MAX and reason_problem(text, required=True) is None
    assert text.startswith("quarantine: 5 tasks failed here within 3600s")
    short = reason([_ev("t-a", T0), _ev("t-b", T0)], 3600.0)
    assert short == ("quarantine: 2 tasks failed here within 3600s (t-a#1, t-b#1): "
                     "RuntimeError: CUDA error: uncorrectable ECC error")


def test_the_requeue_plan_at_once_uncounted_or_delayed_and_counted() -> None:
    now = T0 + 50
    quick = requeue_plan(now, quarantined=True, delay_s=60, preemptions=2, waited_s=30)
    assert (quick.next_run_at, quick.runnable_since, quick.preemptions) == (now, now - 30, 3)
    later = requeue_plan(now, quarantined=False, delay_s=60, preemptions=2, waited_s=30)
    assert (later.next_run_at, later.runnable_since, later.preemptions) == (
        now + 60, now + 30, 2)
    with pytest.raises(ValueError):
        requeue_plan(now, quarantined=True, delay_s=60, preemptions=0, waited_s=-1)


def test_the_reasons_of_a_requeued_task_name_the_node() -> None:
    quarantined = Reason(WaitKind.RETRY_BACKOFF,
                         NodeFault(1, "RUNTIME_ERROR", "gpu-07", True, T0)).text
    assert quarantined.startswith("attempt 1 failed (RUNTIME_ERROR) on gpu-07, now quarantined")
    assert "not counted against max_attempts" in quarantined
    watched = Reason(WaitKind.RETRY_BACKOFF,
                     NodeFault(1, "UNKNOWN", "gpu-07", False, T0)).text
    assert "with a hardware error on gpu-07; attempt 2 not before" in watched
