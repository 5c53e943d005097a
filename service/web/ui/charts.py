"""Charts as inline SVG, drawn on the server: no charting library, no script.

``line_chart`` draws one series over a time window (gaps where no sample exists, e.g.
while the service was down); ``bar_chart`` draws labelled horizontal bars; ``curve_chart``
draws a training curve over verl's steps, reduced to what the pixels can show. Each returns
markup in which every text (labels, titles) is escaped, ready to be put in a page.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from html import escape
from itertools import pairwise

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


def _y_grid(label: Callable[[float], str]) -> list[str]:
    """Three horizontal grid lines (bottom, middle, top) with their labels (escaped)."""
    plot_h = HEIGHT - TOP - BOTTOM
    out = []
    for frac in (0.0, 0.5, 1.0):
        y = TOP + plot_h - frac * plot_h
        out.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" '
                   f'y2="{y:.1f}"/>')
        out.append(f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{label(frac)}</text>')
    return out


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
    parts += _y_grid(lambda frac: f"{_fmt(top * frac)}{escape(unit)}")
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


def _num(v: float) -> str:
    """An axis label: 3 significant digits, no exponent for everyday magnitudes."""
    return f"{v:.3g}" if v != 0 else "0"


def _columns(points: Sequence[tuple[int, float, int]], first: int, scale: float
             ) -> list[tuple[int, float]]:
    """The (step, value) points as drawn: per pixel column its first, lowest, highest and
    last point, in step order. A 10k-point curve draws as at most 4 vertices a pixel
    column, and still shows every spike."""
    out: list[tuple[int, float]] = []
    col = -1
    head = low = high = tail = (0, 0.0)

    def emit() -> None:
        out.extend(sorted({head, low, high, tail}))

    for step, value, _ in points:
        x = int((step - first) * scale)
        if x != col:
            if col >= 0:
                emit()
            col = x
            head = low = high = tail = (step, value)
            continue
        tail = (step, value)
        if value < low[1]:
            low = tail
        elif value > high[1]:
            high = tail
    if col >= 0:
        emit()
    return out


def step_ticks(first: int, last: int, most: int = 8) -> list[int]:
    """The step axis' labels from ``first`` to ``last``: multiples of the smallest round
    step (1, 2, 5 x 10^n) that gives at most ``most`` of them. Every label is a distinct
    integer: a short run is labelled step by step, a long one at round steps."""
    if last <= first:
        return [first]
    exp = 1
    while True:
        for unit in (1, 2, 5):
            step = unit * exp
            low = -(-first // step) * step  # the first multiple of step at or after first
            if (last - low) // step + 1 <= most:
                return list(range(low, last + 1, step))
        exp *= 10


def curve_chart(points: Sequence[tuple[int, float, int]], *, title: str) -> Markup:
    """A training curve: (step, value, attempt) in step order on a step axis, a dashed
    line where another attempt takes over (labelled with its number)."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [f'<svg class="chart curve" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>"]
    if not points:
        parts.append(f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" '
                     'text-anchor="middle">no points yet</text></svg>')
        return Markup("".join(parts))
    first, last = points[0][0], points[-1][0]
    lo = min(p[1] for p in points)
    hi = max(p[1] for p in points)
    if hi == lo:
        lo, hi = lo - 1, hi + 1
    x_span = max(last - first, 1)

    def x_of(step: int) -> float:
        return LEFT + (step - first) / x_span * plot_w

    def y_of(value: float) -> float:
        return TOP + plot_h - (value - lo) / (hi - lo) * plot_h

    parts += _y_grid(lambda frac: _num(lo + (hi - lo) * frac))
    for step in step_ticks(first, last):
        parts.append(f'<text class="axis step-tick" x="{x_of(step):.1f}" y="{HEIGHT - 8}" '
                     f'text-anchor="middle">{step}</text>')
    for prev, point in pairwise(points):
        if point[2] != prev[2]:
            x = x_of(point[0])
            parts.append(f'<line class="attempt" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" '
                         f'y2="{TOP + plot_h}"/><text class="axis" x="{x + 3:.1f}" '
                         f'y="{TOP + 10}">a{point[2]}</text>')
    drawn = _columns(points, first, plot_w / x_span)
    if len(drawn) == 1:
        parts.append(f'<circle class="series" cx="{x_of(drawn[0][0]):.1f}" '
                     f'cy="{y_of(drawn[0][1]):.1f}" r="2"/>')
    else:
        path = " ".join(f"{x_of(s):.1f},{y_of(v):.1f}" for s, v in drawn)
        parts.append(f'<polyline class="series" points="{path}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))
