"""Charts as inline SVG, drawn on the server: no charting library, no script.

``line_chart`` draws one series over a time window (gaps where no sample exists, e.g.
while the service was down); ``bar_chart`` draws labelled horizontal bars. Both return
markup in which every text (labels, titles) is escaped, ready to be put in a page.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 48, 24, 12, 28
GAP_FACTOR = 3.0  # a step longer than 3 sample intervals is a gap in the line


def nice_max(value: float) -> float:
    """A round upper bound for an axis (1, 2, 5 x 10^n) at least ``value`` (>= 1)."""
    if value <= 1:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * exp:
            return float(step * exp)
    return float(10 * exp)


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.1f}"


def line_chart(points: Sequence[tuple[float, float | None]], *, start: float, end: float,
               title: str, unit: str = "", interval_s: float = 60.0,
               y_max: float | None = None) -> Markup:
    """``points`` are (time, value) in time order; a None value is a gap."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    values = [v for _, v in points if v is not None]
    top = y_max if y_max is not None else nice_max(max(values, default=0.0))
    span = max(end - start, 1.0)

    def xy(t: float, v: float) -> str:
        x = LEFT + (t - start) / span * plot_w
        y = TOP + plot_h - (min(v, top) / top) * plot_h
        return f"{x:.1f},{y:.1f}"

    paths: list[list[str]] = []
    last_t: float | None = None
    for t, v in points:
        if v is None or t < start or t > end:
            last_t = None
            continue
        if last_t is None or t - last_t > GAP_FACTOR * interval_s:
            paths.append([])
        paths[-1].append(xy(t, v))
        last_t = t
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>"]
    for frac in (0.0, 0.5, 1.0):
        y = TOP + plot_h - frac * plot_h
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" '
                     f'y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{_fmt(top * frac)}{escape(unit)}</text>')
    for i in range(5):
        t = start + span * i / 4
        x = LEFT + plot_w * i / 4
        label = time.strftime("%H:%M", time.gmtime(t))
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 8}" '
                     f'text-anchor="{anchor}">{label}</text>')
    for path in paths:
        if len(path) == 1:
            x, y = path[0].split(",")
            parts.append(f'<circle class="series" cx="{x}" cy="{y}" r="2"/>')
        else:
            parts.append(f'<polyline class="series" points="{" ".join(path)}"/>')
    if not values:
        parts.append(f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" '
                     'text-anchor="middle">no samples in this window yet</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def bar_chart(bars: Sequence[tuple[str, float]], *, title: str, unit: str = "") -> Markup:
    """Horizontal bars, one per (label, value), in the order given."""
    row_h, label_w = 26, 140
    height = max(1, len(bars)) * row_h + 16
    plot_w = WIDTH - label_w - 80
    top = nice_max(max((v for _, v in bars), default=0.0))
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>"]
    for i, (label, value) in enumerate(bars):
        y = 8 + i * row_h
        w = max(0.0, value / top * plot_w)
        parts.append(f'<text class="axis" x="{label_w - 8}" y="{y + 16}" '
                     f'text-anchor="end">{escape(label)}</text>')
        parts.append(f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{w:.1f}" '
                     f'height="{row_h - 8}"/>')
        parts.append(f'<text class="value" x="{label_w + w + 6:.1f}" y="{y + 16}">'
                     f'{value:.{2 if value < 10 else 1}f}{escape(unit)}</text>')
    if not bars:
        parts.append(f'<text class="empty" x="{WIDTH / 2}" y="24" text-anchor="middle">'
                     "no GPU time in this window</text>")
    parts.append("</svg>")
    return Markup("".join(parts))
