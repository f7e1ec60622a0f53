"""Calibration: a printable colour chart with ArUco markers, and a colour model fitted to its photo.

``chart_layout`` places the chart's colour patches (the printer palette, a grey ramp and an RGB cube,
in a fixed shuffled order so that uneven light does not line up with colour) and four ArUco markers
at its corners; ``write_chart`` writes it as a true-scale PDF, a PNG and the layout as JSON.

``fit_photo`` finds the four markers in a photo of the printed chart, rectifies the chart with the
homography from their 16 corners, reads the middle of every patch, optionally white-balances so that
the paper reads as the paper white of the palette (which removes the photo's exposure and light
colour: the EOT sampler varies those), and fits a polynomial map in linear RGB from the colours sent
to the printer to the colours read: the colour model the attack uses with ``printer.model=<file>``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import kornia
import numpy as np
import torch

from physattack.atomic import save_text
from physattack.errors import InputError
from physattack.imageio import read_rgb
from physattack.printing.colour import ColourModel, polynomial_features, polynomial_terms
from physattack.printing.pages import PAPERS_MM

ARUCO_DICT = cv2.aruco.DICT_4X4_50
MARKER_IDS = (0, 1, 2, 3)                 # top-left, top-right, bottom-right, bottom-left
LAYOUT_FORMAT = "physattack-calibration-chart"


class CalibrationError(InputError):
    """A chart or photo that cannot be used; the message says what to do."""


@dataclass
class ChartLayout:
    """Where everything on the chart is, in millimetres from the page's top-left corner.

    ``markers``: id -> 4×2 corners (top-left, top-right, bottom-right, bottom-left, as ArUco reports
    them). ``patches``: one dict per colour patch with ``rgb`` (0-255 sent to the printer), ``box``
    (x0, y0, x1, y1 mm) and ``role`` (palette, grey, cube).
    """

    paper_mm: tuple[float, float]
    markers: dict[int, list[list[float]]]
    patches: list[dict]
    palette: list[list[int]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"format": LAYOUT_FORMAT, "version": 1, "paper_mm": list(self.paper_mm),
                "aruco_dictionary": "DICT_4X4_50", "markers": {str(k): v for k, v in self.markers.items()},
                "patches": self.patches, "palette": self.palette, "id": self.fingerprint()}

    def fingerprint(self) -> str:
        body = json.dumps([self.paper_mm, self.markers, self.patches], sort_keys=True, default=list)
        return hashlib.sha256(body.encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: dict, source: str = "the layout") -> "ChartLayout":
        if d.get("format") != LAYOUT_FORMAT:
            raise CalibrationError(f"{source} is not a physattack chart layout; give the .json that "
                                   "'python -m physattack.calibrate chart' wrote beside the chart.")
        return cls(tuple(d["paper_mm"]), {int(k): v for k, v in d["markers"].items()}, d["patches"],
                   d.get("palette", []))

    @classmethod
    def load(cls, path: str | Path) -> "ChartLayout":
        path = Path(path)
        if not path.is_file():
            raise CalibrationError(f"The chart layout {path} does not exist; give the .json written with the chart.")
        try:
            return cls.from_dict(json.loads(path.read_text()), str(path))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise CalibrationError(f"{path} is not a readable chart layout; give the .json written with the "
                                   "chart.") from None


def chart_colours(palette: np.ndarray, grey_steps: int = 11, cube_levels: int = 5) -> list[tuple[tuple[int, ...], str]]:
    """The chart's colours (0-255) with their role, duplicates removed: palette, greys, an RGB cube."""
    out, seen = [], set()

    def add(rgb, role):
        rgb = tuple(int(v) for v in rgb)
        if rgb not in seen:
            seen.add(rgb)
            out.append((rgb, role))

    for rgb in palette:
        add(rgb, "palette")
    for v in np.linspace(0, 255, grey_steps).round():
        add((v, v, v), "grey")
    levels = np.linspace(0, 255, cube_levels).round()
    for r in levels:
        for g in levels:
            for b in levels:
                add((r, g, b), "cube")
    return out


def chart_layout(palette: torch.Tensor | np.ndarray, paper: str = "a4", margin_mm: float = 8.0,
                 marker_mm: float = 24.0, gap_mm: float = 2.0, seed: int = 0) -> ChartLayout:
    """The chart on ``paper`` in landscape: markers in the corners, patches in a grid between them."""
    if paper not in PAPERS_MM:
        raise CalibrationError(f"Unknown paper '{paper}' for the chart; use one of {', '.join(PAPERS_MM)}.")
    pal = np.asarray(palette.cpu() if isinstance(palette, torch.Tensor) else palette, dtype=float)
    pal255 = (pal * 255).round().astype(int) if pal.max() <= 1.0 else pal.round().astype(int)
    h, w = sorted(PAPERS_MM[paper])
    s, m = marker_mm, margin_mm
    markers = {}
    for mid, (x, y) in zip(MARKER_IDS, [(m, m), (w - m - s, m), (w - m - s, h - m - s), (m, h - m - s)]):
        markers[mid] = [[x, y], [x + s, y], [x + s, y + s], [x, y + s]]
    colours = chart_colours(pal255)
    order = np.random.default_rng(seed).permutation(len(colours))
    x0, x1 = m + s + 4.0, w - m - s - 4.0
    y0, y1 = m, h - m - 12.0                       # the foot line under the grid holds the instructions
    cols = int(np.ceil(np.sqrt(len(colours) * (x1 - x0) / (y1 - y0))))
    rows = int(np.ceil(len(colours) / cols))
    pw, ph = (x1 - x0) / cols, (y1 - y0) / rows
    patches = []
    for slot, k in enumerate(order):
        r, c = divmod(slot, cols)
        rgb, role = colours[k]
        box = [x0 + c * pw + gap_mm / 2, y0 + r * ph + gap_mm / 2, x0 + (c + 1) * pw - gap_mm / 2,
               y0 + (r + 1) * ph - gap_mm / 2]
        patches.append({"rgb": list(rgb), "role": role, "box": [round(v, 3) for v in box]})
    return ChartLayout((w, h), markers, patches, pal255.tolist())


def _marker_bits(marker_id: int, side_px: int) -> np.ndarray:
    dictionary = cv2.aruco.getPredefinedDictionary(ARUCO_DICT)
    return cv2.aruco.generateImageMarker(dictionary, marker_id, side_px, borderBits=1)


def draw_chart(layout: ChartLayout, px_per_mm: float = 10.0) -> np.ndarray:
    """The chart as an H×W×3 uint8 RGB image at ``px_per_mm`` (paper white is 255)."""
    w, h = layout.paper_mm
    img = np.full((int(round(h * px_per_mm)), int(round(w * px_per_mm)), 3), 255, np.uint8)
    px = lambda v: int(round(v * px_per_mm))  # noqa: E731
    for p in layout.patches:
        x0, y0, x1, y1 = p["box"]
        img[px(y0):px(y1), px(x0):px(x1)] = p["rgb"]
    for mid, corners in layout.markers.items():
        (x0, y0), (x1, y1) = corners[0], corners[2]
        side = px(x1) - px(x0)
        img[px(y0):px(y0) + side, px(x0):px(x0) + side] = _marker_bits(mid, side)[..., None]
    return img


def write_chart(out: str | Path, layout: ChartLayout, dpi: float = 300.0) -> dict[str, Path]:
    """``<out>.pdf`` (true scale, vector patches), ``<out>.png`` (at ``dpi``, with DPI metadata) and
    ``<out>.json`` (the layout ``fit`` needs when the chart was not made from the default palette)."""
    from matplotlib.patches import Rectangle

    from physattack.printing.export import save_png
    from physattack.printing.pages import PageCanvas, Tile, save_pdf

    out = Path(out)
    paths = {k: out.with_name(out.name + "." + k) for k in ("pdf", "png", "json")}
    w, h = layout.paper_mm
    save_png(paths["png"], draw_chart(layout, dpi / 25.4), dpi)
    save_text(paths["json"], json.dumps(layout.to_dict(), indent=1) + "\n")

    def draw(pdf) -> None:
        canvas = PageCanvas(Tile(w, h, 0, 0, w, h, 0, 0, 0, 0, 1, 1))
        ax = canvas.ax
        for p in layout.patches:
            x0, y0, x1, y1 = p["box"]
            ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor=np.array(p["rgb"]) / 255, edgecolor="none"))
        for mid, corners in layout.markers.items():
            (x0, y0), (x1, y1) = corners[0], corners[2]
            bits = _marker_bits(mid, 6)                      # one pixel per module
            canvas.image(np.repeat(bits[..., None], 3, 2), x0, y0, x1 - x0, y1 - y0)
        foot = h - 8.0 - 9.0
        canvas.page_text(w / 2, foot, f"physattack colour calibration chart {layout.fingerprint()}: print at 100 % "
                         "(actual size) on the paper and printer of the attack, with colour management off",
                         fontsize=6.5, ha="center")
        canvas.page_text(w / 2, foot + 3.5, "photograph it flat, filling the frame, in even daylight without glare; "
                         "then: python -m physattack.calibrate fit photo.jpg", fontsize=6, ha="center")
        xs = w / 2 - 25
        ax.add_patch(Rectangle((xs, foot + 7.2), 50, 0.8, facecolor="black", edgecolor="none"))
        canvas.page_text(xs + 52, foot + 6.6, "50 mm", fontsize=5)
        pdf.savefig(canvas.fig)
        canvas.close()

    save_pdf(paths["pdf"], "physattack calibration chart", draw)
    return paths


# ----------------------------------------------------------------------------- reading a photo


@dataclass
class ChartReading:
    """What a photo of the chart says: each patch's mean and spread (sRGB, [0, 1]) and the rectified chart."""

    measured: np.ndarray            # N×3
    spread: np.ndarray              # N×3 standard deviation inside each patch
    rectified: np.ndarray           # H×W×3 uint8 at px_per_mm
    homography: np.ndarray          # photo pixels -> chart pixels
    px_per_mm: float


def detect_markers(photo_rgb: np.ndarray) -> dict[int, np.ndarray]:
    """ArUco markers in the photo: id -> 4×2 corner pixels (top-left, top-right, bottom-right, bottom-left)."""
    gray = cv2.cvtColor(photo_rgb, cv2.COLOR_RGB2GRAY)
    params = cv2.aruco.DetectorParameters()
    params.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_SUBPIX
    detector = cv2.aruco.ArucoDetector(cv2.aruco.getPredefinedDictionary(ARUCO_DICT), params)
    corners, ids, _ = detector.detectMarkers(gray)
    if ids is None:
        return {}
    return {int(i): c.reshape(4, 2) for i, c in zip(ids.flatten(), corners)}


def read_chart(photo_rgb: np.ndarray, layout: ChartLayout, px_per_mm: float = 5.0, inner: float = 0.5) -> ChartReading:
    """Find the chart by its four markers, rectify it and read the middle ``inner`` share of each patch."""
    found = detect_markers(photo_rgb)
    missing = [m for m in layout.markers if m not in found]
    if missing:
        raise CalibrationError(f"The photo shows chart markers {sorted(found) or 'none'} but not {missing}; "
                               "photograph the whole chart with all four corner markers visible and sharp.")
    src = np.concatenate([found[m] for m in layout.markers]).astype(np.float64)
    dst = np.concatenate([np.asarray(layout.markers[m]) for m in layout.markers]) * px_per_mm
    homography, _ = cv2.findHomography(src, dst, 0)
    if homography is None:
        raise CalibrationError("The chart's markers do not define a plane (are two of them the same?); "
                               "photograph the chart flat and whole.")
    w, h = layout.paper_mm
    size = (int(round(w * px_per_mm)), int(round(h * px_per_mm)))
    rectified = cv2.warpPerspective(photo_rgb, homography, size, flags=cv2.INTER_LINEAR,
                                    borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0))
    img = rectified.astype(np.float64) / 255
    measured, spread = [], []
    for p in layout.patches:
        x0, y0, x1, y1 = p["box"]
        cx, cy, hw, hh = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) * inner / 2, (y1 - y0) * inner / 2
        region = img[int(round((cy - hh) * px_per_mm)):int(round((cy + hh) * px_per_mm)),
                     int(round((cx - hw) * px_per_mm)):int(round((cx + hw) * px_per_mm))].reshape(-1, 3)
        if len(region) == 0:
            raise CalibrationError("The chart's patches are too small at this resolution; use a larger px_per_mm.")
        lo, hi = np.percentile(region, [10, 90], axis=0)        # trimmed mean: dust, glints, JPEG ringing
        keep = np.all((region >= lo) & (region <= hi), axis=1)
        region = region[keep] if keep.sum() >= 4 else region
        measured.append(region.mean(0))
        spread.append(region.std(0))
    return ChartReading(np.array(measured), np.array(spread), rectified, homography, px_per_mm)


# ----------------------------------------------------------------------------- fitting


def srgb_to_linear(x: np.ndarray) -> np.ndarray:
    return kornia.color.rgb_to_linear_rgb(torch.as_tensor(x, dtype=torch.float64).T.unsqueeze(-1)).squeeze(-1).T.numpy()


def linear_to_srgb(x: np.ndarray) -> np.ndarray:
    return kornia.color.linear_rgb_to_rgb(torch.as_tensor(x, dtype=torch.float64).clamp(min=0).T.unsqueeze(-1)
                                          ).squeeze(-1).T.numpy()


def fit_colour_map(intended: np.ndarray, measured: np.ndarray, degree: int = 2, white_balance: bool = True,
                   paper_white: np.ndarray | None = None) -> tuple[ColourModel, dict]:
    """Fit the printer stage: a polynomial in linear RGB from ``intended`` to ``measured`` (N×3 sRGB in [0, 1]).

    With ``white_balance`` each measured channel is scaled so that the patch sent as white (the bare
    paper) reads as ``paper_white`` (sRGB; default: white). Returns the model and fit statistics
    (residuals in 1/255 sRGB units).
    """
    terms = polynomial_terms(degree)
    if len(intended) < 2 * len(terms):
        raise CalibrationError(f"{len(intended)} patches are too few for a degree-{degree} fit ({len(terms)} terms "
                               "per channel); use a lower degree or the full chart.")
    x_lin, y_lin = srgb_to_linear(intended), srgb_to_linear(measured)
    gain = np.ones(3)
    if white_balance:
        white = np.all(np.asarray(intended) >= 1 - 1e-6, axis=1)
        if not white.any():
            raise CalibrationError("The chart has no white patch to white-balance with; fit with white_balance=false.")
        target = srgb_to_linear(np.asarray(paper_white if paper_white is not None else (1.0, 1.0, 1.0))[None])[0]
        gain = target / np.maximum(y_lin[white].mean(0), 1e-6)
        y_lin = y_lin * gain
    phi = polynomial_features(torch.as_tensor(x_lin), degree).numpy()
    coeffs, *_ = np.linalg.lstsq(phi, y_lin, rcond=None)          # F×3
    predicted = linear_to_srgb(phi @ coeffs)
    target_srgb = linear_to_srgb(y_lin)
    residual = (predicted - target_srgb) * 255
    low, high = target_srgb.min(0), target_srgb.max(0)
    stats = {"patches": len(intended), "degree": degree, "white_balance": bool(white_balance),
             "white_balance_gain": gain.tolist(),
             "residual_mean_abs_255": np.abs(residual).mean(0).round(3).tolist(),
             "residual_max_abs_255": np.abs(residual).max(0).round(3).tolist()}
    model = ColourModel(coeffs.T, degree, low.tolist(), high.tolist(), info={"name": "fitted printer model"})
    return model, stats


def fit_photo(photo: str | Path, layout: ChartLayout, degree: int = 2, white_balance: bool = True,
              paper_white: np.ndarray | None = None, px_per_mm: float = 5.0) -> tuple[ColourModel, ChartReading, dict]:
    """``read_chart`` then ``fit_colour_map`` on a photo file; the model records where it came from."""
    photo = Path(photo)
    rgb = read_rgb(photo, "chart photo", error=CalibrationError)     # truncated or transparent: one sentence
    reading = read_chart(rgb, layout, px_per_mm)
    intended = np.array([p["rgb"] for p in layout.patches], dtype=float) / 255
    if paper_white is None and layout.palette:
        pal = np.asarray(layout.palette, dtype=float) / 255
        paper_white = pal[pal.sum(1).argmax()]            # the palette's lightest colour: paper white
    model, stats = fit_colour_map(intended, reading.measured, degree, white_balance, paper_white)
    model.info.update({
        "name": f"fitted from {photo.name}", "chart": layout.fingerprint(),
        "photo": {"file": str(photo), "sha256": hashlib.sha256(photo.read_bytes()).hexdigest()},
        "paper_white": None if paper_white is None else (np.asarray(paper_white) * 255).round(1).tolist(),
        "fit": stats,
        "patches": [{"sent": p["rgb"], "read": (m * 255).round(2).tolist(), "role": p["role"]}
                    for p, m in zip(layout.patches, reading.measured)],
    })
    return model, reading, stats


def annotate_reading(reading: ChartReading, layout: ChartLayout, inner: float = 0.5) -> np.ndarray:
    """The rectified chart with the region read in each patch outlined (to check the fit by eye)."""
    img = reading.rectified.copy()
    s = reading.px_per_mm
    for p in layout.patches:
        x0, y0, x1, y1 = p["box"]
        cx, cy, hw, hh = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) * inner / 2, (y1 - y0) * inner / 2
        cv2.rectangle(img, (int((cx - hw) * s), int((cy - hh) * s)), (int((cx + hw) * s), int((cy + hh) * s)),
                      (255, 0, 255), 1)
    return img


__all__ = ["CalibrationError", "ChartLayout", "ChartReading", "annotate_reading", "chart_colours", "chart_layout",
           "detect_markers", "draw_chart", "fit_colour_map", "fit_photo", "read_chart", "write_chart"]
