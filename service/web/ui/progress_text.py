"""A task's progress in words for the console (pure): ``step 120/500 (24%)  1.92 s/step
ETA 12m 10s``. The ``argus`` CLI renders the same object in its own package
(``argus_client.cli.progress``): the client and the server share no code, only the API."""

from __future__ import annotations

from typing import Any

from service.domain.timefmt import duration


def _steps(p: dict[str, Any]) -> str:
    step, total = p.get("step"), p.get("total_steps")
    if total is None:
        return f"step {step}"
    return f"step {step}/{total} ({round(100 * (p.get('fraction') or 0))}%)"


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
