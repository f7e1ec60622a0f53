"""Exact rasterisation of the signs' vector artwork: the same texels on every machine.

No library draws here. Every shape is rounded once to integer fixed point (``1/UNITS`` px, with
Python's ``round``), then each pixel is sampled on a ``SAMPLES``×``SAMPLES`` grid and every sample
is tested with integer arithmetic only (int64 cross products, squared distances, integer square
roots), so the coverage of a pixel is an exact count in ``[0, SAMPLES²]`` that no OpenCV, Pillow or
numpy version can change. Shapes are composited in integer arithmetic too.

Coordinates are pixels with x to the right and y down; pixel ``(i, j)`` covers ``[j, j + 1] ×
[i, i + 1]``, so a texture ``W`` px wide spans exactly ``[0, W]`` (as ``grid_sample`` reads it with
``align_corners=False``). Sample ``k`` of a row or column sits at ``(2k + 1)`` units, i.e. at
``(k + 0.5) / SAMPLES`` px: no sample lies on a pixel's edge. A sample on a shape's boundary is
inside it (every shape is a closed set), so mirrored geometry gives mirrored coverage.

Each shape answers one question, :meth:`spans`: for sample rows at heights ``Y`` (units), the first
and last sample columns inside it (``lo > hi`` where the row misses it). Convex shapes give one span
a row; a :class:`Union` (a legend, an arrow) is the union of its parts' spans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

SAMPLES = 16                  # samples per pixel side: coverage counts out of SAMPLES²
UNITS = 2 * SAMPLES           # fixed point, units per pixel: sample k sits at 2k + 1 units
FULL = SAMPLES * SAMPLES
_ROWS_PER_CHUNK = 32          # pixel rows rasterised at once (bounds the sample bitmap's memory)

Point = tuple[float, float]


def fixed(v: float) -> int:
    """A coordinate or length in pixels, rounded to fixed point (units of ``1/UNITS`` px)."""
    return round(float(v) * UNITS)


def isqrt(n: np.ndarray) -> np.ndarray:
    """Floor of the square root of each non-negative int64, exactly (the float root only starts it)."""
    n = np.asarray(n, np.int64)
    q = np.floor(np.sqrt(n.astype(np.float64))).astype(np.int64)
    while True:                                        # one or two rounds fix the float's last bit
        up = (q + 1) * (q + 1) <= n
        down = q * q > n
        if not (up.any() or down.any()):
            return q
        q = q + up - down


def _at_most(alpha: int, beta: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Narrow the sample spans ``[lo, hi]`` to the samples ``k`` with ``alpha·X ≤ beta``, X = 2k + 1."""
    num = beta - alpha                                  # alpha·(2k + 1) ≤ beta  ⇔  2·alpha·k ≤ beta − alpha
    if alpha > 0:
        return lo, np.minimum(hi, num // (2 * alpha))
    if alpha < 0:
        return np.maximum(lo, -(num // (-2 * alpha))), hi
    return lo, np.where(beta >= 0, hi, np.minimum(hi, lo - 1))


def _within(alpha: int, beta: np.ndarray, lower: np.ndarray, upper: np.ndarray, lo, hi):
    """Narrow the spans to ``lower ≤ alpha·X + beta ≤ upper``."""
    lo, hi = _at_most(alpha, upper - beta, lo, hi)
    return _at_most(-alpha, beta - lower, lo, hi)


def _open(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    big = np.int64(1) << 40
    return np.full(rows.shape, -big, np.int64), np.full(rows.shape, big, np.int64)


class Shape:
    """A closed plane set in fixed-point pixel units."""

    def spans(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First and last sample columns inside, for sample rows at heights ``y`` (int64 units)."""
        raise NotImplementedError

    def bounds(self) -> tuple[int, int, int, int]:
        """``(x0, y0, x1, y1)`` in units: nothing of the shape lies outside."""
        raise NotImplementedError

    @property
    def parts(self) -> tuple["Shape", ...]:
        return (self,)


@dataclass(frozen=True)
class Polygon(Shape):
    """A convex polygon (either winding) with integer vertices in units."""

    points: tuple[tuple[int, int], ...]

    def __post_init__(self):
        p = self.points
        if len(p) < 3:
            raise ValueError(f"a polygon needs 3 or more vertices, got {len(p)}")
        turns = {_sign(_cross(p[i], p[(i + 1) % len(p)], p[(i + 2) % len(p)])) for i in range(len(p))} - {0}
        downs = [_sign(b[1] - a[1]) for a, b in zip(p, p[1:] + p[:1]) if b[1] != a[1]]
        if len(turns) > 1 or sum(a != b for a, b in zip(downs, downs[1:] + downs[:1])) > 2:  # once around
            raise ValueError("the polygon is not convex; draw it as a Union of convex polygons")

    def bounds(self):
        xs, ys = [q[0] for q in self.points], [q[1] for q in self.points]
        return min(xs), min(ys), max(xs), max(ys)

    def spans(self, y):
        p, n = self.points, len(self.points)
        s = 1 if sum(_cross((0, 0), p[i], p[(i + 1) % n]) for i in range(n)) >= 0 else -1
        lo, hi = _open(y)
        for (ax, ay), (bx, by) in zip(p, p[1:] + p[:1]):
            dx, dy = bx - ax, by - ay               # inside: s·(dx·(Y − ay) − dy·(X − ax)) ≥ 0
            lo, hi = _at_most(s * dy, s * (dx * (y - ay) + dy * ax), lo, hi)
        return lo, hi


@dataclass(frozen=True)
class Ellipse(Shape):
    """An axis-aligned filled ellipse (a disc when ``rx == ry``); centre and radii in units."""

    cx: int
    cy: int
    rx: int
    ry: int

    def bounds(self):
        return self.cx - self.rx, self.cy - self.ry, self.cx + self.rx, self.cy + self.ry

    def __post_init__(self):
        if self.rx <= 0 or self.ry <= 0:
            raise ValueError(f"an ellipse needs positive radii, got {self.rx} and {self.ry} units")

    def spans(self, y):
        # ry²·(X − cx)² + rx²·(Y − cy)² ≤ rx²·ry²: a pen (rx, ry) of radius rx·ry.
        return _pen_spans(self.cx, self.cy, self.rx * self.ry, self.rx, self.ry, y)


@dataclass(frozen=True)
class Stroke(Shape):
    """A straight stroke from ``a`` to ``b`` drawn with an elliptical pen: a capsule.

    The pen is the ellipse ``(ay·X)² + (ax·Y)² ≤ r²`` (units): half-widths ``r/ay`` across x and
    ``r/ax`` across y, so a pen with ``(ax, ay) = (4, 3)`` lays vertical stems 4/3 as wide as
    horizontal bars; ``(1, 1)`` is a round pen of radius ``r``. A point is inside when the pen,
    moved somewhere along the segment, covers it.
    """

    a: tuple[int, int]
    b: tuple[int, int]
    r: int
    ax: int = 1
    ay: int = 1

    def bounds(self):
        hx, hy = -(-self.r // self.ay), -(-self.r // self.ax)
        return (min(self.a[0], self.b[0]) - hx, min(self.a[1], self.b[1]) - hy,
                max(self.a[0], self.b[0]) + hx, max(self.a[1], self.b[1]) + hy)

    def spans(self, y):
        (x0, y0), (x1, y1), r, ax, ay = self.a, self.b, self.r, self.ax, self.ay
        lo, hi = _pen_spans(x0, y0, r, ax, ay, y)
        lo1, hi1 = _pen_spans(x1, y1, r, ax, ay, y)
        dx, dy = x1 - x0, y1 - y0
        length2 = ay * ay * dx * dx + ax * ax * dy * dy
        if length2 > 0:
            # In the pen's round frame (ay·X, ax·Y): 0 ≤ t ≤ |d|² along the segment, c² ≤ r²|d|² across.
            slo, shi = _open(y)
            slo, shi = _within(ay * ay * dx, ax * ax * dy * (y - y0) - ay * ay * dx * x0,
                               np.int64(0), np.int64(length2), slo, shi)
            across = int(isqrt(np.int64(r * r * length2))) // (ax * ay)
            slo, shi = _within(-dy, dx * (y - y0) + dy * x0, np.int64(-across), np.int64(across), slo, shi)
            lo, hi = _hull(lo, hi, slo, shi)
        return _hull(lo, hi, lo1, hi1)


def _pen_spans(cx, cy, r, ax, ay, y):
    """The pen's ellipse ``(ay·(X − cx))² + (ax·(Y − cy))² ≤ r²`` on each row."""
    room = r * r - (ax * (y - cy)) ** 2
    half = isqrt(np.maximum(room, 0)) // ay
    lo, hi = _within(1, np.zeros_like(y), cx - half, cx + half, *_open(y))
    return lo, np.where(room >= 0, hi, lo - 1)


def _hull(lo0, hi0, lo1, hi1):
    """The span covering two spans of one convex set (either may be empty)."""
    e0, e1 = lo0 > hi0, lo1 > hi1
    lo = np.where(e0, lo1, np.where(e1, lo0, np.minimum(lo0, lo1)))
    hi = np.where(e0, hi1, np.where(e1, hi0, np.maximum(hi0, hi1)))
    return lo, hi


@dataclass(frozen=True)
class Union(Shape):
    """Several shapes drawn as one: a sample is inside when any part holds it (overlaps count once)."""

    members: tuple[Shape, ...]

    @property
    def parts(self):
        return tuple(p for m in self.members for p in m.parts)

    def bounds(self):
        b = [p.bounds() for p in self.parts]
        return min(q[0] for q in b), min(q[1] for q in b), max(q[2] for q in b), max(q[3] for q in b)

    def spans(self, y):
        raise TypeError("a Union has one span per part and row; rasterise it with coverage()")


def _cross(o, a, b) -> int:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _sign(v: int) -> int:
    return (v > 0) - (v < 0)


# -- building shapes from pixel coordinates (floats), rounded once -----------------------------------

def polygon(points_px: Iterable[Point]) -> Polygon:
    return Polygon(tuple((fixed(x), fixed(y)) for x, y in points_px))


def polygons(*pieces: Iterable[Point]) -> Union:
    """A non-convex outline, given as the convex pieces it is made of."""
    return Union(tuple(polygon(p) for p in pieces))


def ellipse(centre_px: Point, rx_px: float, ry_px: float) -> Ellipse:
    return Ellipse(fixed(centre_px[0]), fixed(centre_px[1]), fixed(rx_px), fixed(ry_px))


def disc(centre_px: Point, radius_px: float) -> Ellipse:
    return ellipse(centre_px, radius_px, radius_px)


def line(a_px: Point, b_px: Point, width_px: float) -> Stroke:
    """A stroke of constant width with round ends."""
    return Stroke((fixed(a_px[0]), fixed(a_px[1])), (fixed(b_px[0]), fixed(b_px[1])), fixed(width_px / 2))


def polyline(points_px: Sequence[Point], width_px: float, closed: bool = False) -> Union:
    """Round-joined, round-ended strokes through ``points_px``."""
    pts = list(points_px) + (list(points_px[:1]) if closed else [])
    return Union(tuple(line(a, b, width_px) for a, b in zip(pts, pts[1:])))


# -- coverage and compositing ----------------------------------------------------------------------

def coverage(shape: Shape, height: int, width: int) -> tuple[int, int, np.ndarray]:
    """How many of each pixel's ``SAMPLES²`` samples ``shape`` holds, over its box clipped to the image.

    Returns:
        (row, col, counts): the box's top-left pixel and its h×w int32 counts in ``[0, FULL]``.
    """
    bx0, by0, bx1, by1 = shape.bounds()
    c0, r0 = max(0, bx0 // UNITS), max(0, by0 // UNITS)
    c1, r1 = min(width, bx1 // UNITS + 1), min(height, by1 // UNITS + 1)
    if c1 <= c0 or r1 <= r0:
        return 0, 0, np.zeros((0, 0), np.int32)
    counts = np.empty((r1 - r0, c1 - c0), np.int32)
    k0, k1 = c0 * SAMPLES, c1 * SAMPLES                  # sample columns of the box
    parts = shape.parts
    for top in range(r0, r1, _ROWS_PER_CHUNK):
        bottom = min(r1, top + _ROWS_PER_CHUNK)
        rows = np.arange(top * SAMPLES, bottom * SAMPLES, dtype=np.int64)
        counts[top - r0:bottom - r0] = (_count_span if len(parts) == 1 else _count_union)(
            parts, 2 * rows + 1, k0, k1).reshape(bottom - top, SAMPLES, c1 - c0).sum(1)
    return r0, c0, counts


def _count_span(parts, y, k0, k1):
    """Per sample row and pixel column, the samples inside one convex shape (one span a row)."""
    lo, hi = parts[0].spans(y)
    first = np.arange(k0, k1, SAMPLES, dtype=np.int64)            # each pixel's first sample column
    n = np.minimum(hi[:, None], first + SAMPLES - 1) - np.maximum(lo[:, None], first) + 1
    return np.maximum(n, 0).astype(np.int32)


def _count_union(parts, y, k0, k1):
    """Per sample row and pixel column, the samples inside any of ``parts`` (a sample bitmap)."""
    edges = np.zeros((len(y), k1 - k0 + 1), np.int16)        # +1 where a span opens, −1 past its end
    at = np.arange(len(y))
    for part in parts:
        lo, hi = part.spans(y)
        lo, hi = np.maximum(lo, k0), np.minimum(hi, k1 - 1)
        hit = lo <= hi
        edges[at[hit], lo[hit] - k0] += 1
        edges[at[hit], hi[hit] + 1 - k0] -= 1
    inside = np.cumsum(edges[:, :-1], axis=1, dtype=np.int16) > 0
    return inside.reshape(len(y), (k1 - k0) // SAMPLES, SAMPLES).sum(2, dtype=np.int32)


def paint(img: np.ndarray, shape: Shape, colour) -> None:
    """Composite ``shape`` in ``colour`` onto ``img`` (H×W×C or H×W uint8) in place, in integers:
    ``(n·colour + (FULL − n)·below + FULL/2) // FULL`` for a pixel with ``n`` samples covered."""
    r, c, n = coverage(shape, img.shape[0], img.shape[1])
    if n.size == 0:
        return
    below = img[r:r + n.shape[0], c:c + n.shape[1]]
    if img.ndim == 3:
        n = n[..., None]
    fg = np.asarray(colour, np.int32)
    img[r:r + n.shape[0], c:c + n.shape[1]] = (n * fg + (FULL - n) * below.astype(np.int32) + FULL // 2) // FULL


def mask(shape: Shape, height: int, width: int) -> np.ndarray:
    """H×W bool: the pixels whose samples are at least half inside ``shape``."""
    out = np.zeros((height, width), bool)
    r, c, n = coverage(shape, height, width)
    out[r:r + n.shape[0], c:c + n.shape[1]] = 2 * n >= FULL
    return out
