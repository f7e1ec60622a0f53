"""Paper pages at true physical size, drawn with matplotlib: one figure inch is one inch of paper.

Every page is a figure of the paper's size with one axes over all of it whose data units are
millimetres from the page's top-left corner (y down), so that whatever is drawn at (x, y) mm is
printed there. Images are embedded unsampled (``interpolation="none"``): one image pixel per texel,
which a printer enlarges without smoothing, so the PDF's pixels are the texture's texels.

Content larger than the paper is tiled: tiles overlap by ``overlap_mm``, each shows alignment marks in
its overlaps and a dashed line where to trim it, and the page's foot holds its label and a scale bar.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.backends.backend_pdf import PdfPages  # noqa: E402
from matplotlib.patches import Circle, Rectangle  # noqa: E402

from physattack.atomic import save_with  # noqa: E402
from physattack.errors import InputError  # noqa: E402

PAPERS_MM = {"a4": (210.0, 297.0), "letter": (215.9, 279.4), "a3": (297.0, 420.0), "tabloid": (279.4, 431.8)}
FOOT_MM = 14.0          # the strip at the page's foot: label, instructions, scale bar
RC = {"pdf.use14corefonts": True, "font.family": "sans-serif", "font.sans-serif": ["Helvetica"],
      "pdf.compression": 6, "figure.facecolor": "white", "savefig.facecolor": "white"}


def save_pdf(path: str | Path, title: str, draw_pages: Callable[[PdfPages], None]) -> int:
    """Write the pages ``draw_pages(pdf)`` adds to a ``PdfPages`` (with the pages' style) into one PDF,
    atomically (an interrupted export never leaves half a PDF); returns how many pages it has."""
    pages = 0

    def write(tmp: Path) -> None:
        nonlocal pages
        with plt.rc_context(RC), PdfPages(tmp, metadata={"Creator": "physattack", "Title": title}) as pdf:
            draw_pages(pdf)
            pages = pdf.get_pagecount()

    fonts = logging.getLogger("matplotlib.font_manager")
    level = fonts.level
    fonts.setLevel(logging.ERROR)          # "Helvetica ... now using medium": the PDF core font, as meant
    try:
        save_with(path, write)
    finally:
        fonts.setLevel(level)
    return pages


class PaperError(InputError):
    """A paper or layout that cannot hold the content; the message says what to do."""


@dataclass(frozen=True)
class Tile:
    """One page of a tiled layout: the content window [x0, x0+w) × [y0, y0+h) mm it shows, where
    that window sits on the page, and the page's size and place in the grid."""

    page_w_mm: float
    page_h_mm: float
    x0: float
    y0: float
    w: float
    h: float
    page_x: float
    page_y: float
    row: int
    col: int
    rows: int
    cols: int

    @property
    def label(self) -> str:
        return f"{chr(ord('A') + self.row)}{self.col + 1}" if self.rows * self.cols > 1 else "single page"


def tile_layout(content_w_mm: float, content_h_mm: float, paper: str = "a4", margin_mm: float = 10.0,
                overlap_mm: float = 10.0) -> list[Tile]:
    """Pages covering ``content_w_mm`` × ``content_h_mm`` at true scale.

    ``paper`` is a name in ``PAPERS_MM`` (portrait or landscape, whichever takes fewer pages) or
    ``fit``: one page of the content's size plus margins and the foot strip, for a large-format
    printer or a print shop.
    """
    if paper == "fit":
        pw, ph = content_w_mm + 2 * margin_mm, content_h_mm + 2 * margin_mm + FOOT_MM
        return [Tile(pw, ph, 0.0, 0.0, content_w_mm, content_h_mm, margin_mm, margin_mm, 0, 0, 1, 1)]
    if paper not in PAPERS_MM:
        raise PaperError(f"Unknown paper '{paper}'; use one of {', '.join(PAPERS_MM)} or fit (one page of the "
                         "content's size).")
    best = None
    for pw, ph in (PAPERS_MM[paper], PAPERS_MM[paper][::-1]):
        aw, ah = pw - 2 * margin_mm, ph - 2 * margin_mm - FOOT_MM
        if aw <= overlap_mm + 10 or ah <= overlap_mm + 10:
            raise PaperError(f"Margins of {margin_mm} mm and an overlap of {overlap_mm} mm leave no room on "
                             f"{paper}; make them smaller.")
        cols = 1 if content_w_mm <= aw else math.ceil((content_w_mm - overlap_mm) / (aw - overlap_mm))
        rows = 1 if content_h_mm <= ah else math.ceil((content_h_mm - overlap_mm) / (ah - overlap_mm))
        if best is None or rows * cols < best[0]:
            best = (rows * cols, pw, ph, aw, ah, rows, cols)
    _, pw, ph, aw, ah, rows, cols = best
    tiles = []
    for r in range(rows):
        for c in range(cols):
            x0, y0 = c * (aw - overlap_mm), r * (ah - overlap_mm)
            w, h = min(aw, content_w_mm - x0), min(ah, content_h_mm - y0)
            tiles.append(Tile(pw, ph, x0, y0, w, h, margin_mm, margin_mm, r, c, rows, cols))
    return tiles


class PageCanvas:
    """One page: draw in content millimetres (``content_*``) or page millimetres (``page_*``)."""

    def __init__(self, tile: Tile):
        self.tile = tile
        self.fig = plt.figure(figsize=(tile.page_w_mm / 25.4, tile.page_h_mm / 25.4))
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, tile.page_w_mm)
        self.ax.set_ylim(tile.page_h_mm, 0)
        self.ax.set_axis_off()
        self.window = Rectangle((tile.page_x, tile.page_y), tile.w, tile.h, transform=self.ax.transData)

    def to_page(self, x: float, y: float) -> tuple[float, float]:
        """Content mm -> page mm."""
        return x - self.tile.x0 + self.tile.page_x, y - self.tile.y0 + self.tile.page_y

    def visible(self, x: float, y: float, pad: float = 0.0) -> bool:
        t = self.tile
        return t.x0 - pad <= x <= t.x0 + t.w + pad and t.y0 - pad <= y <= t.y0 + t.h + pad

    def image(self, rgba: np.ndarray, x0: float, y0: float, w: float, h: float, alpha: float = 1.0) -> None:
        """An H×W×3|4 uint8 image covering content [x0, x0+w] × [y0, y0+h] mm, one pixel per image pixel."""
        px0, py0 = self.to_page(x0, y0)
        im = self.ax.imshow(rgba, extent=(px0, px0 + w, py0 + h, py0), interpolation="none", alpha=alpha,
                            zorder=1)
        im.set_clip_path(self.window)
        self.ax.set_xlim(0, self.tile.page_w_mm)
        self.ax.set_ylim(self.tile.page_h_mm, 0)

    def polyline(self, xy_mm: np.ndarray, closed: bool = True, clip: bool = True, **style) -> None:
        """A line through content points (N×2 mm)."""
        pts = np.asarray(xy_mm, dtype=float)
        if closed:
            pts = np.vstack([pts, pts[:1]])
        page = pts - [self.tile.x0, self.tile.y0] + [self.tile.page_x, self.tile.page_y]
        (line,) = self.ax.plot(page[:, 0], page[:, 1], zorder=3, **{"lw": 0.5, "color": "black", **style})
        if clip:
            line.set_clip_path(self.window)

    def content_text(self, x: float, y: float, text: str, **style) -> None:
        if self.visible(x, y):
            px, py = self.to_page(x, y)
            t = self.ax.text(px, py, text, zorder=4, **{"fontsize": 6, "ha": "center", "va": "center", **style})
            t.set_clip_path(self.window)

    def page_text(self, x: float, y: float, text: str, **style) -> None:
        self.ax.text(x, y, text, zorder=4, **{"fontsize": 6.5, "ha": "left", "va": "top", **style})

    def crop_marks(self, x0: float, y0: float, x1: float, y1: float, gap: float = 2.0, length: float = 6.0) -> None:
        """L-shaped marks just outside each corner of content box [x0, x1] × [y0, y1] that lies on this page."""
        for cx, sx in ((x0, -1), (x1, 1)):
            for cy, sy in ((y0, -1), (y1, 1)):
                if not self.visible(cx, cy, pad=0.01):
                    continue
                px, py = self.to_page(cx, cy)
                kw = {"lw": 0.3, "color": "black", "zorder": 5, "solid_capstyle": "butt"}
                self.ax.plot([px + sx * gap, px + sx * (gap + length)], [py, py], **kw)
                self.ax.plot([px, px], [py + sy * gap, py + sy * (gap + length)], **kw)

    def alignment_marks(self, overlap_mm: float, every_mm: float = 60.0) -> None:
        """Registration marks in the overlaps with the neighbouring tiles, and a dashed trim line.

        A mark sits at fixed content coordinates in the middle of an overlap band, so that both tiles
        print it at the same place on the object: trim one tile at its dashed line and lay it over the
        other until the marks coincide.
        """
        t, overlap = self.tile, overlap_mm
        if overlap <= 0:
            return
        bands = []
        if t.col > 0:
            bands.append(("v", t.x0 + overlap / 2, t.x0 + overlap))        # left band, trim at its far edge
        if t.col < t.cols - 1:
            bands.append(("v", t.x0 + t.w - overlap / 2, None))
        if t.row > 0:
            bands.append(("h", t.y0 + overlap / 2, t.y0 + overlap))
        if t.row < t.rows - 1:
            bands.append(("h", t.y0 + t.h - overlap / 2, None))
        for kind, centre, trim in bands:
            span = (t.y0, t.y0 + t.h) if kind == "v" else (t.x0, t.x0 + t.w)
            first = math.ceil((span[0] + overlap) / every_mm) * every_mm
            for s in np.arange(first, span[1] - overlap + 1e-6, every_mm):
                x, y = (centre, s) if kind == "v" else (s, centre)
                self._registration(*self.to_page(x, y))
            if trim is not None:
                a, b = self.to_page(trim, t.y0) if kind == "v" else self.to_page(t.x0, trim)
                if kind == "v":
                    self.ax.plot([a, a], [b, b + t.h], lw=0.3, color="0.35", ls=(0, (2, 2)), zorder=5)
                else:
                    self.ax.plot([a, a + t.w], [b, b], lw=0.3, color="0.35", ls=(0, (2, 2)), zorder=5)

    def _registration(self, px: float, py: float, r: float = 2.0) -> None:
        kw = {"lw": 0.25, "color": "black", "zorder": 6}
        self.ax.plot([px - 1.6 * r, px + 1.6 * r], [py, py], **kw)
        self.ax.plot([px, px], [py - 1.6 * r, py + 1.6 * r], **kw)
        self.ax.add_patch(Circle((px, py), r, fill=False, **kw))

    def foot(self, title: str, detail: str = "", scale_mm: float | None = None) -> None:
        """The foot strip: a title, a detail line, and a scale bar to check the print with a ruler."""
        t = self.tile
        y = t.page_h_mm - t.page_y - FOOT_MM + 2.5
        label = title + (f"   [page {t.label} of {t.rows}x{t.cols}]" if t.rows * t.cols > 1 else "")
        self.page_text(t.page_x, y, label, fontsize=7, weight="bold")
        if detail:
            self.page_text(t.page_x, y + 3.3, detail, fontsize=5.5)
        avail = t.page_w_mm - 2 * t.page_x
        length = scale_mm or (100.0 if avail >= 170 else 50.0)
        x1 = t.page_x + avail
        x0 = x1 - length
        yb = y + 6.5
        kw = {"lw": 0.25, "color": "black", "zorder": 5}
        self.ax.add_patch(Rectangle((x0, yb), length, 1.0, facecolor="black", edgecolor="black", lw=0.2, zorder=5))
        for k in range(int(length // 10) + 1):
            tx = x0 + 10 * k
            self.ax.plot([tx, tx], [yb + 1.0, yb + (2.5 if k % 5 == 0 else 1.8)], **kw)
        self.page_text(x0, yb + 2.7, "0", fontsize=5, ha="center")
        self.page_text(x1, yb + 2.7, f"{length:g} mm", fontsize=5, ha="center")
        self.page_text(x0 - 3, yb + 2.7, "print at 100 % (actual size, no fit-to-page); check this bar with a ruler",
                       fontsize=5, ha="right")

    def close(self) -> None:
        plt.close(self.fig)
