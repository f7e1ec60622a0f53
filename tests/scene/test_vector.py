"""The exact rasteriser: coverage of known shapes, agreement with a sample-by-sample test, compositing,
and no drawing library anywhere on the path that makes the sign textures."""

from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import numpy as np
import pytest

import physattack.scene as scene_pkg
from physattack.scene.vector import (FULL, SAMPLES, UNITS, Ellipse, Polygon, Stroke, Union, coverage, disc,
                                     ellipse, fixed, isqrt, line, mask, paint, polygon, polygons)

DRAWING_MODULES = ("vector", "font", "signs", "boards")


def counts(shape, h=64, w=64) -> np.ndarray:
    """Coverage counts of ``shape`` over the whole h×w image."""
    out = np.zeros((h, w), np.int64)
    r, c, n = coverage(shape, h, w)
    out[r:r + n.shape[0], c:c + n.shape[1]] = n
    return out


@pytest.mark.parametrize("module", DRAWING_MODULES)
def test_drawing_modules_import_no_imaging_library(module):
    tree = ast.parse((Path(scene_pkg.__file__).parent / f"{module}.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"cv2", "PIL", "skimage", "matplotlib"}, imported


def test_pixel_aligned_square_covers_exactly_its_pixels():
    got = counts(polygon([(10, 10), (20, 10), (20, 20), (10, 20)]))
    want = np.zeros_like(got)
    want[10:20, 10:20] = FULL
    np.testing.assert_array_equal(got, want)


def test_half_pixel_square_covers_halves_on_its_edges_and_quarters_at_its_corners():
    got = counts(polygon([(10.5, 10.5), (20.5, 10.5), (20.5, 20.5), (10.5, 20.5)]))
    want = np.zeros_like(got)
    want[10:21, 10:21] = FULL // 2
    want[11:20, 11:20] = FULL
    for y, x in [(10, 10), (10, 20), (20, 10), (20, 20)]:
        want[y, x] = FULL // 4
    np.testing.assert_array_equal(got, want)
    assert got.sum() == 100 * FULL                      # 10 × 10 px, exactly


@pytest.mark.parametrize("radius", [3.3, 10.0, 50.7, 200.0])
def test_disc_area_is_pi_r_squared_within_its_perimeter_over_the_samples(radius):
    area = counts(disc((256.3, 255.1), radius), 512, 512).sum() / FULL
    assert abs(area - math.pi * radius ** 2) <= 2 * math.pi * radius / SAMPLES


def test_ellipse_and_round_pen_stroke_areas():
    assert counts(ellipse((200, 200), 90, 40), 400, 400).sum() / FULL == pytest.approx(math.pi * 90 * 40, rel=1e-4)
    # A capsule: 200 px long, 24 px wide, with two half-discs of radius 12.
    got = counts(line((100, 100), (100, 300), 24), 400, 400).sum() / FULL
    assert got == pytest.approx(200 * 24 + math.pi * 12 ** 2, rel=1e-3)


def test_elliptical_pen_lays_stems_wider_than_bars():
    # Pen (4, 3): half-widths r/3 across x and r/4 across y, here 12 px and 9 px.
    r = fixed(12) * 3
    stem = Stroke((fixed(50), fixed(50)), (fixed(50), fixed(150)), r, 4, 3)
    bar = Stroke((fixed(50), fixed(50)), (fixed(150), fixed(50)), r, 4, 3)
    ellipse_area = math.pi * 12 * 9
    assert counts(stem, 200, 200).sum() / FULL == pytest.approx(100 * 24 + ellipse_area, rel=1e-3)
    assert counts(bar, 200, 200).sum() / FULL == pytest.approx(100 * 18 + ellipse_area, rel=1e-3)


def _inside_by_sample(shape, x: int, y: int) -> bool:
    """The defining inequality of ``shape`` at one sample (units), in Python integers."""
    if isinstance(shape, Polygon):
        p = shape.points
        crosses = [(b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0]) for a, b in zip(p, p[1:] + p[:1])]
        return all(c >= 0 for c in crosses) or all(c <= 0 for c in crosses)
    if isinstance(shape, Ellipse):
        rx, ry = shape.rx, shape.ry
        return ry ** 2 * (x - shape.cx) ** 2 + rx ** 2 * (y - shape.cy) ** 2 <= (rx * ry) ** 2
    if isinstance(shape, Stroke):
        # In the pen's round frame: the squared distance from the point to the segment, as a fraction.
        ax_, ay_ = shape.ax, shape.ay
        px, py = x * ay_, y * ax_
        a = (shape.a[0] * ay_, shape.a[1] * ax_)
        b = (shape.b[0] * ay_, shape.b[1] * ax_)
        d = (b[0] - a[0], b[1] - a[1])
        L = d[0] ** 2 + d[1] ** 2
        t = (px - a[0]) * d[0] + (py - a[1]) * d[1]
        if L == 0 or t <= 0:
            return (px - a[0]) ** 2 + (py - a[1]) ** 2 <= shape.r ** 2
        if t >= L:
            return (px - b[0]) ** 2 + (py - b[1]) ** 2 <= shape.r ** 2
        c = d[0] * (py - a[1]) - d[1] * (px - a[0])
        return c * c <= shape.r ** 2 * L
    if isinstance(shape, Union):
        return any(_inside_by_sample(p, x, y) for p in shape.parts)
    raise TypeError(shape)


def _counts_by_sample(shape, h, w) -> np.ndarray:
    out = np.zeros((h, w), np.int64)
    for i in range(h):
        for j in range(w):
            out[i, j] = sum(_inside_by_sample(shape, (SAMPLES * j + kx) * 2 + 1, (SAMPLES * i + ky) * 2 + 1)
                            for ky in range(SAMPLES) for kx in range(SAMPLES))
    return out


def _random_shapes(seed: int):
    rnd = random.Random(seed)
    u = lambda lo, hi: rnd.uniform(lo, hi)  # noqa: E731
    angles = sorted(u(0, 2 * math.pi) for _ in range(5))
    c, rad = (u(4, 6), u(4, 6)), u(2, 3.5)
    yield polygon([(c[0] + rad * math.cos(a), c[1] + rad * math.sin(a)) for a in angles])
    yield ellipse((u(3, 7), u(3, 7)), u(0.5, 3), u(0.5, 3))
    yield line((u(1, 9), u(1, 9)), (u(1, 9), u(1, 9)), u(0.3, 3))
    yield Stroke((fixed(u(2, 8)), fixed(u(2, 8))), (fixed(u(2, 8)), fixed(u(2, 8))), fixed(u(0.5, 2)) * 3, 4, 3)
    yield Union((line((2, 2), (8, 7), 1.5), disc((6, 3), 1.7)))


@pytest.mark.parametrize("seed", [0, 1])
def test_spans_agree_with_the_inequalities_sample_by_sample(seed):
    for shape in _random_shapes(seed):
        np.testing.assert_array_equal(counts(shape, 10, 10), _counts_by_sample(shape, 10, 10), err_msg=repr(shape))


def test_shapes_on_sample_lines_include_their_boundary_symmetrically():
    # Vertices on sample positions (odd units): a closed set, so mirrored geometry gives mirrored coverage.
    x0, x1 = 3 * UNITS + 1, 9 * UNITS - 1
    got = counts(Polygon(((x0, x0), (x1, x0), (x1, x1), (x0, x1))), 12, 12)
    np.testing.assert_array_equal(got, got[::-1, ::-1])
    np.testing.assert_array_equal(got, got.T)
    d = counts(disc((6, 6), 4.25), 12, 12)
    np.testing.assert_array_equal(d, d[:, ::-1])
    np.testing.assert_array_equal(d, d[::-1])


def test_union_counts_overlaps_once():
    a = polygon([(5, 5), (30, 5), (30, 30), (5, 30)])
    np.testing.assert_array_equal(counts(Union((a, a, a))), counts(a))
    shaft, head = [(5, 20), (30, 20), (30, 30), (5, 30)], [(30, 10), (45, 25), (30, 40)]
    block = [(20, 20), (40, 20), (40, 30), (20, 30)]              # whole pixels, overlapping both
    np.testing.assert_array_equal(counts(polygons(shaft, head, block)),
                                  np.maximum(counts(polygons(shaft, head)), counts(polygon(block))))


def test_non_convex_polygon_is_refused():
    with pytest.raises(ValueError, match="convex"):
        polygon([(0, 0), (10, 0), (5, 2), (10, 10), (0, 10)])
    star = [(10 + 8 * math.cos(math.radians(90 + 144 * k)), 10 + 8 * math.sin(math.radians(90 + 144 * k)))
            for k in range(5)]                                    # every corner turns the same way, twice around
    with pytest.raises(ValueError, match="convex"):
        polygon(star)


def test_paint_composites_in_integers():
    img = np.zeros((4, 4, 3), np.uint8)
    img[..., 1] = 100
    paint(img, polygon([(0, 0), (1.5, 0), (1.5, 4), (0, 4)]), (255, 0, 10))
    assert img[0, 0].tolist() == [255, 0, 10]
    # Half covered: (128·fg + 128·bg + 128) // 256 per channel.
    assert img[0, 1].tolist() == [(128 * 255 + 128) // 256, (128 * 100 + 128) // 256, (128 * 10 + 128) // 256]
    assert img[0, 2].tolist() == [0, 100, 0]
    grey = np.zeros((4, 4), np.uint8)
    paint(grey, disc((2, 2), 10), 200)
    assert (grey == 200).all()


def test_mask_holds_pixels_at_least_half_covered():
    m = mask(polygon([(0, 0), (2.5, 0), (2.5, 3.4), (0, 3.4)]), 5, 5)      # column 2 half, row 3 less
    assert m[:3, :3].all() and not m[3:].any() and not m[:, 3:].any()


def test_shapes_off_the_image_draw_nothing():
    img = np.zeros((8, 8), np.uint8)
    paint(img, disc((-20, -20), 5), 255)
    paint(img, polygon([(9, 9), (12, 9), (12, 12)]), 255)
    assert not img.any()


def test_integer_square_root_is_exact_near_float_trouble():
    n = np.array([0, 1, 2, 3, 4, 15, 16, 17, (2 ** 26 + 1) ** 2 - 1, (2 ** 26 + 1) ** 2, 2 ** 62 - 1], np.int64)
    np.testing.assert_array_equal(isqrt(n), [math.isqrt(int(v)) for v in n])
