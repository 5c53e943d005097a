"""The nodes' health files as the service judges them (issue 55). Pure.

Each node publishes ``<head.json's dir>/nodes/<name>.health.json`` (format:
``docs/node-runtime.md``, "Health checks"). ``parse_report`` turns a file's bytes into a
``HealthReport``, or a short text saying why the file is ignored (malformed, another
node's, stale: ``checked_at`` older than ``STALE_INTERVALS`` of the node's interval). An
ignored file changes nothing: a node is neither cordoned nor resumed on it.

``decide`` folds the reports into actions: a node reported unhealthy and not out of
admission is cordoned (source ``health``, the check's reason); a node the health check
cordoned is resumed after ``passes`` healthy reports in a row (distinct ``checked_at``: a
file read twice counts once). An operator's cordon or drain is never lifted here.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

from service.domain.nodes import REASON_MAX, NodeSource, NodeStateRow

HEALTH_MAX_BYTES = 64 * 1024  # a health file is ~1 KiB; more is not a health file
STALE_INTERVALS = 3.0


def health_dir(head_json: str | None) -> str | None:
    """Where the nodes publish their health: ``nodes/`` beside head.json (None: no
    ``ray.head_json``, nothing is read)."""
    if not head_json:
        return None
    return posixpath.join(posixpath.dirname(posixpath.normpath(head_json)), "nodes")


@dataclass(frozen=True, slots=True)
class HealthReport:
    node: str
    healthy: bool
    reason: str
    checked_at: float
    interval_s: float


def _one_line(text: str, limit: int = REASON_MAX) -> str:
    clean = "".join(c if c.isprintable() else " " for c in text).strip()
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def parse_report(data: bytes, name: str, now: float, *, truncated: bool = False
                 ) -> HealthReport | str:
    """The report in ``data`` (node ``name``'s file, read at ``now``), or why not."""
    if truncated:
        return f"larger than {HEALTH_MAX_BYTES} bytes"
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"not JSON ({type(exc).__name__})"
    if not isinstance(doc, dict):
        return "not a JSON object"
    if doc.get("version") != 1:
        return f"version {_one_line(repr(doc.get('version')), 20)}, expected 1"
    if doc.get("node") != name:
        return f"names node {_one_line(repr(doc.get('node')), 80)}, not {name}"
    healthy = doc.get("healthy")
    checked_at = _number(doc.get("checked_at"))
    interval = _number(doc.get("interval_s"))
    reason = doc.get("reason")
    if not isinstance(healthy, bool) or checked_at is None or interval is None \
            or interval <= 0 or not isinstance(reason, str):
        return "missing or bad healthy/checked_at/interval_s/reason"
    if now - checked_at > STALE_INTERVALS * interval:
        return (f"stale: checked {now - checked_at:.0f}s ago, more than "
                f"{STALE_INTERVALS:g} intervals of {interval:g}s")
    text = _one_line(reason, REASON_MAX - len("health: ")) or "unhealthy"
    return HealthReport(name, healthy, text, checked_at, interval)


@dataclass
class HealthMemory:
    """What ``decide`` keeps between reads: per node, the healthy reports in a row since
    the health check cordoned it, and the last report's ``checked_at``."""

    passes: dict[str, int] = field(default_factory=dict)
    last_checked: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HealthActions:
    cordon: tuple[tuple[str, str], ...] = ()  # (node, reason)
    resume: tuple[str, ...] = ()


def decide(reports: Mapping[str, HealthReport], states: Mapping[str, NodeStateRow],
           memory: HealthMemory, passes: int) -> HealthActions:
    """The cordons and resumes ``reports`` call for (``memory`` is updated)."""
    cordon: list[tuple[str, str]] = []
    resume: list[str] = []
    for name, report in sorted(reports.items()):
        if memory.last_checked.get(name) == report.checked_at:
            continue  # the same round read again
        memory.last_checked[name] = report.checked_at
        state = states.get(name)
        if not report.healthy:
            memory.passes.pop(name, None)
            if state is None:
                cordon.append((name, f"health: {report.reason}"))
            continue
        if state is None or state.source is not NodeSource.HEALTH:
            memory.passes.pop(name, None)
            continue
        memory.passes[name] = memory.passes.get(name, 0) + 1
        if memory.passes[name] >= passes:
            memory.passes.pop(name)
            resume.append(name)
    return HealthActions(tuple(cordon), tuple(resume))
