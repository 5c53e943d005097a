"""The curve's step axis: distinct integer labels, every step on a short run, round steps
on a long one, each label drawn where its step is."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest

from service.web.ui.charts import LEFT, RIGHT, WIDTH, curve_chart, step_ticks


@pytest.mark.parametrize(("first", "last", "ticks"), [
    (1, 1, [1]),
    (0, 1, [0, 1]),
    (1, 4, [1, 2, 3, 4]),  # drew "1 2 2 3 4" before
    (3, 5, [3, 4, 5]),
    (1, 8, [1, 2, 3, 4, 5, 6, 7, 8]),
    (1, 9, [2, 4, 6, 8]),
    (1, 40, [5, 10, 15, 20, 25, 30, 35, 40]),
    (0, 100, [0, 20, 40, 60, 80, 100]),
    (100, 103, [100, 101, 102, 103]),
    (7, 123_457, [20_000, 40_000, 60_000, 80_000, 100_000, 120_000]),
])
def test_step_ticks(first, last, ticks) -> None:
    assert step_ticks(first, last) == ticks


def test_step_ticks_are_distinct_in_range_and_few() -> None:
    for first in range(0, 120, 3):
        for last in range(first + 1, first + 5000, 13):
            ticks = step_ticks(first, last)
            assert 2 <= len(ticks) <= 8, (first, last, ticks)
            assert ticks == sorted(set(ticks)), (first, last, ticks)
            assert first <= ticks[0] and ticks[-1] <= last, (first, last, ticks)
            assert len({b - a for a, b in pairwise(ticks)}) == 1


def _x_labels(svg: str) -> list[tuple[float, str]]:
    return [(float(x), label) for x, label in re.findall(
        r'<text class="axis step-tick" x="([0-9.]+)"[^>]*>([^<]*)</text>', svg)]


def test_curve_chart_labels_each_step_once_where_it_is() -> None:
    svg = str(curve_chart([(s, 1.0 / s, 1) for s in range(1, 5)], title="loss"))
    labels = _x_labels(svg)
    assert [label for _, label in labels] == ["1", "2", "3", "4"]
    plot_w = WIDTH - LEFT - RIGHT
    assert [x for x, _ in labels] == [LEFT + plot_w * i / 3 for i in range(4)]


def test_curve_chart_of_one_point_has_one_label() -> None:
    assert [label for _, label in _x_labels(str(curve_chart([(7, 0.5, 1)], title="x")))] \
        == ["7"]
