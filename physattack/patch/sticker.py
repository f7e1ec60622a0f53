"""Stickers: opaque patches of free colour on a fixed set of texels (RP2's two bars by default)."""

from __future__ import annotations

from pathlib import Path

import cv2
import torch

from torch import Tensor, nn

from physattack.errors import InputError
from physattack.scene.scene import Scene


class PatchError(InputError):
    """A patch that cannot be built; the message says what to do."""


class StickerPatch(nn.Module):
    """Stickers covering the texels where ``mask`` is 1, colours free in [0, 1] through a sigmoid.

    Args:
        mask: 1×Ht×Wt in {0, 1}, in texture space.
        init_color: starting RGB of the stickers (mid-grey by default).

    Shape:
        apply: base texture 3×Ht×Wt -> texture 3×Ht×Wt.
    """

    def __init__(self, mask: Tensor, init_color: tuple[float, float, float] = (0.5, 0.5, 0.5)):
        super().__init__()
        if mask.dim() != 3 or mask.shape[0] != 1:
            raise PatchError(f"A sticker mask must be 1×H×W, got {tuple(mask.shape)}.")
        self.register_buffer("mask", (mask > 0.5).float())
        init = torch.tensor(init_color).clamp(0.02, 0.98).view(3, 1, 1)
        self.logits = nn.Parameter(torch.logit(init).expand(3, *mask.shape[1:]).clone())

    def colors(self) -> Tensor:
        return torch.sigmoid(self.logits)

    def apply(self, base_texture: Tensor) -> Tensor:
        return base_texture * (1 - self.mask) + self.colors() * self.mask

    def area_fraction(self, face_mask: Tensor) -> float:
        """Share of the face (texels where ``face_mask`` is 1) the stickers cover."""
        return float((self.mask * face_mask).sum() / face_mask.sum().clamp(min=1))


def bars_mask(face_mask: Tensor, area: float = 0.15, width: float = 0.56,
              centers: tuple[float, float] = (0.22, 0.78)) -> Tensor:
    """Two horizontal bars (RP2's stop-sign stickers), together covering ``area`` of the face.

    Bars span ``width`` of the texture's width, centred, at heights ``centers`` (share of the texture
    height from the top); their height is solved so that their area on the face is ``area``.
    """
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
    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if img is None:
        raise PatchError(f"The sticker mask {path} is missing or not an image; give a PNG, white where "
                         "the stickers go, in the scene's texture layout.")
    img = cv2.resize(img, (size[1], size[0]), interpolation=cv2.INTER_NEAREST)
    return torch.from_numpy(img > 127).float()[None]


def sticker_for_scene(scene: Scene, shape: str = "bars", area: float = 0.15, mask_png: str | None = None,
                      init_color: tuple[float, float, float] = (0.5, 0.5, 0.5)) -> StickerPatch:
    """Build a sticker patch on ``scene``'s face: RP2's ``bars`` of total ``area``, or a PNG mask."""
    if mask_png:
        mask = mask_from_png(mask_png, tuple(scene.texture.shape[-2:])) * scene.face_mask
    elif shape == "bars":
        mask = bars_mask(scene.face_mask, area)
    else:
        raise PatchError(f"Unknown sticker shape '{shape}'; use 'bars' or give patch.mask_png.")
    if mask.sum() == 0:
        raise PatchError("The sticker mask covers no texel of the face; check patch.mask_png against "
                         "the scene's face_mask.png.")
    return StickerPatch(mask, tuple(init_color))


__all__ = ["PatchError", "StickerPatch", "bars_mask", "mask_from_png", "sticker_for_scene"]
