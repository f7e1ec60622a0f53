"""The export bundle: a patch on paper at true physical size.

From the attacked texture, the face and sticker masks and the scene's physical size it writes:

- ``sign.png``, ``patch.png``, ``stickers/sticker_NN.png``: RGBA at ``dpi`` with the DPI in the PNG's
  pHYs chunk (Pillow's ``dpi=``), so an image program prints them at true size (alpha: the face, the stickers, one sticker);
- ``sign.pdf``: the attacked face at true scale with crop marks, its outline and a scale bar, tiled
  over the paper with overlaps and alignment marks when larger than a page;
- ``stickers.pdf``: one cut sheet per sticker (a connected piece of the sticker mask) with bleed,
  a cut line, crop marks and where it goes; ``placement.pdf``: the whole face at true scale with each
  sticker's outline and number, and a table of their offsets from the face's edges in millimetres;
- ``manifest.json``: physical sizes, DPI, the texel-to-pixel mapping, palette, colour model, stickers
  and SHA-256 checksums of every file.

Exported pixels map back to texels exactly: a W-pixel-wide image of a texture Wt texels wide shows
at pixel x the texel ``floor((x + 0.5) · Wt / W)`` (nearest neighbour on pixel centres);
``texels_from_pixels`` inverts it. The PNG and PDF hold the colours to send to the printer; the
colour model, recorded in the manifest, says how the attack expected them to come out.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
from PIL import Image
from torch import Tensor

from physattack.atomic import save_json, save_with
from physattack.errors import InputError
from physattack.imageio import read_rgba
from physattack.printing.pages import FOOT_MM, PAPERS_MM, PageCanvas, Tile, save_pdf, tile_layout

if TYPE_CHECKING:
    from physattack.printing.colour import ColourModel

MM_PER_INCH = 25.4
MANIFEST_FORMAT = "physattack-export"
TEXEL_MAPPING = "pixel x of a W-pixel image of a Wt-texel texture shows texel floor((x + 0.5) * Wt / W); same for rows"


class ExportError(InputError):
    """An export that cannot be written as asked; the message says what to do."""


@dataclass
class ExportOptions:
    """How to put the patch on paper.

    Args:
        dpi: resolution of the PNGs (dots per inch).
        paper: ``a4``, ``letter``, ``a3``, ``tabloid`` (tiled when the content is larger) or ``fit``
            (one page of the content's size, for a large-format printer or a print shop).
        margin_mm: unprinted margin on every side of a page.
        overlap_mm: how much neighbouring tiles share, for gluing them with their alignment marks.
        bleed_mm: colour printed beyond each sticker's cut line, so a slightly-off cut shows no paper.
    """

    dpi: float = 300.0
    paper: str = "a4"
    margin_mm: float = 10.0
    overlap_mm: float = 10.0
    bleed_mm: float = 2.0

    def __post_init__(self) -> None:
        if not 10 <= self.dpi <= 2400:
            raise ExportError(f"export dpi must be between 10 and 2400, got {self.dpi}.")
        if self.margin_mm < 0 or self.overlap_mm < 0 or self.bleed_mm < 0:
            raise ExportError("export margin_mm, overlap_mm and bleed_mm must not be negative.")
        if self.paper != "fit" and self.paper not in PAPERS_MM:
            raise ExportError(f"Unknown paper '{self.paper}'; use one of {', '.join(PAPERS_MM)} or fit (one page the "
                              "size of the content).")


@dataclass(frozen=True)
class PrintArtwork:
    """What goes on paper: a texture and where on it the face and the stickers lie.

    Args:
        texture: 3×Ht×Wt attacked texture in [0, 1], the colours to send to the printer.
        face_mask: 1×Ht×Wt, the object's face in texture space.
        texture_size_m: physical (width, height) the texture spans.
        sticker_mask: 1×Ht×Wt for sticker patches (cut sheets and a placement template are written);
            None for paint, where the whole face is the print.
        base_texture: the clean texture, shown faintly on the placement template (None: ``texture``).
    """

    texture: Tensor
    face_mask: Tensor
    texture_size_m: tuple[float, float]
    sticker_mask: Tensor | None = None
    base_texture: Tensor | None = None


@dataclass(frozen=True)
class PrintColours:
    """The colours the attack assumed, recorded in the manifest.

    Args:
        palette: K×3 printer palette (the stickers' texels are counted against it).
        palette_constrained: whether the stickers were constrained to the palette.
        colour_model: the ``ColourModel`` the attack used.
    """

    palette: Tensor | None = None
    palette_constrained: bool = False
    colour_model: ColourModel | None = None


# ----------------------------------------------------------------------------- texels and pixels


def pixel_count(texels: int, mm_per_texel: float, dpi: float) -> int:
    """Pixels that span ``texels`` texels of ``mm_per_texel`` each at ``dpi``."""
    return max(1, int(round(texels * mm_per_texel * dpi / MM_PER_INCH)))


def texel_of_pixel(pixels: int, texels: int) -> np.ndarray:
    """For each of ``pixels`` pixels, the texel it shows: ``floor((x + 0.5) · texels / pixels)``."""
    return np.minimum(((np.arange(pixels) + 0.5) * texels / pixels).astype(np.int64), texels - 1)


def pixel_of_texel(texels: int, pixels: int) -> np.ndarray:
    """For each texel, a pixel that shows it (the one under the texel's centre)."""
    return np.minimum(((np.arange(texels) + 0.5) * pixels / texels).astype(np.int64), pixels - 1)


def texels_to_pixels(image: np.ndarray, height_px: int, width_px: int) -> np.ndarray:
    """Enlarge an H×W×C texel image to ``height_px`` × ``width_px`` pixels by the exported mapping.

    The mapping is monotonic, so it is a repeat of each texel row and column (fast, and the same as
    indexing with ``texel_of_pixel``); RGBA pixels move as one 32-bit word.
    """
    rows = np.bincount(texel_of_pixel(height_px, image.shape[0]), minlength=image.shape[0])
    cols = np.bincount(texel_of_pixel(width_px, image.shape[1]), minlength=image.shape[1])
    if image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 4:
        words = np.ascontiguousarray(image).view(np.uint32)[..., 0]
        return np.repeat(np.repeat(words, cols, 1), rows, 0).view(np.uint8).reshape(height_px, width_px, 4)
    return np.repeat(np.repeat(image, cols, 1), rows, 0)


def texels_from_pixels(image: np.ndarray, height_texels: int, width_texels: int) -> np.ndarray:
    """Inverse of ``texels_to_pixels``: the texel image back from an exported image."""
    return image[np.ix_(pixel_of_texel(height_texels, image.shape[0]), pixel_of_texel(width_texels, image.shape[1]))]


def to_uint8(colours: Tensor) -> np.ndarray:
    """3×H×W in [0, 1] -> H×W×3 uint8 (rounded)."""
    return (colours.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)


# ----------------------------------------------------------------------------- PNG with DPI


def save_png(path: str | Path, image: np.ndarray, dpi: float, height_px: int | None = None,
             width_px: int | None = None) -> Path:
    """Write an RGB(A) uint8 image as a PNG whose pHYs chunk says ``dpi``, atomically.

    With ``height_px`` and ``width_px``, ``image`` holds texels, enlarged by ``texels_to_pixels``.
    """
    if height_px is not None:
        image = texels_to_pixels(image, height_px, width_px)
    img = Image.fromarray(np.ascontiguousarray(image))          # H×W×3 -> RGB, H×W×4 -> RGBA
    return save_with(path, lambda p: img.save(p, format="PNG", dpi=(dpi, dpi)))


def read_png_dpi(path: str | Path) -> tuple[float, float] | None:
    """The (x, y) DPI a PNG's pHYs chunk states, or None when it states none."""
    with Image.open(path) as img:
        dpi = img.info.get("dpi")
    return (float(dpi[0]), float(dpi[1])) if dpi else None


def read_png_rgba(path: str | Path) -> np.ndarray:
    """H×W×4 uint8 RGBA (alpha 255 where the file has none); a truncated file is an ExportError."""
    return read_rgba(path, "exported image", error=ExportError)


# ----------------------------------------------------------------------------- stickers


@dataclass
class Sticker:
    """One connected piece of the sticker mask (4-connected: pieces touching at a corner are two).

    ``bbox`` is in texels (x0, y0, x1, y1), end-exclusive; offsets are from the face's bounding box.
    """

    number: int
    bbox: tuple[int, int, int, int]
    size_mm: tuple[float, float]
    offset_mm: dict[str, float]
    area_mm2: float
    mask: np.ndarray = field(repr=False)

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("mask")
        return d


def find_stickers(sticker_mask: np.ndarray, face_bbox: tuple[int, int, int, int],
                  mm_per_texel: tuple[float, float]) -> list[Sticker]:
    """The stickers of an H×W boolean mask, numbered top to bottom, then left to right."""
    n, labels, stats, _ = cv2.connectedComponentsWithStats(sticker_mask.astype(np.uint8), connectivity=4)
    sx, sy = mm_per_texel
    fx0, fy0, fx1, fy1 = face_bbox
    order = sorted(range(1, n), key=lambda i: (stats[i, cv2.CC_STAT_TOP], stats[i, cv2.CC_STAT_LEFT]))
    out = []
    for number, i in enumerate(order, start=1):
        x0, y0 = int(stats[i, cv2.CC_STAT_LEFT]), int(stats[i, cv2.CC_STAT_TOP])
        x1, y1 = x0 + int(stats[i, cv2.CC_STAT_WIDTH]), y0 + int(stats[i, cv2.CC_STAT_HEIGHT])
        out.append(Sticker(
            number=number, bbox=(x0, y0, x1, y1), size_mm=(round((x1 - x0) * sx, 2), round((y1 - y0) * sy, 2)),
            offset_mm={"left": round((x0 - fx0) * sx, 2), "top": round((y0 - fy0) * sy, 2),
                       "right": round((fx1 - x1) * sx, 2), "bottom": round((fy1 - y1) * sy, 2)},
            area_mm2=round(float(stats[i, cv2.CC_STAT_AREA]) * sx * sy, 1), mask=labels[y0:y1, x0:x1] == i))
    return out


def mask_bbox(mask: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return 0, 0, mask.shape[1], mask.shape[0]
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def outlines_mm(mask: np.ndarray, mm_per_texel: tuple[float, float], origin: tuple[float, float] = (0.0, 0.0),
                upsample: int = 8, smooth_texels: float = 0.0) -> list[np.ndarray]:
    """Outlines (N×2 mm) of a texel mask along its texels' edges (to within 1/16 texel), or, with
    ``smooth_texels``, straightened within that many texels (a sign's edge rather than its stair steps)."""
    big = cv2.resize(mask.astype(np.uint8), None, fx=upsample, fy=upsample, interpolation=cv2.INTER_NEAREST)
    contours, _ = cv2.findContours(np.pad(big, 1), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    out = []
    for c in contours:
        if smooth_texels > 0:
            c = cv2.approxPolyDP(c, smooth_texels * upsample, True)
        pts = (c[:, 0, :].astype(float) - 1 + 0.5) / upsample     # texel units, padded index undone
        out.append(pts * mm_per_texel + origin)
    return out


def with_bleed(colours: np.ndarray, mask: np.ndarray, texels: int) -> np.ndarray:
    """RGB texels where ``mask`` holds, grown outward by ``texels`` with the nearest sticker colour."""
    rgb = colours.astype(np.float32) * mask[..., None]
    have = mask.astype(np.float32)
    for _ in range(texels):
        total = cv2.boxFilter(rgb, -1, (3, 3), normalize=False, borderType=cv2.BORDER_CONSTANT)
        count = cv2.boxFilter(have, -1, (3, 3), normalize=False, borderType=cv2.BORDER_CONSTANT)
        grow = (have == 0) & (count > 0)
        rgb[grow] = total[grow] / count[grow, None]
        have = np.where(grow, 1.0, have)
    return np.concatenate([rgb.round().astype(np.uint8), (have * 255).astype(np.uint8)[..., None]], 2)


# ----------------------------------------------------------------------------- the bundle


def export_bundle(out_dir: str | Path, artwork: PrintArtwork, *, colours: PrintColours | None = None,
                  options: ExportOptions | None = None, source: dict | None = None, overwrite: bool = False) -> dict:
    """Write the bundle of ``artwork`` into ``out_dir`` (created; all files appear at once) and return
    its manifest.

    Args:
        colours: the palette and colour model the attack assumed, recorded in the manifest (None: none).
        source: anything worth recording about where the patch came from (run directory, scene, ...).
        overwrite: replace an existing ``out_dir``; otherwise an existing one is refused.
    """
    options = options or ExportOptions()
    colours = colours or PrintColours()
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise ExportError(f"{out_dir} already exists; choose another output folder or allow overwriting.")
    texture, texture_size_m = artwork.texture, artwork.texture_size_m
    ht, wt = texture.shape[-2:]
    sx, sy = texture_size_m[0] * 1000 / wt, texture_size_m[1] * 1000 / ht
    rgb = to_uint8(texture)
    face = artwork.face_mask[0].detach().cpu().numpy() > 0.5
    stickers_m = None if artwork.sticker_mask is None else artwork.sticker_mask[0].detach().cpu().numpy() > 0.5
    face_bbox = mask_bbox(face)
    hp, wp = pixel_count(ht, sy, options.dpi), pixel_count(wt, sx, options.dpi)
    stickers = [] if stickers_m is None else find_stickers(stickers_m, face_bbox, (sx, sy))
    check_stickers_fit(stickers, (sx, sy), options)         # before any file: a sticker's sheet is one page
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        files: dict[str, dict] = {}
        rgba = np.concatenate([rgb, (face * 255).astype(np.uint8)[..., None]], 2)
        save_png(tmp / "sign.png", rgba, options.dpi, hp, wp)
        size_mm = [round(wp / options.dpi * MM_PER_INCH, 3), round(hp / options.dpi * MM_PER_INCH, 3)]
        files["sign.png"] = {"what": "the attacked face at true size (alpha: the face)", "size_px": [wp, hp],
                             "size_mm": size_mm}
        pages = _sign_pdf(tmp / "sign.pdf", rgba, face, (sx, sy), options)
        files["sign.pdf"] = {"what": "the attacked face at true scale, crop marks, outline, scale bar", "pages": pages}
        if stickers_m is not None:
            prgba = np.concatenate([rgb, (stickers_m * 255).astype(np.uint8)[..., None]], 2)
            save_png(tmp / "patch.png", prgba, options.dpi, hp, wp)
            files["patch.png"] = {"what": "the stickers at true size in place on the face (alpha: the stickers)",
                                  "size_px": [wp, hp], "size_mm": files["sign.png"]["size_mm"]}
            (tmp / "stickers").mkdir()
            for s in stickers:
                x0, y0, x1, y1 = s.bbox
                crop = np.concatenate([rgb[y0:y1, x0:x1], (s.mask * 255).astype(np.uint8)[..., None]], 2)
                h_px, w_px = pixel_count(y1 - y0, sy, options.dpi), pixel_count(x1 - x0, sx, options.dpi)
                name = f"stickers/sticker_{s.number:02d}.png"
                save_png(tmp / name, crop, options.dpi, h_px, w_px)
                files[name] = {"what": f"sticker {s.number} at true size (alpha: its cut shape)",
                               "size_px": [w_px, h_px], "size_mm": list(s.size_mm)}
            files["stickers.pdf"] = {"what": "one cut sheet per sticker: bleed, cut line, crop marks",
                                     "pages": _cut_sheets(tmp / "stickers.pdf", rgb, stickers, (sx, sy), options)}
            base = to_uint8(artwork.base_texture) if artwork.base_texture is not None else rgb
            pages = _placement(tmp / "placement.pdf", base, face, stickers, (sx, sy), options)
            files["placement.pdf"] = {"what": "the face at true scale with each sticker's outline and number, "
                                              "then a table of offsets from the face's edges", "pages": pages}
        for name, entry in files.items():
            data = (tmp / name).read_bytes()
            entry["sha256"] = hashlib.sha256(data).hexdigest()
            entry["bytes"] = len(data)
        geometry = _TexelGeometry(texture_size_m, (wt, ht), (sx, sy), face_bbox)
        manifest = _manifest(files, options, geometry, stickers, _colour_entries(colours, rgb, stickers_m), source)
        save_json(tmp / "manifest.json", manifest)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        _move_into_place(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _move_into_place(tmp: Path, out_dir: Path) -> None:
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old")
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@dataclass(frozen=True)
class _TexelGeometry:
    """The texture's texels in millimetres: its physical (width, height) in metres, its (width,
    height) in texels, millimetres per texel (x, y) and the face's bounding box in texels."""

    texture_size_m: tuple[float, float]
    texels: tuple[int, int]
    mm_per_texel: tuple[float, float]
    face_bbox: tuple[int, int, int, int]


def _manifest(files: dict, options: ExportOptions, geometry: _TexelGeometry, stickers: list[Sticker],
              colour_entries: dict, source: dict | None) -> dict:
    texture_size_m, texels = geometry.texture_size_m, geometry.texels
    sx, sy = geometry.mm_per_texel
    fx0, fy0, fx1, fy1 = geometry.face_bbox
    return {
        "format": MANIFEST_FORMAT, "version": 1, "source": source or {},
        "physical": {"texture_size_mm": [round(texture_size_m[0] * 1000, 3), round(texture_size_m[1] * 1000, 3)],
                     "face_bbox_mm": [round(fx0 * sx, 3), round(fy0 * sy, 3), round(fx1 * sx, 3), round(fy1 * sy, 3)],
                     "face_size_mm": [round((fx1 - fx0) * sx, 3), round((fy1 - fy0) * sy, 3)],
                     "mm_per_texel": [sx, sy]},
        "texture_px": list(texels),
        "dpi": options.dpi,
        "texel_mapping": TEXEL_MAPPING,
        "options": asdict(options),
        "files": files,
        "stickers": [s.summary() for s in stickers],
        **colour_entries,
    }


def _colour_entries(colours: PrintColours, rgb: np.ndarray, stickers_m: np.ndarray | None) -> dict:
    """The manifest's colour entries: whether the stickers were held to the palette, the palette, the
    share of sticker texels printed in one of its colours, and the colour model."""
    out = {"palette_constrained": bool(colours.palette_constrained)}
    if colours.palette is not None:
        pal = (colours.palette.detach().cpu().numpy() * 255).round().astype(int)
        out["palette"] = pal.tolist()
        if stickers_m is not None and stickers_m.any():
            on = rgb[stickers_m]
            keys = lambda a: (a[:, 0].astype(np.int64) << 16) | (a[:, 1].astype(np.int64) << 8) | a[:, 2]  # noqa: E731
            out["sticker_texels_on_palette"] = float(np.isin(keys(on), keys(pal)).mean())
    if colours.colour_model is not None:
        out["colour_model"] = colours.colour_model.to_dict()
    return out


def _page(pdf, tile: Tile, draw) -> None:
    canvas = PageCanvas(tile)
    try:
        draw(canvas)
        pdf.savefig(canvas.fig)
    finally:
        canvas.close()


def _sign_pdf(path: Path, rgba: np.ndarray, face: np.ndarray, mm: tuple[float, float], options: ExportOptions) -> int:
    ht, wt = face.shape
    w_mm, h_mm = wt * mm[0], ht * mm[1]
    x0, y0, x1, y1 = mask_bbox(face)
    outline = outlines_mm(face, mm, smooth_texels=1.0)

    def draw(c: PageCanvas) -> None:
        c.image(rgba, 0, 0, w_mm, h_mm)
        for o in outline:
            c.polyline(o, lw=0.25, color="0.5")
        c.crop_marks(x0 * mm[0], y0 * mm[1], x1 * mm[0], y1 * mm[1])
        c.alignment_marks(options.overlap_mm)
        c.foot(f"physattack: attacked face, {(x1 - x0) * mm[0]:.1f} x {(y1 - y0) * mm[1]:.1f} mm at true scale",
               "cut along the grey outline; tiles: trim at the dashed line and overlay until the marks coincide")

    return save_pdf(path, path.stem, lambda pdf: [_page(pdf, t, draw) for t in
                                        tile_layout(w_mm, h_mm, options.paper, options.margin_mm, options.overlap_mm)])


def check_stickers_fit(stickers: list[Sticker], mm: tuple[float, float], options: ExportOptions) -> None:
    """Refuse margins on which a sticker's cut sheet (the sticker and its bleed) no longer fits one page
    although it would with the default margin: it would be tiled over many pages and could not be cut
    in one piece. A sticker larger than the paper itself is tiled with alignment marks, as designed."""
    if options.paper == "fit" or not stickers:
        return
    pw, ph = PAPERS_MM[options.paper]
    default = ExportOptions.margin_mm

    def room(margin: float) -> list[float]:
        return sorted((pw - 2 * margin, ph - 2 * margin - FOOT_MM))

    bleed = math.ceil(options.bleed_mm / min(mm)) if options.bleed_mm > 0 else 0       # as _cut_sheets pads
    for s in stickers:
        x0, y0, x1, y1 = s.bbox
        need = sorted(((x1 - x0 + 2 * bleed) * mm[0], (y1 - y0 + 2 * bleed) * mm[1]))
        fits = lambda r: need[0] <= r[0] and need[1] <= r[1]  # noqa: E731
        if not fits(room(options.margin_mm)) and fits(room(min(default, options.margin_mm))):
            left = room(options.margin_mm)
            raise ExportError(
                f"margin_mm={options.margin_mm:g} (printer.export.margin_mm) leaves {max(left[0], 0):.0f}×{max(left[1], 0):.0f} mm "
                f"of {options.paper} for a cut sheet, but sticker {s.number} needs {need[0]:.1f}×{need[1]:.1f} mm "
                f"with its bleed and would be split over pages: make the margin smaller (the default is {default:g} "
                "mm), or choose a larger paper or paper=fit.")


def _cut_sheets(path: Path, rgb: np.ndarray, stickers: list[Sticker], mm: tuple[float, float],
                options: ExportOptions) -> int:
    bleed = math.ceil(options.bleed_mm / min(mm)) if options.bleed_mm > 0 else 0

    def sheets(pdf) -> None:
        for s in stickers:
            x0, y0, x1, y1 = s.bbox
            crop = np.pad(rgb[y0:y1, x0:x1], ((bleed, bleed), (bleed, bleed), (0, 0)), mode="edge")
            mask = np.pad(s.mask, bleed)
            img = with_bleed(crop, mask, bleed)
            w_mm, h_mm = img.shape[1] * mm[0], img.shape[0] * mm[1]
            outline = outlines_mm(s.mask, mm, (bleed * mm[0], bleed * mm[1]))
            cut = (bleed * mm[0], bleed * mm[1], (bleed + x1 - x0) * mm[0], (bleed + y1 - y0) * mm[1])

            def draw(c: PageCanvas, s=s, img=img, outline=outline, cut=cut, w_mm=w_mm, h_mm=h_mm) -> None:
                c.image(img, 0, 0, w_mm, h_mm)
                for o in outline:
                    c.polyline(o, lw=0.3, color="black")
                c.crop_marks(*cut, gap=max(2.0, options.bleed_mm + 1.0))
                c.alignment_marks(options.overlap_mm)
                o = s.offset_mm
                c.foot(f"sticker {s.number} of {len(stickers)}: {s.size_mm[0]:.1f} x {s.size_mm[1]:.1f} mm",
                       f"cut on the black line; place it {o['left']:.1f} mm from the face's left edge and "
                       f"{o['top']:.1f} mm from its top edge (placement.pdf)")

            for t in tile_layout(w_mm, h_mm, options.paper, options.margin_mm, options.overlap_mm):
                _page(pdf, t, draw)

    return save_pdf(path, path.stem, sheets)


def _placement(path: Path, base: np.ndarray, face: np.ndarray, stickers: list[Sticker], mm: tuple[float, float],
               options: ExportOptions) -> int:
    ht, wt = face.shape
    w_mm, h_mm = wt * mm[0], ht * mm[1]
    fx0, fy0, fx1, fy1 = mask_bbox(face)
    rgba = np.concatenate([base, (face * 255).astype(np.uint8)[..., None]], 2)
    face_outline = outlines_mm(face, mm, smooth_texels=1.0)
    shapes = [(s, outlines_mm(s.mask, mm, (s.bbox[0] * mm[0], s.bbox[1] * mm[1]))) for s in stickers]

    def draw(c: PageCanvas) -> None:
        c.image(rgba, 0, 0, w_mm, h_mm, alpha=0.3)
        for o in face_outline:
            c.polyline(o, lw=0.3, color="0.3")
        for s, outline in shapes:
            for o in outline:
                c.polyline(o, lw=0.6, color="#d01070")
            cx, cy = (s.bbox[0] + s.bbox[2]) / 2 * mm[0], (s.bbox[1] + s.bbox[3]) / 2 * mm[1]
            c.content_text(cx, cy, str(s.number), fontsize=8, weight="bold", color="#d01070")
            c.content_text(cx, cy + 4.5, f"L {s.offset_mm['left']:.0f} / T {s.offset_mm['top']:.0f}", fontsize=4.5)
        c.crop_marks(fx0 * mm[0], fy0 * mm[1], fx1 * mm[0], fy1 * mm[1])
        c.alignment_marks(options.overlap_mm)
        c.foot(f"physattack: sticker placement template, face {(fx1 - fx0) * mm[0]:.1f} x {(fy1 - fy0) * mm[1]:.1f} mm",
               "lay it on the sign edge to edge; each sticker's offsets (mm) from the face's left (L) and top (T) "
               "edges are printed inside it and listed at the end")

    def pages(pdf) -> None:
        for t in tile_layout(w_mm, h_mm, options.paper, options.margin_mm, options.overlap_mm):
            _page(pdf, t, draw)
        _offset_table(pdf, stickers, options)

    return save_pdf(path, path.stem, pages)


def _offset_table(pdf, stickers: list[Sticker], options: ExportOptions) -> None:
    """Pages listing every sticker's size and offsets from the face's four edges."""
    paper = options.paper if options.paper != "fit" else "a4"
    tile = tile_layout(1, 1, paper, options.margin_mm, 0)[0]
    per_page = max(1, int((tile.page_h_mm - 2 * tile.page_y - 40) // 4.5))
    header = ["sticker", "width", "height", "left", "top", "right", "bottom", "area mm2"]
    cols = np.linspace(tile.page_x, tile.page_w_mm - tile.page_x - 20, len(header))
    for start in range(0, max(1, len(stickers)), per_page):
        def draw(c: PageCanvas, chunk=stickers[start:start + per_page]) -> None:
            y = tile.page_y
            c.page_text(tile.page_x, y, "Sticker offsets in millimetres from the face's edges (the bounding box of "
                        "the sign face; for an octagon, its flats)", fontsize=8, weight="bold")
            y += 8
            for x, h in zip(cols, header):
                c.page_text(x, y, h, fontsize=7, weight="bold")
            for s in chunk:
                y += 4.5
                o = s.offset_mm
                row = [str(s.number), f"{s.size_mm[0]:.1f}", f"{s.size_mm[1]:.1f}", f"{o['left']:.1f}",
                       f"{o['top']:.1f}", f"{o['right']:.1f}", f"{o['bottom']:.1f}", f"{s.area_mm2:.0f}"]
                for x, v in zip(cols, row):
                    c.page_text(x, y, v, fontsize=7)
            c.foot("physattack: sticker offsets", "measure from the face's edges to the sticker's outline")

        _page(pdf, tile, draw)


def export_patch(out_dir: str | Path, *, scene, texture: Tensor, sticker_mask: Tensor | None = None,
                 colours: PrintColours | None = None, options: ExportOptions | None = None,
                 source: dict | None = None, overwrite: bool = False) -> dict:
    """``export_bundle`` for an attacked texture on a scene.

    Args:
        scene: the scene the texture covers (its face mask, physical size, clean texture and name).
        texture: 3×Ht×Wt, what the patch made of the scene's texture (``patch.apply(scene.texture)``).
        sticker_mask: 1×Ht×Wt for stickers (cut sheets and a placement template are written); None
            for paint, which is printed whole.
        source: recorded in the manifest after the scene's name (the patch's kind as ``patch_type``, ...).
    """
    artwork = PrintArtwork(texture=texture.detach().cpu(), face_mask=scene.face_mask.cpu(),
                           texture_size_m=scene.texture_size_m,
                           sticker_mask=sticker_mask.detach().cpu() if sticker_mask is not None else None,
                           base_texture=scene.texture.cpu())
    colours = colours or PrintColours()
    if colours.palette is not None:
        colours = replace(colours, palette=colours.palette.cpu())
    return export_bundle(out_dir, artwork, colours=colours, options=options,
                         source={"scene": scene.name, **(source or {})}, overwrite=overwrite)


__all__ = ["ExportError", "ExportOptions", "PrintArtwork", "PrintColours", "Sticker", "export_bundle", "export_patch",
           "find_stickers", "pixel_count", "read_png_dpi", "read_png_rgba", "save_png",
           "texel_of_pixel", "texels_from_pixels", "texels_to_pixels", "to_uint8"]
