"""How the CLI shows a task's progress (pure): the queue's PROGRESS column and the live
line of ``argus wait``, from the ``progress`` object of the task JSON."""

from __future__ import annotations

from typing import Any

BAR_WIDTH = 20


def duration(seconds: float | None) -> str:
    """``42s``, ``5m 03s``, ``2h 05m``, ``3d 04h`` (as the console writes a span)."""
    if seconds is None:
        return ""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    done = min(width, max(0, int(fraction * width)))
    return "[" + "#" * done + "." * (width - done) + "]"


def _steps(p: dict[str, Any]) -> str:
    step, total = p.get("step"), p.get("total_steps")
    if step is None:
        return ""
    if total is None:
        return f"step {step}"
    return f"step {step}/{total} ({round(100 * (p.get('fraction') or 0))}%)"


def progress_cell(progress: dict[str, Any] | None) -> str:
    """The queue's column: ``120/500 24% ETA 12m05s`` (``-`` before the first step)."""
    if not progress or progress.get("step") is None:
        return "-"
    step, total = progress["step"], progress.get("total_steps")
    text = str(step) if total is None else \
        f"{step}/{total} {round(100 * (progress.get('fraction') or 0))}%"
    if progress.get("eta_s") is not None:
        text += f" ETA {duration(progress['eta_s'])}"
    return text


def progress_summary(p: dict[str, Any]) -> str:
    """``step 120/500 (24%)  1.92 s/step  ETA 12m 10s`` ('' before the first step)."""
    if p.get("step") is None:
        return ""
    parts = [_steps(p)]
    if p.get("rate_steps_per_s"):
        rate = p["rate_steps_per_s"]
        parts.append(f"{rate:.3g} step/s" if rate >= 1 else f"{1 / rate:.3g} s/step")
    if p.get("eta_s") is not None:
        parts.append(f"ETA {duration(p['eta_s'])}")
    if p.get("resumed_from"):
        parts.append(f"(resumed from step {p['resumed_from']})")
    return "  ".join(parts)


def wait_line(task: dict[str, Any]) -> str:
    """One line of where a task is: its state, and while it trains a bar, step, rate and
    ETA; while it waits, its place and why."""
    parts = [str(task.get("task_id")), str(task.get("state"))]
    p = task.get("progress") or {}
    if task.get("state") == "RUNNING" and p.get("step") is not None:
        if p.get("fraction") is not None:
            parts.append(bar(p["fraction"]))
        parts.append(progress_summary(p))
    elif task.get("queue_position") is not None:
        parts.append(f"#{task['queue_position']} in the queue")
        if task.get("pending_reason"):
            parts.append(str(task["pending_reason"]))
    return "  ".join(parts)
