"""The verl stand-in (examples/standin-verl): arguments, steps, verl's checkpoint layout
and resume, without Ray (``train`` takes its clock and printer; ``run`` is the only part
that needs a cluster and is exercised by the integration tier)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from service.config import Settings
from service.jobspec.model import JobSpec
from service.jobspec.submission import build_entrypoint
from service.policy.progress import StepLine, parse_line

TRAINER_DIR = Path(__file__).resolve().parents[3] / "examples" / "standin-verl" / "verl" / "trainer"
PACKAGE = "argus_standin_trainer"  # not "verl": a real verl may be installed beside us


def _load(name: str) -> ModuleType:
    """``examples/standin-verl/verl/trainer/<name>.py`` as a submodule of a private
    package, so the stand-in's relative imports work without shadowing any ``verl``."""
    if PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            PACKAGE, TRAINER_DIR / "__init__.py", submodule_search_locations=[str(TRAINER_DIR)])
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{PACKAGE}.{name}")


standin = _load("standin")
ckpt = _load("standin_checkpoint")

TASK = "mvp2-alice-ppo-20251223-143201-7f3a"
BASE = ["trainer.nnodes=1", "trainer.n_gpus_per_node=4", "trainer.experiment_name=exp"]


def _cfg(*extra: str) -> object:
    return standin.RunConfig.from_overrides(standin.parse_overrides([*BASE, *extra]))


class Run:
    """What ``train`` printed and slept."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.sleeps: list[float] = []

    def __call__(self, cfg: object) -> int:
        return standin.train(cfg, self.lines.append, self.sleeps.append)

    def steps(self) -> list[int]:
        """The steps of the step lines, read as the service reads them."""
        events = [parse_line(line) for line in self.lines if line.startswith("step:")]
        assert all(isinstance(e, StepLine) for e in events), events
        return [e.step for e in events]


# -- arguments --------------------------------------------------------------------------

def test_without_total_training_steps_one_step_per_second_as_before() -> None:
    cfg = _cfg("+argus_demo.duration_s=3.5")
    assert (cfg.total_steps, cfg.step_s) == (3, pytest.approx(3.5 / 3))
    short = _cfg("+argus_demo.duration_s=0.2")
    assert (short.total_steps, short.step_s) == (1, pytest.approx(0.2))


def test_total_training_steps_splits_the_duration() -> None:
    cfg = _cfg("+argus_demo.duration_s=20", "trainer.total_training_steps=40")
    assert (cfg.total_steps, cfg.step_s) == (40, pytest.approx(0.5))


def test_hydra_null_means_not_set() -> None:
    cfg = _cfg("trainer.total_training_steps=null", "trainer.save_freq=null",
               "trainer.default_local_dir=null", "+argus_demo.duration_s=2")
    assert (cfg.total_training_steps, cfg.save_freq, cfg.default_local_dir) == (None, -1, None)
    assert cfg.total_steps == 2


@pytest.mark.parametrize("argv, needle", [
    (["trainer.resume_mode=sometimes"], "trainer.resume_mode must be one of"),
    (["trainer.save_freq=2"], "needs trainer.default_local_dir"),
    (["trainer.save_freq=-2", "trainer.default_local_dir=/x"], "trainer.save_freq must be >= -1"),
    (["trainer.total_training_steps=0"], "trainer.total_training_steps must be >= 1"),
    (["trainer.total_training_steps=ten"], "must be an integer"),
    (["trainer.resume_mode=resume_path"], "naming a global_step_<k> directory"),
    (["trainer.resume_mode=resume_path", "trainer.resume_from_path=/ck/step_3"],
     "naming a global_step_<k> directory"),
])
def test_unusable_values_are_usage_errors(argv: list[str], needle: str) -> None:
    with pytest.raises(standin.UsageError, match=needle.replace("[", r"\[")):
        _cfg(*argv)


def test_main_answers_a_usage_error_with_exit_2_before_touching_ray(capsys) -> None:
    assert standin.main([*BASE, "trainer.resume_mode=never"], trainer="main_ppo") == 2
    assert "[standin-verl main_ppo] usage error: trainer.resume_mode" in capsys.readouterr().out


@pytest.mark.parametrize("workload", ["ppo", "sft"])
def test_the_stand_in_reads_the_keys_argus_passes(workload: str) -> None:
    """The argv Argus builds (service.jobspec.submission) parses, with checkpointing on."""
    spec = JobSpec.from_dict({
        "workload": workload, "code_path": "/shared/code", "model_id": "org/model",
        "train_file": "/shared/train.parquet", "val_file": "/shared/val.parquet",
        "nnodes": 1, "n_gpus_per_node": 4, "total_training_steps": 20, "save_freq": 3,
        "overrides": ["+argus_demo.duration_s=7"],
    })
    argv = build_entrypoint(spec, TASK, 2, Settings(), user="alice")
    cfg = standin.RunConfig.from_overrides(standin.parse_overrides(argv[3:]))
    assert (cfg.total_steps, cfg.save_freq, cfg.resume_mode) == (20, 3, "auto")
    assert cfg.default_local_dir is not None
    assert cfg.default_local_dir.endswith(f"/users/alice/checkpoints/{TASK}")
    assert cfg.step_s == pytest.approx(7 / 20)


# -- the checkpoint layout -------------------------------------------------------------

def test_save_writes_verls_layout_and_leaves_no_temp_files(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "ckpt"  # created as needed
    folder = ckpt.save(root, 7, {"total_steps": 9})
    assert folder == root / "global_step_7" and folder.is_dir()
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "7"
    state = json.loads((folder / "standin_state.json").read_text())
    assert state == {"global_step": 7, "total_steps": 9}
    assert ckpt.find_latest(root) == ckpt.Latest(7)
    ckpt.save(root, 8, {})
    assert ckpt.find_latest(root) == ckpt.Latest(8)
    leftovers = [p.name for p in root.rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_a_failed_write_keeps_the_old_tracker(tmp_path: Path, monkeypatch) -> None:
    ckpt.save(tmp_path, 2, {})

    def boom(src: str, dst: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(ckpt.os, "replace", boom)
    with pytest.raises(OSError, match="disk gone"):
        ckpt.save(tmp_path, 3, {})
    monkeypatch.undo()
    assert ckpt.find_latest(tmp_path) == ckpt.Latest(2)
    assert [p.name for p in tmp_path.rglob(".*")] == []  # the temp file went too


def test_no_tracker_is_no_checkpoint_without_complaint(tmp_path: Path) -> None:
    assert ckpt.find_latest(tmp_path / "never-made") == ckpt.Latest(None, None)


@pytest.mark.parametrize("content, problem", [
    ("", "not a step number"),
    ("step 3\n", "not a step number"),
    ("-1", "negative step"),
    ("5", "does not exist"),  # names a step directory that is not there
])
def test_a_bad_tracker_is_no_checkpoint_and_says_why(tmp_path: Path, content: str,
                                                     problem: str) -> None:
    ckpt.save(tmp_path, 3, {})
    (tmp_path / ckpt.TRACKER).write_text(content)
    latest = ckpt.find_latest(tmp_path)
    assert latest.step is None and problem in (latest.problem or "")


def test_step_of_a_resume_path() -> None:
    assert ckpt.step_of("/c/global_step_12") == 12
    assert ckpt.step_of("/c/global_step_12/") == 12
    assert ckpt.step_of("/c/global_step_x") is None
    assert ckpt.step_of("/c/step_12") is None


# -- training, saving, resuming ----------------------------------------------------------

def test_fresh_run_saves_every_save_freq_steps_and_after_the_last(tmp_path: Path) -> None:
    run = Run()
    cfg = _cfg("+argus_demo.duration_s=10", "trainer.total_training_steps=5",
               "trainer.save_freq=2", f"trainer.default_local_dir={tmp_path}",
               "trainer.resume_mode=auto")
    assert run(cfg) == 5
    assert run.lines[0] == "no checkpoint to resume from"
    assert run.steps() == list(range(1, 6))
    saved = [line for line in run.lines if line.startswith("saved")]
    assert saved == [f"saved checkpoint global_step_{k}" for k in (2, 4, 5)]
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == [
        "global_step_2", "global_step_4", "global_step_5"]
    assert ckpt.find_latest(tmp_path) == ckpt.Latest(5)
    assert run.sleeps == [pytest.approx(2.0)] * 5  # 10 s over 5 steps


def test_checkpoint_is_on_disk_when_the_step_line_is_printed(tmp_path: Path) -> None:
    """A watcher that saw "step k" (k a save step) finds at least step k saved."""
    seen: list[int | None] = []

    def say(line: str) -> None:
        if line.startswith("saved"):
            seen.append(ckpt.find_latest(tmp_path).step)

    cfg = _cfg("trainer.total_training_steps=3", "trainer.save_freq=1",
               f"trainer.default_local_dir={tmp_path}")
    standin.train(cfg, say, lambda s: None)
    assert seen == [1, 2, 3]


def test_resume_starts_after_the_saved_step_and_says_so_once(tmp_path: Path) -> None:
    ckpt.save(tmp_path, 3, {})
    run = Run()
    cfg = _cfg("+argus_demo.duration_s=8", "trainer.total_training_steps=8",
               "trainer.save_freq=1", f"trainer.default_local_dir={tmp_path}")
    assert run(cfg) == 8
    resumed = [line for line in run.lines if "resume" in line or "checkpoint to" in line]
    assert resumed == ["resumed from checkpoint global_step_3"]
    assert run.steps() == list(range(4, 9))
    assert run.sleeps == [pytest.approx(1.0)] * 5  # per-step time as in a fresh run
    assert ckpt.find_latest(tmp_path) == ckpt.Latest(8)


def test_nothing_left_when_the_checkpoint_is_at_or_past_the_end(tmp_path: Path) -> None:
    ckpt.save(tmp_path, 6, {})
    run = Run()
    cfg = _cfg("trainer.total_training_steps=5", "trainer.save_freq=1",
               f"trainer.default_local_dir={tmp_path}")
    assert run(cfg) == 6
    assert run.lines == ["resumed from checkpoint global_step_6",
                         "checkpoint step 6 >= total steps 5: nothing left to train"]
    assert run.sleeps == []


def test_a_garbled_tracker_means_from_scratch_and_says_so(tmp_path: Path) -> None:
    ckpt.save(tmp_path, 2, {})
    (tmp_path / ckpt.TRACKER).write_text("garbage")
    run = Run()
    cfg = _cfg("trainer.total_training_steps=3", "trainer.save_freq=1",
               f"trainer.default_local_dir={tmp_path}")
    run(cfg)
    assert run.lines[0].startswith("ignoring the checkpoint tracker: ")
    assert run.lines[1] == "no checkpoint to resume from"
    assert run.steps() == [1, 2, 3]
    assert ckpt.find_latest(tmp_path) == ckpt.Latest(3)  # the new saves repair it


def test_save_freq_off_writes_nothing_but_still_resumes(tmp_path: Path) -> None:
    for off in ("-1", "0"):
        run = Run()
        cfg = _cfg("trainer.total_training_steps=2", f"trainer.save_freq={off}",
                   f"trainer.default_local_dir={tmp_path}")
        run(cfg)
        assert run.lines[0] == "no checkpoint to resume from"
        assert not any(line.startswith("saved") for line in run.lines)
        assert list(tmp_path.iterdir()) == []
    ckpt.save(tmp_path, 1, {})
    run = Run()
    run(_cfg("trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path}"))
    assert run.steps() == [2]


def test_no_checkpoint_dir_means_no_checkpoint_talk() -> None:
    run = Run()
    run(_cfg("+argus_demo.duration_s=2"))
    assert run.steps() == [1, 2] and len(run.lines) == 2


def test_resume_mode_disable_ignores_a_checkpoint(tmp_path: Path) -> None:
    ckpt.save(tmp_path, 2, {})
    run = Run()
    run(_cfg("trainer.total_training_steps=3", "trainer.resume_mode=disable",
             f"trainer.default_local_dir={tmp_path}"))
    assert run.lines[0] == "trainer.resume_mode=disable: training from step 1"
    assert run.steps() == [1, 2, 3]


def test_resume_path_starts_after_the_named_step(tmp_path: Path) -> None:
    ckpt.save(tmp_path, 2, {})
    ckpt.save(tmp_path, 4, {})
    run = Run()
    run(_cfg("trainer.total_training_steps=5", "trainer.resume_mode=resume_path",
             f"trainer.resume_from_path={tmp_path / 'global_step_2'}"))
    assert run.lines[0] == "resumed from checkpoint global_step_2"
    assert run.steps() == [3, 4, 5]
    with pytest.raises(standin.ResumeError, match="does not exist"):
        run(_cfg("trainer.total_training_steps=5", "trainer.resume_mode=resume_path",
                 f"trainer.resume_from_path={tmp_path / 'global_step_9'}"))


def test_write_atomic_sets_readable_permissions(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    ckpt.write_atomic(target, "x")
    assert target.read_text() == "x" and (os.stat(target).st_mode & 0o777) == 0o644


def test_step_lines_are_verl_console_lines_with_falling_loss_and_rising_reward() -> None:
    lines = [standin.step_line(step, 10, 0.5) for step in range(1, 11)]
    events = [parse_line(f"[standin-verl main_ppo] {line}") for line in lines]
    assert [e.step for e in events] == list(range(1, 11))
    losses = [e.metrics["train/loss"] for e in events]
    scores = [e.metrics["critic/score/mean"] for e in events]
    assert losses == sorted(losses, reverse=True) and scores == sorted(scores)
    assert events[0].metrics["actor/lr"] == 1e-06
