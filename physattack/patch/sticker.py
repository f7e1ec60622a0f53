"""Stickers: opaque patches of free colour on a set of texels.

The texels are RP2's two bars, a user's PNG mask, or cells chosen by a mask search before the
attack (RP2's two-stage method: find where a free perturbation helps most, then cover only there;
the search needs the victim, so the attack runs it — see ``physattack.attack.mask_search``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from physattack.imageio import MAX_TEXTURE_SIDE, read_grey
from physattack.patch.base import Patch, PatchError
from physattack.printing.priors import load_palette
from physattack.scene.scene import Scene


class StickerPatch(Patch):
    """Stickers covering the texels where ``mask`` is 1, colours free in [0, 1] through a sigmoid, or
    (with ``palette``) chosen among the printer's palette colours.

    With a palette each texel holds logits over the K palette colours; its colour is their softmax at a
    temperature that ``anneal(progress)`` lowers during the attack (``temperature`` from its first to its
    second value), and from ``hard_from`` of the way on it is the single most likely palette colour
    (straight-through: the forward pass is hard, the gradient is the soft assignment's). Outside an
    attack (after ``anneal(1.0)``, and for a freshly built patch) colours are hard, so the exported
    patch holds only palette colours.

    Args:
        mask: 1×Ht×Wt in {0, 1}, in texture space.
        init_color: starting RGB of the stickers (mid-grey by default), each in [0, 1].
        mask_search: ``{"area", "cell_px"}`` when the attack should place the stickers first.
        palette: K×3 colours in [0, 1] to constrain the stickers to, or None for free colours.
        temperature: (start, end) of the soft assignment's temperature.
        hard_from: share of the attack after which colours are hard.

    Shape:
        apply: base texture 3×Ht×Wt -> texture 3×Ht×Wt.
    """

    cut_as_stickers = True

    def __init__(self, mask: Tensor, init_color: tuple[float, float, float] = (0.5, 0.5, 0.5),
                 mask_search: dict | None = None, palette: Tensor | None = None,
                 temperature: tuple[float, float] = (1.0, 0.05), hard_from: float = 0.7):
        super().__init__()
        if mask.dim() != 3 or mask.shape[0] != 1:
            raise PatchError(f"A sticker mask must be 1×H×W, got {tuple(mask.shape)}.")
        init_color = PatchError.check_values("patch.init_color", init_color, 0, 1, why="R, G, B")
        if len(init_color) != 3:
            raise PatchError(f"patch.init_color must be three numbers (R, G, B) in [0, 1]; got {init_color}.")
        if mask_search is not None:
            PatchError.check_range("patch.area", mask_search["area"], 0, 1, lo_open=True)
            PatchError.check_range("patch.cell_mm", mask_search["cell_px"], 1, integer=True,
                                   why="one sticker must be at least a texel wide")
        self.register_buffer("mask", (mask > 0.5).float())
        init = torch.tensor(init_color).clamp(0.02, 0.98).view(3, 1, 1)
        if palette is None:
            self.register_buffer("palette", None)
            self.logits = nn.Parameter(torch.logit(init).expand(3, *mask.shape[1:]).clone())
        else:
            if palette.dim() != 2 or palette.shape[1] != 3 or len(palette) < 2:
                raise PatchError("A sticker palette must be K×3 colours with K >= 2; check printer.palette.")
            if len(temperature) != 2 or not (temperature[0] >= temperature[1] > 0) or not 0 <= hard_from <= 1:
                raise PatchError("patch.palette_options.temperature must be (start, end) with start >= end > 0, and "
                                 "patch.palette_options.hard_from a share of the attack in [0, 1].")
            self.register_buffer("palette", palette.float().clone())
            # Start soft around the palette colours nearest init_color.
            closeness = -5.0 * ((self.palette - init.view(1, 3)) ** 2).sum(1)
            self.logits = nn.Parameter(closeness.view(-1, 1, 1).expand(len(palette), *mask.shape[1:]).clone())
        self.temperature_range, self.hard_from = (float(temperature[0]), float(temperature[1])), float(hard_from)
        self.temperature = 0.0          # 0: hard palette colours; the attack anneals it (not saved: a schedule)
        self.mask_search = mask_search      # {"area": share of the face, "cell_px": sticker cell side}

    @property
    def palette_constrained(self) -> bool:
        return self.palette is not None

    @property
    def colors_final(self) -> bool:
        """Whether ``colors()`` are what will be printed (always, unless a palette is still soft)."""
        return self.palette is None or self.temperature == 0.0

    def anneal(self, progress: float) -> None:
        """Set the palette temperature for ``progress`` (0 to 1) of the attack; no-op for free colours."""
        t0, t1 = self.temperature_range
        share = progress / max(self.hard_from, 1e-9)
        self.temperature = 0.0 if progress >= self.hard_from else t0 * (t1 / t0) ** share

    def colors(self) -> Tensor:
        if self.palette is None:
            return torch.sigmoid(self.logits)
        on = self.mask[0] > 0.5                 # only the sticker texels: K×N, not K×H×W
        logits = self.logits[:, on]
        if self.temperature > 0:
            weights = torch.softmax(logits / self.temperature, 0)
        else:
            soft = torch.softmax(logits / self.temperature_range[1], 0)
            hard = F.one_hot(logits.argmax(0), len(self.palette)).T.to(soft)
            weights = hard + soft - soft.detach()           # straight-through: hard colours, soft gradient
        out = self.logits.new_zeros(3, *self.logits.shape[1:])
        out[:, on] = self.palette.T @ weights
        return out

    def apply(self, base_texture: Tensor) -> Tensor:
        return base_texture * (1 - self.mask) + self.colors() * self.mask

    @torch.no_grad()
    def set_colors(self, colors: Tensor) -> None:
        """Free colours: the logits of ``colors`` under the mask. Palette: each texel's nearest palette colour, held
        with a logit margin that no temperature softens."""
        on = self.mask[0] > 0.5
        c = colors.to(self.logits)[:, on].clamp(0, 1)
        if self.palette is None:
            self.logits[:, on] = torch.logit(c.clamp(1e-4, 1 - 1e-4))
            return
        nearest = torch.cdist(c.T, self.palette).argmin(1)
        self.logits[:, on] = F.one_hot(nearest, len(self.palette)).T.to(self.logits) * 20.0


def bars_mask(face_mask: Tensor, area: float = 0.15, width: float = 0.56,
              centers: tuple[float, float] = (0.22, 0.78)) -> Tensor:
    """Two horizontal bars (RP2's stop-sign stickers), together covering ``area`` of the face.

    Bars span ``width`` of the texture's width, centred, at heights ``centers`` (share of the texture
    height from the top); their height is solved so that their area on the face is ``area``.
    """
    PatchError.check_range("patch.area", area, 0, 1, lo_open=True, why="the share of the face the bars cover")
    PatchError.check_range("bars_mask width", width, 0, 1, lo_open=True, why="a share of the texture width")
    PatchError.check_values("bars_mask centers", centers, 0, 1, why="shares of the texture height")
    _, h, w = face_mask.shape
    x0, x1 = int(round(w * (1 - width) / 2)), int(round(w * (1 + width) / 2))
    face_px = float(face_mask.sum())
    lo, hi = 1, h // 4
    while lo < hi:   # smallest bar height reaching the area
        mid = (lo + hi) // 2
        if float((_bars(h, w, x0, x1, centers, mid) * face_mask).sum()) / face_px >= area:
            hi = mid
        else:
            lo = mid + 1
    return _bars(h, w, x0, x1, centers, lo) * face_mask


def _bars(h, w, x0, x1, centers, bar_h):
    m = torch.zeros(1, h, w)
    for c in centers:
        y0 = int(round(c * h - bar_h / 2))
        m[:, max(0, y0):min(h, y0 + bar_h), x0:x1] = 1
    return m


def mask_from_png(path: str | Path, size: tuple[int, int]) -> Tensor:
    """A user's mask image (white = sticker), resized to the texture's size."""
    if not Path(path).is_file():
        raise PatchError(f"The sticker mask {path} is missing or not an image; give a PNG, white where "
                         "the stickers go, in the scene's texture layout.")
    img = read_grey(path, "sticker mask", error=PatchError, max_side=MAX_TEXTURE_SIDE)      # truncated or transparent: one sentence
    img = cv2.resize(img, (size[1], size[0]), interpolation=cv2.INTER_NEAREST)
    return torch.from_numpy(img > 127).float()[None]


@dataclass(frozen=True)
class PaletteOptions:
    """How ``colours=palette`` stickers take the printer palette's colours (``patch.palette_options``).

    Args:
        palette: the palette file (None: the bundled one).
        temperature: (start, end) of the soft assignment's temperature, annealed during the attack.
        hard_from: share of the attack after which each texel is one palette colour.
    """

    palette: str | None = None
    temperature: tuple[float, float] = (1.0, 0.05)
    hard_from: float = 0.7

    @classmethod
    def of(cls, value) -> PaletteOptions:
        """From itself, None (the defaults) or a mapping of its keys (a config node)."""
        if value is None or isinstance(value, cls):
            return value or cls()
        keys = dict(value)
        unknown = sorted(set(keys) - set(cls.__dataclass_fields__))
        if unknown:
            raise PatchError(f"patch.palette_options.{unknown[0]} is not a setting; the settings are "
                             f"{', '.join(cls.__dataclass_fields__)}.")
        if "temperature" in keys:
            keys["temperature"] = tuple(keys["temperature"])
        return cls(**keys)


def sticker_for_scene(scene: Scene, shape: str = "search", area: float = 0.18, cell_mm: float = 45.0,
                      mask_png: str | None = None, init_color: tuple[float, float, float] = (0.5, 0.5, 0.5),
                      colours: str = "free", palette_options: PaletteOptions | dict | None = None) -> StickerPatch:
    """Build a sticker patch on ``scene``'s face.

    Args:
        shape: ``search`` (square stickers of ``cell_mm`` where a mask search finds them, ``area`` of
            the face in all; the attack runs the search), ``bars`` (RP2's two bars of ``area``), or
            ignored when ``mask_png`` is given.
        area: share of the face the stickers cover.
        cell_mm: side of one square sticker for ``search``, in millimetres on the real sign.
        colours: ``free`` (any RGB; the attack's non-printability score pulls them towards the palette)
            or ``palette`` (only the printer palette's colours; see ``StickerPatch``).
        palette_options: for ``colours=palette``: the palette file and the assignment's annealing
            (``PaletteOptions``, or a mapping of its keys).
    """
    options = PaletteOptions.of(palette_options)
    palette, temperature, hard_from = options.palette, options.temperature, options.hard_from
    PatchError.check_range("patch.area", area, 0, 1, lo_open=True, why="the share of the face the stickers cover")
    PatchError.check_range("patch.cell_mm", cell_mm, 0, lo_open=True, why="the side of one square sticker, in mm")
    search = None
    if mask_png:
        mask = mask_from_png(mask_png, tuple(scene.texture.shape[-2:])) * scene.face_mask
    elif shape == "bars":
        mask = bars_mask(scene.face_mask, area)
    elif shape == "search":
        texels_per_mm = scene.texture.shape[-1] / (scene.texture_size_m[0] * 1000)
        search = {"area": float(area), "cell_px": max(2, int(round(cell_mm * texels_per_mm)))}
        mask = bars_mask(scene.face_mask, area)        # stands in until the attack's search replaces it
    else:
        raise PatchError(f"Unknown sticker shape '{shape}'; use 'search', 'bars' or give patch.mask_png.")
    if mask.sum() == 0:
        raise PatchError("The sticker mask covers no texel of the face; check patch.mask_png against "
                         "the scene's face_mask.png.")
    if colours not in {"free", "palette"}:
        raise PatchError(f"patch.colours must be free or palette, not '{colours}'.")
    pal = None
    if colours == "palette":
        pal = load_palette(palette)
    return StickerPatch(mask, tuple(init_color), mask_search=search, palette=pal, temperature=tuple(temperature),
                        hard_from=hard_from)


__all__ = ["PaletteOptions", "PatchError", "StickerPatch", "bars_mask", "mask_from_png", "sticker_for_scene"]
