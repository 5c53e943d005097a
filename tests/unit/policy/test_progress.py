"""Progress of an attempt from its driver log, and curves: pure, tested by table."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from service.domain.progress import Point, Progress
from service.policy.curves import default_keys, join, keeps, thin
from service.policy.progress import (
    ResumedLine,
    StepLine,
    TotalLine,
    advance,
    parse_line,
    split_complete,
    with_total,
)

# verl 0.9.1's SFT trainer on an H100: the step lines the README shows ("Real verl on a GPU
# host"), without the README's " ..." where it shortened them.
# The whole driver log of a real verl 0.9.1 SFT run through Argus on an H200 (4 steps,
# a validation, the final checkpoint's save lines), as scripts/gpu_smoke.sh collected it.
REAL = Path(__file__).parents[1] / "data" / "verl_sft_driver_h200.log"


@pytest.mark.parametrize(("line", "expected"), [
    ("step:1 - train/loss:6.2024 - train/grad_norm:2.951 - train/lr:0.001",
     StepLine(1, {"train/loss": 6.2024, "train/grad_norm": 2.951, "train/lr": 0.001})),
    ("step:4 - val/loss:5.5634", StepLine(4, {"val/loss": 5.5634})),
    ("step:7", StepLine(7, {})),
    ("(TaskRunner pid=4242) step:12 - critic/score/mean:0.25 - perf/throughput:1520",
     StepLine(12, {"critic/score/mean": 0.25, "perf/throughput": 1520.0})),
    ("\x1b[36m(TaskRunner pid=1)\x1b[0m step:3 - actor/lr:1e-06",
     StepLine(3, {"actor/lr": 1e-06})),
    ("Training Progress:  25%|██▌       | 1/4 [00:04<00:14]step:1 - train/loss:6.2",
     StepLine(1, {"train/loss": 6.2})),
    ("old bar\rstep:2 - train/loss:5.9", StepLine(2, {"train/loss": 5.9})),
    # what is not a finite number is not a point; the rest of the line still is
    ("step:5 - train/loss:nan - x:inf - name:abc - a b:1 - train/acc:0.5",
     StepLine(5, {"train/acc": 0.5})),
    ("step:6 - " + "k" * 200 + ":1 - ok:2", StepLine(6, {"ok": 2.0})),
    ("Total training steps: 1000", TotalLine(1000)),
    ("(TaskRunner pid=7) Total training steps: 32", TotalLine(32)),
    ("Total training steps: 0", None),
    # verl's FSDP engine (SFT's only visible total): the learning rate schedule's length
    ("\x1b[36m(TrainingWorker pid=2209)\x1b[0m Total steps: 4, num_warmup_steps: 0",
     TotalLine(4)),
    ("Total steps: 0, num_warmup_steps: 0", None),
    ("Total steps: 12", None),  # not the engine's line
    ("Load from checkpoint folder: /ckpt/mvp2-ppo/global_step_120", ResumedLine(120)),
    ("[standin-verl main_ppo] resumed from checkpoint global_step_3", ResumedLine(3)),
    ("[standin-verl main_ppo] saved checkpoint global_step_3", None),
    ("Resuming from /ckpt/mvp2-ppo/global_step_120", ResumedLine(120)),
    # verl 0.9.1's SFT trainer: a resume, and what it prints after every save (a real run
    # on a GPU once showed a fresh attempt as "resumed from step 4" after its final save)
    ("Found latest checkpoint: /c/t/global_step_8 (step 8)", ResumedLine(8)),
    ("Successfully loaded dataloader state from /c/t/global_step_8/data_0.pt",
     ResumedLine(8)),
    # any resume mode: the FSDP checkpoint manager's INFO line (shown, as its save lines are)
    ("(TrainingWorker pid=9) INFO:2026-11-27 00:04:54,320:[Rank 0] Loaded model from "
     "/c/t/global_step_6/model_world_size_1_rank_0.pt", ResumedLine(6)),
    ("Saving checkpoint to: /c/t/global_step_4", None),
    ("Saved dataloader state to: /c/t/global_step_4/data_0.pt", None),
    ("Updated checkpoint tracker: /c/t/latest_checkpointed_iteration.txt", None),
    ("(TrainingWorker pid=2209) INFO:2026-11-27 00:04:54,320:[Rank 0] Saved model to "
     "/c/t/global_step_4/model_world_size_1_rank_0.pt", None),
    ("Uploading /c/t/global_step_4 to hdfs", None),
    ("[standin-verl main_ppo] no checkpoint to resume from", None),
    ("global_step:5 - loss:1", None),  # not verl's step key
    ("train/step:5 - loss:1", None),
    ("mystep:5 - loss:1", None),
    ("step:5- loss:1", None),
    ("", None),
])
def test_parse_line(line: str, expected: object) -> None:
    assert parse_line(line) == expected


def test_the_real_verl_sft_output_parses() -> None:
    events = [parse_line(line) for line in REAL.read_text().splitlines()]
    steps = [e for e in events if isinstance(e, StepLine)]
    assert [e.step for e in steps] == [1, 2, 3, 4, 4]
    assert [round(e.metrics["train/loss"], 4) for e in steps[:4]] == [
        6.2024, 5.9506, 5.8013, 5.6633]
    assert steps[4].metrics == {"val/loss": pytest.approx(5.5634, abs=1e-4)}
    assert steps[0].metrics["train/global_tokens"] == 483
    # a fresh attempt that saved its last step has resumed from nothing
    assert not [e for e in events if isinstance(e, ResumedLine)]
    # the total from the FSDP engine's line (printed once per log monitor of the node)
    assert {e.total for e in events if isinstance(e, TotalLine)} == {4}


@pytest.mark.parametrize(("text", "lines", "used"), [
    ("", [], 0),
    ("partial", [], 0),
    ("a\nb\n", ["a", "b"], 4),
    ("a\nb\npart", ["a", "b"], 4),
    ("a\r\nb\n", ["a", "b"], 5),
])
def test_split_complete_leaves_a_partial_last_line(text: str, lines: list[str],
                                                    used: int) -> None:
    assert split_complete(text) == (lines, used)


T = 1000.0


@pytest.mark.parametrize(("reads", "expected"), [
    # one read: the step is known, the rate is not (its steps took an unknown time)
    ([(T, [StepLine(1, {}), StepLine(2, {})])],
     Progress(step=2, first_step=2, first_at=T, last_at=T)),
    # two reads 10 s apart, 5 steps apart: 0.5 step/s
    ([(T, [StepLine(2, {})]), (T + 10, [StepLine(7, {})])],
     Progress(step=7, first_step=2, first_at=T, last_at=T + 10)),
    # the total from the log; a validation line repeats its step without moving back
    ([(T, [TotalLine(20), StepLine(1, {})]), (T + 4, [StepLine(3, {}), StepLine(3, {})])],
     Progress(step=3, total=20, first_step=1, first_at=T, last_at=T + 4)),
    # a resumed attempt: starts at its checkpoint's step, counts only its own steps
    ([(T, [ResumedLine(100)]), (T + 1, [StepLine(101, {})]), (T + 11, [StepLine(111, {})])],
     Progress(step=111, resumed_from=100, first_step=101, first_at=T + 1, last_at=T + 11)),
    # nothing printed yet
    ([(T, [])], Progress()),
])
def test_advance(reads: list[tuple[float, list]], expected: Progress) -> None:
    progress = Progress()
    for now, events in reads:
        progress = advance(progress, events, now)
    assert progress == expected


@pytest.mark.parametrize(("progress", "rate", "fraction", "eta_at"), [
    (Progress(), None, None, None),
    (Progress(step=7, first_step=2, first_at=T, last_at=T + 10), 0.5, None, None),
    (Progress(step=7, total=17, first_step=2, first_at=T, last_at=T + 10), 0.5, 7 / 17,
     T + 10 + 20),
    (Progress(step=5, total=5, first_step=1, first_at=T, last_at=T + 4), 1.0, 1.0, T + 4),
    # resumed, no step of its own yet: shows where it resumed, no rate
    (Progress(step=100, total=200, resumed_from=100), None, 0.5, None),
    # past the total (the log's total was a guess): capped at 1, done
    (Progress(step=12, total=10, first_step=2, first_at=T, last_at=T + 10), 1.0, 1.0,
     T + 10),
])
def test_rate_fraction_eta(progress: Progress, rate: float | None, fraction: float | None,
                           eta_at: float | None) -> None:
    assert (progress.rate, progress.fraction, progress.eta_at) == (rate, fraction, eta_at)


@pytest.mark.parametrize(("progress", "jobspec_total", "total"), [
    (Progress(), None, None),
    (Progress(), 50, 50),
    (Progress(total=40), 50, 40),  # the log's (verl's own arithmetic) wins
])
def test_with_total(progress: Progress, jobspec_total: int | None, total: int | None) -> None:
    assert with_total(progress, jobspec_total).total == total


# -- curves -----------------------------------------------------------------------------

@pytest.mark.parametrize(("steps", "stride", "cap", "new_stride", "dropped"), [
    ([1, 2, 3], 1, 3, 1, []),
    ([1, 2, 3, 4], 1, 3, 2, [2, 4]),
    ([1, 3, 5, 7, 9], 2, 2, 8, [3, 5, 7]),
    (list(range(1, 11)), 1, 3, 4, [2, 3, 4, 6, 7, 8, 10]),
    ([10, 20, 30, 40], 1, 2, 2, [20, 40]),  # a sparse series (validation) thins too
])
def test_thin(steps: list[int], stride: int, cap: int, new_stride: int,
              dropped: list[int]) -> None:
    assert thin(steps, stride, cap) == (new_stride, dropped)


def test_thin_keeps_a_long_run_under_the_cap_and_evenly_spread() -> None:
    kept: list[int] = []
    stride = 1
    for index, step in enumerate(range(1, 100_001)):
        if keeps(index, stride):
            kept.append(step)
            if len(kept) > 500:
                stride, dropped = thin(kept, stride, 500)
                kept = [s for s in kept if s not in set(dropped)]
    assert 250 <= len(kept) <= 500 and kept[0] == 1
    gaps = {b - a for a, b in pairwise(kept)}
    assert gaps == {stride}


def test_thin_refuses_a_cap_below_one() -> None:
    with pytest.raises(ValueError, match="cap"):
        thin([1], 1, 0)


def test_join_later_attempt_replaces_from_its_first_step() -> None:
    points = [Point(1, "loss", s, 10.0 - s) for s in (1, 2, 3, 4, 5)]
    points += [Point(1, "val", 4, 0.4)]
    points += [Point(2, "loss", s, 100.0 + s) for s in (4, 5, 6)]  # resumed from step 3
    joined = join(points)
    assert [(p.step, p.attempt_no) for p in joined["loss"]] == [
        (1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)]
    assert "val" not in joined  # attempt 1's step-4 validation was redone by attempt 2


def test_join_of_nothing_is_empty() -> None:
    assert join([]) == {}


@pytest.mark.parametrize(("keys", "expected"), [
    (["actor/pg_loss", "critic/score/mean", "critic/vf_loss", "perf/throughput"],
     ["actor/pg_loss", "critic/score/mean"]),
    (["train/loss", "train/lr", "val/loss"], ["train/loss"]),
    (["my/loss_total", "env/reward_sum"], ["my/loss_total", "env/reward_sum"]),
    (["perf/throughput"], []),
    ([], []),
])
def test_default_keys(keys: list[str], expected: list[str]) -> None:
    assert default_keys(keys) == expected
