"""The CodeCarbon parity figure's tick labels never run into each other (issue 39), on log and
linear axes over every span."""

from __future__ import annotations

import numpy as np
import pytest

from wattlab.analysis.plots import PARITY_TICKS, _new_figure, parity_ticks


def _overlaps(boxes: list) -> bool:
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


@pytest.mark.parametrize(
    ("low", "high", "log"),
    [(1900.0, 2600.0, False), (30.0, 900.0, True), (1.5e3, 4.1e4, True), (0.2, 3e4, True)],
)
def test_parity_tick_labels_do_not_overlap(low: float, high: float, log: bool) -> None:
    fig = _new_figure(6.4, 6.4)
    ax = fig.add_subplot()
    x = np.geomspace(low, high, 7)
    ax.scatter(x, x * 1.03)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlim(low / 1.3, high * 1.3)
    ax.set_ylim(low / 1.3, high * 1.3)
    ax.set_aspect("equal")
    parity_ticks(ax, log)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for axis in (ax.xaxis, ax.yaxis):
        labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
        low, high = axis.get_view_interval()
        index = 0 if axis is ax.xaxis else 1
        labels = [t for t in labels if low <= t.get_position()[index] <= high]  # drawn ones
        boxes = [t.get_window_extent(renderer) for t in labels]
        assert not _overlaps(boxes), [t.get_text() for t in labels]
        assert len([t for t in labels]) <= PARITY_TICKS + 2  # the locator may add the edges
        minor = [t for t in axis.get_minorticklabels() if t.get_visible() and t.get_text()]
        assert minor == []
