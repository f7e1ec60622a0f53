"""The stroke font: its glyphs cover the signs' legends, and a legend fills exactly the box it is given."""

from __future__ import annotations

import numpy as np
import pytest

from physattack.scene.font import BOLD, GLYPHS, PEN, REGULAR, legend
from physattack.scene.vector import FULL, coverage

LEGENDS = ["STOP", "YIELD", "SPEED", "LIMIT", "45", "DO NOT", "ENTER", "ONE WAY", "DO", "NOT", "PASS", "R"]


def ink_box(shape, h=400, w=700) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) of the ink in pixels, to a sample: each edge pixel counts by its coverage."""
    img = np.zeros((h, w))
    r, c, n = coverage(shape, h, w)
    img[r:r + n.shape[0], c:c + n.shape[1]] = n / FULL
    cols, rows = img.max(0), img.max(1)
    xs, ys = np.nonzero(cols)[0], np.nonzero(rows)[0]
    return (xs[0] + 1 - cols[xs[0]], ys[0] + 1 - rows[ys[0]], xs[-1] + cols[xs[-1]], ys[-1] + rows[ys[-1]])


def test_the_font_holds_every_letter_of_the_signs():
    assert set("".join(LEGENDS).replace(" ", "")) <= set(GLYPHS)
    assert set("ADEILMNOPRSTWY45") <= set(GLYPHS)


def test_stop_spans_the_requested_width_and_cap_height():
    left, top, right, bottom = ink_box(legend("STOP", (350.0, 200.0), 109.2, 419.6))
    assert right - left == pytest.approx(419.6, abs=1.0)
    assert (left + right) / 2 == pytest.approx(350.0, abs=0.5)
    # S and O overshoot the flat capitals by a little, as printed round letters do.
    assert 109.2 <= bottom - top <= 109.2 * 1.05
    assert (top + bottom) / 2 == pytest.approx(200.0, abs=0.5)


@pytest.mark.parametrize("text", LEGENDS)
def test_every_legend_fills_its_box(text):
    cap, width = 60.0, 60.0 * 0.9 * len(text)
    left, top, right, bottom = ink_box(legend(text, (350.0, 200.0), cap, width))
    assert right - left == pytest.approx(width, abs=1.0)
    assert (left + right) / 2 == pytest.approx(350.0, abs=0.5)
    assert bottom - top == pytest.approx(cap, abs=0.06 * cap)


def test_flat_capitals_are_exactly_cap_tall_and_stems_are_the_weight():
    left, top, right, bottom = ink_box(legend("LIMIT", (350.0, 200.0), 100.0, 390.0))
    assert bottom - top == pytest.approx(100.0, abs=0.1)
    for weight in (BOLD, REGULAR):
        left, _, right, _ = ink_box(legend("I", (350.0, 200.0), 100.0, 100.0 * weight, weight))
        assert right - left == pytest.approx(100.0 * weight, abs=0.1)
        # Bars are thinner than stems by the pen's aspect: the E's top arm (its ink spans x 310 to 390).
        shape = legend("E", (350.0, 200.0), 100.0, 80.0, weight)
        img = np.zeros((400, 700))
        r, c, n = coverage(shape, 400, 700)
        img[r:r + n.shape[0], c:c + n.shape[1]] = n / FULL
        top_arm = img[:180, 365]                       # the stem ends by x = 342; the middle arm starts at y = 188
        assert top_arm.sum() == pytest.approx(100.0 * weight * PEN[1] / PEN[0], abs=0.1)


def test_a_letter_the_font_lacks_is_refused():
    with pytest.raises(ValueError, match="no glyph"):
        legend("STOP!", (0.0, 0.0), 10.0, 40.0)


def test_a_box_too_narrow_for_the_pen_is_refused():
    with pytest.raises(ValueError, match="cannot be"):
        legend("STOP", (0.0, 0.0), 100.0, 50.0)
