"""The signs' own stroke font: bold sans-serif capitals drawn with an elliptical pen.

Each glyph is a few polylines (straight runs and elliptical corners) through its skeleton box:
``y`` from 0 (the skeleton's foot) to 1 (its top), ``x`` from 0 to the glyph's width, both in
skeleton heights; round letters overshoot the box a little, as printed letters do. A legend strokes
these lines with a pen whose stems are 4/3 as wide as its bars (:data:`PEN`), so that the ink of a
flat capital is exactly ``cap_px`` tall.

The letters cover the bundled signs' legends (A D E I L M N O P R S T W Y, 4 5 and space). Their
proportions, weight and spacing follow the legends the scenes were first drawn with (a bold,
slightly square sans), so that the renders stay what the bundled victims were trained on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from physattack.scene.vector import Stroke, Union, fixed

Point = tuple[float, float]

BOLD = 0.317                   # stem width / cap height of the signs' legends
REGULAR = 0.232                # of the speed limit's numerals
PEN = (4, 3)                   # (ax, ay): the pen's half-widths across x and y are in the ratio ax : ay
SPACE = 0.30                   # a word space widens the gap by this much, in cap heights
_STEP_DEG = 7.5                # corners are traced in steps of at most this angle


@dataclass(frozen=True)
class Glyph:
    """One letter: its skeleton width (skeleton heights), its polylines in the skeleton box, and the
    room it wants on its left and right between its ink and a neighbour's (cap heights)."""

    width: float
    strokes: tuple[tuple[Point, ...], ...]
    left: float
    right: float

    def __post_init__(self):
        xs = [x for s in self.strokes for x, _ in s]
        if xs and (min(xs) != 0 or not math.isclose(max(xs), self.width)):
            raise ValueError(f"a glyph's skeleton must span x from 0 to its width {self.width}")


def _arc(cx: float, cy: float, rx: float, ry: float, a0: float, a1: float) -> list[Point]:
    """The elliptical arc from angle ``a0`` to ``a1`` (degrees, counter-clockwise, y up), ends included."""
    n = max(1, math.ceil(abs(a1 - a0) / _STEP_DEG))
    out = []
    for i in range(n + 1):
        a = math.radians(a0 + (a1 - a0) * i / n)
        out.append((cx + rx * math.cos(a), cy + ry * math.sin(a)))
    return out


def _path(*items: Point | list[Point]) -> tuple[Point, ...]:
    """A polyline from points and arcs, with repeated points dropped."""
    out: list[Point] = []
    for item in items:
        for p in (item if isinstance(item, list) else [item]):
            if not out or (abs(p[0] - out[-1][0]) > 1e-12 or abs(p[1] - out[-1][1]) > 1e-12):
                out.append(p)
    return tuple(out)


def _glyph(width: float, room: tuple[float, float], *strokes: tuple[Point, ...]) -> Glyph:
    # Arcs land on the box's edges up to a rounding error; snap them so that the box is exact.
    snap = lambda v, edge: edge if abs(v - edge) < 1e-9 else v  # noqa: E731
    return Glyph(width, tuple(tuple((snap(snap(x, 0.0), width), y) for x, y in s) for s in strokes), *room)


def _round_box(w: float, lo: float, hi: float, rx: float, ry: float) -> tuple[Point, ...]:
    """A closed rounded rectangle ``[0, w] × [lo, hi]``, traced counter-clockwise from its left side."""
    return _path((0.0, lo + ry), (0.0, hi - ry), _arc(rx, hi - ry, rx, ry, 180, 90),
                 _arc(w - rx, hi - ry, rx, ry, 90, 0), _arc(w - rx, lo + ry, rx, ry, 0, -90),
                 _arc(rx, lo + ry, rx, ry, -90, -180))


def _bowl(w: float, foot: float, r: float) -> tuple[Point, ...]:
    """The stem-side bowl of P and R: from the top left round to the bar at height ``foot``."""
    return _path((0.0, 0.0), (0.0, 1.0), _arc(w - r, 1.0 - r, r, r, 90, 0),
                 _arc(w - r, foot + r, r, r, 0, -90), (0.0, foot))


_OVER = 0.02                   # overshoot of round letters, in skeleton heights

# Room beside a letter's ink by the shape of its side (cap heights), and pairs that tuck together.
STEM, ARM, ARM_LOW, BOWL, ROUND, ROUND_S, BAR, DIAG, DIAG_Y, FIG = (
    0.08, 0.06, 0.03, 0.045, 0.054, 0.04, 0.015, 0.02, 0.024, 0.05)
KERN = {("W", "A"): -0.035, ("A", "Y"): -0.14, ("P", "A"): -0.10}


def _letters() -> dict[str, Glyph]:
    """The glyphs, each ``_glyph(width, (left room, right room), *polylines)``."""
    g: dict[str, Glyph] = {}
    w = 0.946                                          # flat apex, crossbar low enough to leave a counter
    g["A"] = _glyph(w, (DIAG, DIAG), ((0.0, 0.0), (0.37, 1.0), (w - 0.37, 1.0), (w, 0.0)),
                    ((0.11, 0.27), (w - 0.11, 0.27)))
    w, r = 0.757, 0.36
    g["D"] = _glyph(w, (STEM, ROUND), _path((0.0, 0.0), (0.0, 1.0), _arc(w - r, 1 - r, r, r, 90, 0),
                                            _arc(w - r, r, r, r, 0, -90), (0.0, 0.0)))
    w = 0.616
    g["E"] = _glyph(w, (STEM, ARM), ((w, 1.0), (0.0, 1.0), (0.0, 0.0), (w, 0.0)), ((0.0, 0.5), (0.88 * w, 0.5)))
    g["I"] = _glyph(0.0, (STEM, STEM), ((0.0, 0.0), (0.0, 1.0)))
    w = 0.586
    g["L"] = _glyph(w, (STEM, ARM_LOW), ((0.0, 1.0), (0.0, 0.0), (w, 0.0)))
    w = 0.928
    g["M"] = _glyph(w, (STEM, STEM), ((0.0, 0.0), (0.0, 1.0), (w / 2, 0.34), (w, 1.0), (w, 0.0)))
    w = 0.718
    g["N"] = _glyph(w, (STEM, STEM), ((0.0, 0.0), (0.0, 1.0), (w, 0.0), (w, 1.0)))
    w = 0.793                                          # a rounded box rather than an ellipse: the square sans
    g["O"] = _glyph(w, (ROUND, ROUND), _round_box(w, -_OVER, 1 + _OVER, 0.34, 0.36))
    w = 0.719
    g["P"] = _glyph(w, (STEM, BOWL), _bowl(w, 0.40, 0.27))
    w = 0.744
    g["R"] = _glyph(w, (STEM, DIAG), _bowl(w - 0.02, 0.42, 0.26), ((0.40, 0.42), (w, 0.0)))
    w, r, d = 0.769, 0.24, 0.03                        # the spine leans: d above the middle on the left
    g["S"] = _glyph(w, (ROUND_S, ROUND_S), _path(
        (w, 0.79), _arc(w - r, 1 + _OVER - r, r, r, 0, 90), _arc(r, 1 + _OVER - r, r, r, 90, 180),
        _arc(r, 0.5 + d + r, r, r, 180, 270), _arc(w - r, 0.5 - d - r, r, r, 90, 0),
        _arc(w - r, r - _OVER, r, r, 0, -90), _arc(r, r - _OVER, r, r, -90, -180), (0.0, 0.21)))
    w = 0.735
    g["T"] = _glyph(w, (BAR, BAR), ((0.0, 1.0), (w, 1.0)), ((w / 2, 1.0), (w / 2, 0.0)))
    w = 1.058
    g["W"] = _glyph(w, (DIAG, DIAG), ((0.0, 1.0), (0.24 * w, 0.0), (w / 2, 0.72), (0.76 * w, 0.0), (w, 1.0)))
    w = 0.853
    g["Y"] = _glyph(w, (DIAG_Y, DIAG_Y), ((0.0, 1.0), (w / 2, 0.45), (w, 1.0)), ((w / 2, 0.45), (w / 2, 0.0)))
    w = 0.768
    g["4"] = _glyph(w, (FIG, FIG), ((0.72 * w, 0.0), (0.72 * w, 1.0), (0.0, 0.28), (w, 0.28)))
    w, r = 0.684, 0.3
    g["5"] = _glyph(w, (FIG, FIG), _path((w, 1.0), (0.04, 1.0), (0.0, 0.56), _arc(w - r, 0.6 - r, r, r, 90, 0),
                                         _arc(w - r, r - _OVER, r, r, 0, -90), _arc(r, r - _OVER, r, r, -90, -150)))
    return g


GLYPHS: dict[str, Glyph] = _letters()


def legend(text: str, centre_px: Point, cap_px: float, width_px: float, weight: float = BOLD) -> Union:
    """``text`` laid out so that its ink spans ``width_px`` and its flat capitals ``cap_px``.

    The flat capitals' ink box is centred on ``centre_px``. Letters keep their height and stroke
    and are set apart by the room their sides want (:data:`KERN` tucks some pairs together); the
    line is then condensed or expanded across x (the skeleton and the gaps, never the pen) until its
    ink is exactly ``width_px`` wide, as a sign maker picks a narrower or wider series of the same
    letters to fit a legend.

    Args:
        text: capitals, digits and spaces that :data:`GLYPHS` holds.
        centre_px: (x, y) of the centre of the capitals' ink box, in pixels.
        cap_px: ink height of a flat capital (E, T), in pixels.
        width_px: ink width of the whole line, in pixels.
        weight: stem width / cap height.

    Returns:
        the legend as one shape, to paint with :func:`physattack.scene.vector.paint`.
    """
    missing = sorted(set(text) - set(GLYPHS) - {" "})
    if missing:
        raise ValueError(f"the stroke font has no glyph for {missing}; it holds {''.join(sorted(GLYPHS))}")
    letters = [GLYPHS[c] for c in text if c != " "]
    if not letters:
        raise ValueError("a legend needs at least one letter")
    ax, ay = PEN
    half_x = weight * cap_px / 2                      # the pen's half-widths, in pixels
    half_y = half_x * ay / ax
    skeleton = cap_px - 2 * half_y                    # pixels per skeleton height
    gaps = sum(_gap(c, text[i + 1:]) for i, c in enumerate(text))
    natural = sum(g.width for g in letters) * skeleton + gaps * cap_px
    # A lone I has nothing to stretch: its ink is its stem, whatever the width asked.
    squeeze = (width_px - 2 * half_x * len(letters)) / natural if natural > 0 else 1.0
    if squeeze <= 0:
        raise ValueError(f"{text!r} cannot be {width_px:.1f} px wide at a cap height of {cap_px:.1f} px")
    foot = centre_px[1] + cap_px / 2 - half_y         # skeleton y = 0, in pixels (y down)
    ink = natural * squeeze + 2 * half_x * len(letters)
    x = centre_px[0] - ink / 2 + half_x               # the next letter's skeleton x = 0
    r = fixed(half_x * ay)                            # the pen in Stroke's frame
    strokes = []
    for i, c in enumerate(text):
        if c == " ":
            continue
        glyph = GLYPHS[c]
        for line in glyph.strokes:
            pts = [(fixed(x + gx * skeleton * squeeze), fixed(foot - gy * skeleton)) for gx, gy in line]
            strokes += [Stroke(a, b, r, ax, ay) for a, b in zip(pts, pts[1:])]
        x += glyph.width * skeleton * squeeze + 2 * half_x + _gap(c, text[i + 1:]) * cap_px * squeeze
    return Union(tuple(strokes))


def _gap(letter: str, rest: str) -> float:
    """The ink-to-ink gap after ``letter`` when ``rest`` follows (cap heights): both letters' room,
    the pair's kerning, and a word space for each space between them."""
    word = rest.lstrip(" ")
    if letter == " " or not word:
        return 0.0
    nxt = word[0]
    return (GLYPHS[letter].right + GLYPHS[nxt].left + KERN.get((letter, nxt), 0.0)
            + SPACE * (len(rest) - len(word)))
