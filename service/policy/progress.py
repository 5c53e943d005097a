"""How far along a running attempt is, from the lines its driver prints (pure).

verl's console logger prints one line per training step::

    step:12 - train/loss:5.8013 - train/grad_norm:2.169 - perf/throughput:1520.3

(``verl.utils.tracking``: ``step:<N>`` then `` - key:value`` per numeric metric). The
line may come behind Ray's actor prefix (``(TaskRunner pid=12) ``, ANSI colours) or behind
a tqdm bar that printed no newline, so the parser searches each carriage-return segment
for ``step:<N>`` not preceded by a word character. Validation prints a second line for the
same step (``step:4 - val/loss:5.56``); its metrics join the step's.

Other lines it reads: verl's PPO trainer prints ``Total training steps: <N>`` once it
knows the run's length (its SFT trainer logs that line below the default log level, but its
FSDP engine prints ``Total steps: <N>, num_warmup_steps: <W>`` when it builds the learning
rate schedule over the same N), and a resumed run says which checkpoint it loaded
(``Load from checkpoint folder: .../global_step_<k>`` in verl's PPO trainer, ``Found latest
checkpoint: .../global_step_<k> (step k)`` in its SFT trainer, ``resumed from checkpoint
global_step_<k>`` in the stand-in). A resumed attempt continues verl's global step count,
so its progress starts at k, and its rate counts only the steps this attempt did.

``Progress`` is the model of one attempt; ``advance`` folds parsed lines into it at the
time the follower read them (the lines carry no time of their own).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from service.domain.progress import Progress

MAX_KEY_LEN = 128  # a longer "key" is not a metric name: the part is skipped
_STEP = re.compile(r"(?<![\w/.-])step:(\d{1,12})(?= - |\s*$)")
_TOTAL = re.compile(
    r"Total training steps: (\d{1,12})\b|\bTotal steps: (\d{1,12}), num_warmup_steps:")
# A load or resume as a word: verl's SFT trainer prints "Saved dataloader state to:
# .../global_step_4/" after every save, which is no resume.
_RESUMED = re.compile(
    r"(?i)\b(?:resum(?:e|ed|ing)|load(?:ed|ing)?|found latest checkpoint)\b"
    r"[^\n]*?global_step_(\d{1,12})\b")
_KEY = re.compile(r"[^\s:]+")


@dataclass(frozen=True, slots=True)
class StepLine:
    """One ``step:N - key:value ...`` line: the step and its finite numeric metrics."""

    step: int
    metrics: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class TotalLine:
    """``Total training steps: N`` (or the FSDP engine's ``Total steps: N, ...``)."""

    total: int


@dataclass(frozen=True, slots=True)
class ResumedLine:
    """The attempt loaded the checkpoint of step ``step``."""

    step: int


LineEvent = StepLine | TotalLine | ResumedLine


def _metrics(rest: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in rest.split(" - "):
        key, sep, raw = part.strip().rpartition(":")
        if not sep or len(key) > MAX_KEY_LEN or not _KEY.fullmatch(key):
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        if math.isfinite(value):  # nan/inf are not points on a curve (nor JSON)
            out[key] = value
    return out


def parse_line(line: str) -> LineEvent | None:
    """What one log line says about progress (None: nothing)."""
    # plain substring tests first: most lines are none of these, and a regex search over
    # a long line costs ten times more
    segments = reversed(line.split("\r")) if "\r" in line else (line,)
    for segment in segments:  # tqdm redraws with \r: the last wins
        match = _STEP.search(segment) if "step:" in segment else None
        if match:
            return StepLine(int(match.group(1)), _metrics(segment[match.end():]))
        match = _TOTAL.search(segment) if "Total " in segment else None
        total = int(match.group(1) or match.group(2)) if match else 0
        if total > 0:
            return TotalLine(total)
        match = _RESUMED.search(segment) if "global_step_" in segment else None
        if match:
            return ResumedLine(int(match.group(1)))
    return None


def split_complete(text: str) -> tuple[list[str], int]:
    """The complete lines of ``text`` and how many characters they span (a last line
    without its newline is left for the next read)."""
    end = text.rfind("\n") + 1
    return text[:end].splitlines(), end


def advance(progress: Progress, events: Iterable[LineEvent], now: float) -> Progress:
    """``progress`` after the lines ``events``, read at ``now``."""
    out = progress
    for event in events:
        if isinstance(event, TotalLine):
            out = replace(out, total=event.total)
        elif isinstance(event, ResumedLine):
            out = replace(out, resumed_from=event.step,
                          step=max(out.step or 0, event.step))
        elif out.first_at is None or out.first_at == now:
            # steps of the first read count as done by then: they took an unknown time
            out = replace(out, step=max(out.step or 0, event.step), first_step=event.step,
                          first_at=now, last_at=now)
        elif event.step >= (out.step or 0):  # a validation line repeats its step
            out = replace(out, step=event.step, last_at=now)
    return out


def with_total(progress: Progress, jobspec_total: int | None) -> Progress:
    """The JobSpec's ``total_training_steps`` until the log says the run's length."""
    if progress.total is not None or jobspec_total is None:
        return progress
    return replace(progress, total=jobspec_total)
