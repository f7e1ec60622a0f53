"""Placement error: the deployed stickers are not the designed ones.

Stickers are stuck on by hand: each lands a few millimetres off, turned by a few degrees, a little
larger or smaller than designed (the printer's scaling), and its printed colour is off by the sheet's
gain and offset. ``PlacementError`` says how large these errors are and draws them (``sample``:
plain tensors, one draw per view and sticker, from a ``torch.Generator``); ``place_stickers`` applies
a draw to a texture, differentiably: every sticker — a 4-connected piece of the sticker mask, the
pieces the print export cuts — is moved on its own by a rigid shift and rotation (and scale) about
its centroid, in millimetres on the object converted with the scene's texels per millimetre,
recoloured, trimmed at the face's edge and composited over the base texture. A draw without error
gives back the design texture bit for bit. ``place`` does both for a patch on a scene; it is what a
drive or any other caller uses::

    error = PlacementError(shift_mm=5, rotation_deg=5)
    texture = place(patch, scene.texture, scene, error, torch.Generator().manual_seed(0))   # 3×Ht×Wt
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.patch.base import Patch, PatchError

#: How ``PlacementError.sample`` draws: ``uniform`` within the bounds (the shift uniform over the
#: disc of radius ``shift_mm``), ``normal`` (standard deviation half the bound, cut at the bound), or
#: ``fixed`` magnitude (every sticker shifted by exactly ``shift_mm`` in a random direction, turned by
#: exactly ±``rotation_deg`` and scaled by exactly 1 ± ``scale``, each sign at random).
DISTRIBUTIONS = ("uniform", "normal", "fixed")


@dataclass(frozen=True)
class PlacementDraw:
    """One placement error per view and sticker, as plain tensors (``PlacementError.sample``).

    Shape:
        shift_mm: V×K×2, (x right, y down the texture) in millimetres on the object.
        rotation_deg: V×K, positive turns the sticker anticlockwise as one faces the object.
        scale: V×K, the sticker's size relative to the design (1: as designed).
        gain, offset: V×K×3, the printed colour as ``colour * gain + offset`` per RGB channel.
    """

    shift_mm: Tensor
    rotation_deg: Tensor
    scale: Tensor
    gain: Tensor
    offset: Tensor

    def __len__(self) -> int:
        return self.shift_mm.shape[0]

    @property
    def stickers(self) -> int:
        return self.shift_mm.shape[1]

    def __getitem__(self, index) -> "PlacementDraw":
        """Select views (an int, slice or index tensor), keeping the view dimension."""
        if isinstance(index, int):
            index = slice(index, index + 1)
        return PlacementDraw(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def to(self, device) -> "PlacementDraw":
        return PlacementDraw(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    @property
    def identity(self) -> Tensor:
        """V×K bool: the sticker is placed and printed exactly as designed."""
        return ((self.shift_mm == 0).all(-1) & (self.rotation_deg == 0) & (self.scale == 1)
                & (self.gain == 1).all(-1) & (self.offset == 0).all(-1))


class PlacementError:
    """How far deployed stickers may be from the design, and how such errors are drawn.

    Args:
        shift_mm: bound of each sticker's shift on the object, millimetres.
        rotation_deg: bound of each sticker's rotation about its centroid, degrees.
        scale: bound of its relative size error (0.03: 3 % larger or smaller).
        colour_gain: standard deviation of the per-sticker, per-channel printed colour gain (around 1).
        colour_offset: standard deviation of the per-sticker, per-channel colour offset (colours in [0, 1]).
        distribution: ``uniform``, ``normal`` or ``fixed`` (see ``DISTRIBUTIONS``); the colour error is
            normal in every mode.
        key: the configuration key named in error messages.
    """

    def __init__(self, shift_mm: float = 0.0, rotation_deg: float = 0.0, scale: float = 0.0,
                 colour_gain: float = 0.0, colour_offset: float = 0.0, distribution: str = "uniform",
                 key: str = "attack.placement"):
        self.shift_mm = float(PatchError.check_range(f"{key}.shift_mm", shift_mm, 0, 100,
                                                     why="how far a sticker may land from its place, millimetres"))
        self.rotation_deg = float(PatchError.check_range(f"{key}.rotation_deg", rotation_deg, 0, 180,
                                                         why="how far a sticker may turn, degrees"))
        self.scale = float(PatchError.check_range(f"{key}.scale", scale, 0, 0.5,
                                                  why="a sticker's relative size error, 0.03 for 3 %"))
        self.colour_gain = float(PatchError.check_range(f"{key}.colour_gain", colour_gain, 0, 1,
                                                        why="standard deviation of the printed colour's gain"))
        self.colour_offset = float(PatchError.check_range(f"{key}.colour_offset", colour_offset, 0, 1,
                                                          why="standard deviation of the printed colour's offset"))
        self.distribution = PatchError.check_choice(f"{key}.distribution", distribution, DISTRIBUTIONS)

    def __repr__(self) -> str:
        return (f"PlacementError(shift_mm={self.shift_mm:g}, rotation_deg={self.rotation_deg:g}, scale={self.scale:g}, "
                f"colour_gain={self.colour_gain:g}, colour_offset={self.colour_offset:g}, "
                f"distribution={self.distribution!r})")

    @property
    def none(self) -> bool:
        """Whether every bound is 0, so that every draw places the stickers exactly as designed."""
        return not (self.shift_mm or self.rotation_deg or self.scale or self.colour_gain or self.colour_offset)

    def as_dict(self) -> dict:
        return {"shift_mm": self.shift_mm, "rotation_deg": self.rotation_deg, "scale": self.scale,
                "colour_gain": self.colour_gain, "colour_offset": self.colour_offset,
                "distribution": self.distribution}

    @torch.no_grad()
    def sample(self, views: int, stickers: int, generator: torch.Generator) -> PlacementDraw:
        """One error per view and sticker (on the generator's device). The same generator state gives
        the same draw; the numbers drawn do not depend on the bounds, so two errors of different size
        drawn from one seed move each sticker in the same direction."""
        shape, dev = (views, stickers), generator.device

        def uniform(*extra):
            return torch.rand(*shape, *extra, generator=generator, device=dev)

        def normal(*extra):
            return torch.randn(*shape, *extra, generator=generator, device=dev)

        direction = 2 * math.pi * uniform()
        u_shift, u_rot, u_scale = uniform(), uniform(), uniform()
        n_shift, n_rot, n_scale = normal(2), normal(), normal()
        gain, offset = 1 + self.colour_gain * normal(3), self.colour_offset * normal(3)
        if self.distribution == "uniform":
            radius = self.shift_mm * u_shift.sqrt()              # uniform over the disc
            rotation = self.rotation_deg * (2 * u_rot - 1)
            scale = self.scale * (2 * u_scale - 1)
        elif self.distribution == "normal":
            shift = self.shift_mm / 2 * n_shift
            length = shift.norm(dim=-1)
            radius = length.clamp(max=self.shift_mm)
            direction = torch.atan2(shift[..., 1], shift[..., 0])
            rotation = (self.rotation_deg / 2 * n_rot).clamp(-self.rotation_deg, self.rotation_deg)
            scale = (self.scale / 2 * n_scale).clamp(-self.scale, self.scale)
        else:
            radius = torch.full(shape, self.shift_mm, device=dev)
            rotation = self.rotation_deg * torch.where(u_rot < 0.5, -1.0, 1.0)
            scale = self.scale * torch.where(u_scale < 0.5, -1.0, 1.0)
        shift = torch.stack([radius * direction.cos(), radius * direction.sin()], -1)
        shift = torch.where(radius[..., None] > 0, shift, torch.zeros_like(shift))     # no -0.0 or rounding at 0
        return PlacementDraw(shift_mm=shift, rotation_deg=rotation + 0.0, scale=1 + scale,
                             gain=gain.clamp(min=0), offset=offset)


@dataclass(frozen=True)
class StickerPieces:
    """The separate stickers of a sticker mask: its 4-connected pieces, as the export cuts them
    (``physattack.printing.export.find_stickers``), numbered top to bottom, then left to right.

    Shape:
        labels: Ht×Wt long, 0 off the stickers, k + 1 on sticker k.
        centroids: K×2 float (x, y) in texels (texel centres at integers).
        boxes: K×4 long (x0, y0, x1, y1), the first and last texel of each sticker's bounding box.
    """

    labels: Tensor
    centroids: Tensor
    boxes: Tensor

    def __len__(self) -> int:
        return len(self.boxes)


def sticker_pieces(mask: Tensor) -> StickerPieces:
    """The stickers of a 1×Ht×Wt (or Ht×Wt) mask in {0, 1}."""
    m = (mask.reshape(mask.shape[-2:]) > 0.5).cpu().numpy().astype("uint8")
    n, labels, stats, centroids = cv2.connectedComponentsWithStats(m, connectivity=4)
    order = sorted(range(1, n), key=lambda i: (stats[i, cv2.CC_STAT_TOP], stats[i, cv2.CC_STAT_LEFT]))
    relabel = torch.zeros(n, dtype=torch.long)
    relabel[torch.tensor(order, dtype=torch.long)] = torch.arange(1, n, dtype=torch.long)
    x0, y0 = stats[order, cv2.CC_STAT_LEFT], stats[order, cv2.CC_STAT_TOP]
    boxes = np.stack([x0, y0, x0 + stats[order, cv2.CC_STAT_WIDTH] - 1, y0 + stats[order, cv2.CC_STAT_HEIGHT] - 1], -1)
    return StickerPieces(relabel[torch.from_numpy(labels).long()].to(mask.device),
                         torch.tensor(centroids[order], dtype=torch.float32).reshape(-1, 2),
                         torch.from_numpy(boxes).long().reshape(-1, 4))


def texels_per_mm(scene) -> tuple[float, float]:
    """(x, y) texels per millimetre on ``scene``'s object (its texture spans ``texture_size_m``)."""
    h, w = scene.texture.shape[-2:]
    return w / (scene.texture_size_m[0] * 1000), h / (scene.texture_size_m[1] * 1000)


def place_stickers(texture: Tensor, mask: Tensor, base_texture: Tensor, face_mask: Tensor,
                   texels_per_mm: tuple[float, float], draw: PlacementDraw,
                   pieces: StickerPieces | None = None) -> Tensor:
    """The textures of ``draw``'s V deployments of the stickers, differentiable in ``texture``.

    Args:
        texture: the design, 3×Ht×Wt or V×3×Ht×Wt; its texels under ``mask`` are the stickers' colours
            (as printed, when the printer model has been applied).
        mask: 1×Ht×Wt in {0, 1}, where the design puts stickers.
        base_texture: what the stickers go on, 3×Ht×Wt or V×3×Ht×Wt.
        face_mask: 1×Ht×Wt; a sticker moved past the face's edge is cut there.
        texels_per_mm: (x, y), ``texels_per_mm(scene)``.
        draw: the error of each of the V views and K stickers (K: the pieces of ``mask``).
        pieces: ``sticker_pieces(mask)``, when the caller has it already.

    Returns:
        V×3×Ht×Wt: ``base_texture`` with every sticker moved, recoloured and laid on it in turn (later
        stickers over earlier ones where they overlap). A sticker whose draw is the identity is laid
        where it was designed, unresampled, so a draw without error gives the design texture exactly.
    """
    pieces = sticker_pieces(mask) if pieces is None else pieces
    if draw.stickers != len(pieces):
        raise ValueError(f"the draw has {draw.stickers} stickers but the mask has {len(pieces)} pieces")
    views, (h, w), dev = len(draw), mask.shape[-2:], texture.device
    base = base_texture.expand(views, 3, h, w)
    if len(pieces) == 0:
        return base.clone()
    draw = draw.to(dev)
    forward, inverse = _affines(draw, texels_per_mm)                                   # V×K×2×2 each
    shift = draw.shift_mm * torch.tensor(texels_per_mm, device=dev)                    # V×K×2 texels
    identity = draw.identity
    recoloured = ((draw.gain != 1).any(-1) | (draw.offset != 0).any(-1)).any(0).tolist()   # per sticker, any view
    face = face_mask.reshape(1, 1, h, w).to(texture)
    labels = pieces.labels.to(dev)
    moved = []                                   # per sticker: (rows, columns, colour V×3×h×w, cover V×1×h×w)
    for k in range(len(pieces)):
        centre = pieces.centroids[k].to(dev)
        (x0, y0), (sx, sy) = _window(pieces.boxes[k].to(dev), centre, forward[:, k], shift[:, k])
        (ys, yp), (xs, xp) = _clip(y0, sy, h), _clip(x0, sx, w)          # the window's part on the texture
        inside = (slice(yp[0], sy - yp[1]), slice(xp[0], sx - xp[1]))
        alpha = F.pad((labels[ys, xs] == k + 1).to(texture), (*xp, *yp))[None, None]
        # Crop before broadcasting over views: the crop's gradient is then the design's size, not V times it.
        src = F.pad(texture[..., ys, xs], (*xp, *yp)) * alpha                          # premultiplied colour
        grid = _grid(inverse[:, k], shift[:, k], centre - centre.new_tensor([x0, y0]), (sy, sx)).to(texture.dtype)
        cut = face[:, :, ys, xs]                                       # a sticker is cut at the face's edge
        edge = not bool(cut.all())
        colour = F.grid_sample(src.expand(views, 3, sy, sx), grid, align_corners=False)[..., inside[0], inside[1]]
        with torch.no_grad():                                          # the cover holds no patch parameter
            cover = F.grid_sample(alpha.expand(views, 1, sy, sx), grid, align_corners=False)[..., inside[0], inside[1]]
        if edge:
            colour, cover = colour * cut, cover * cut
        if recoloured[k]:
            g, o = draw.gain[:, k, :, None, None], draw.offset[:, k, :, None, None]
            colour = torch.minimum((colour * g + o * cover).clamp(min=0), cover)      # printed colour in [0, 1]
        if identity[:, k].any():
            same = identity[:, k, None, None, None]
            colour = torch.where(same, src[..., inside[0], inside[1]].expand_as(colour), colour)
            cover = torch.where(same, alpha[..., inside[0], inside[1]], cover)
        moved.append((ys, xs, colour, cover))
    # Later stickers lie over earlier ones: each sticker shows through the covers laid after it, the
    # base through all of them. Covers carry no gradient, so this pass needs no graph.
    with torch.no_grad():
        through = torch.ones(views, 1, h, w, dtype=texture.dtype, device=dev)
        after = [None] * len(moved)
        for k in reversed(range(len(moved))):
            ys, xs, _, cover = moved[k]
            after[k] = through[:, :, ys, xs].clone()
            through[:, :, ys, xs] *= 1 - cover
    # Every sticker's visible colour is added onto the base where it shows (the gradient of a scatter-add
    # is a gather: no texture-sized gradient per sticker).
    index = torch.arange(h * w, device=dev).view(h, w)
    out = base.reshape(views, 3, h * w) * through.view(views, 1, h * w)
    for (ys, xs, colour, _), shows in zip(moved, after):
        out.index_add_(2, index[ys, xs].reshape(-1), (colour * shows).reshape(views, 3, -1))   # in place: ours
    return out.view(views, 3, h, w)


def _affines(draw: PlacementDraw, texels_per_mm: tuple[float, float]) -> tuple[Tensor, Tensor]:
    """V×K×2×2 each: a sticker's texel offsets from its centroid, as designed -> as placed, and back.

    The sticker turns and scales on the object, in millimetres; texels need not be square, so the turn
    is taken into millimetres and back: ``scale · D R D⁻¹`` with ``D = diag(texels per mm)``.
    """
    angle = torch.deg2rad(draw.rotation_deg)
    cos, sin = angle.cos(), angle.sin()
    # Texture y points down: an anticlockwise turn as seen is (x, y) -> (x cos + y sin, -x sin + y cos).
    turn = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)
    d = torch.tensor(texels_per_mm, device=angle.device)
    ratio = d[:, None] / d[None, :]
    scale = draw.scale[..., None, None]
    return scale * turn * ratio, turn.transpose(-1, -2) * ratio / scale


def _window(box: Tensor, centre: Tensor, forward: Tensor, shift: Tensor) -> tuple[tuple[int, int], tuple[int, int]]:
    """The texels a sticker may cover in any of the V views, and where it was designed: its bounding box's
    corners as placed, widened by two texels for bilinear sampling. Returns (x0, y0) and (width, height)."""
    x0, y0, x1, y1 = box.tolist()
    corners = centre.new_tensor([[x0, y0], [x1, y0], [x0, y1], [x1, y1]]) - centre              # 4×2
    placed = centre + corners @ forward.transpose(-1, -2) + shift[:, None]                       # V×4×2
    lo = torch.minimum(placed.amin((0, 1)), centre.new_tensor([x0, y0])).floor().long() - 2
    hi = torch.maximum(placed.amax((0, 1)), centre.new_tensor([x1, y1])).ceil().long() + 2
    (wx0, wy0), (wx1, wy1) = lo.tolist(), hi.tolist()
    return (wx0, wy0), (wx1 - wx0 + 1, wy1 - wy0 + 1)


def _grid(inverse: Tensor, shift: Tensor, centre: Tensor, size: tuple[int, int]) -> Tensor:
    """V×h×w×2 sampling grid (``grid_sample``, ``align_corners=False``) of a window: for each texel of the
    placed sticker, where it was in the design, ``centre + inverse (p - centre - shift)`` (window texels)."""
    sy, sx = size
    u = torch.arange(sx, device=centre.device) - (centre[0] + shift[:, 0])[:, None]                 # V×w
    v = torch.arange(sy, device=centre.device) - (centre[1] + shift[:, 1])[:, None]                 # V×h
    gx = ((2 * inverse[:, 0, 0, None] * u + 2 * centre[0] + 1) / sx - 1)[:, None, :] + \
        (2 * inverse[:, 0, 1, None] * v / sx)[:, :, None]
    gy = ((2 * inverse[:, 1, 1, None] * v + 2 * centre[1] + 1) / sy - 1)[:, :, None] + \
        (2 * inverse[:, 1, 0, None] * u / sy)[:, None, :]
    return torch.stack([gx, gy], -1)


def _clip(start: int, size: int, n: int) -> tuple[slice, tuple[int, int]]:
    """The part of ``[start, start + size)`` inside ``[0, n)``, and how much lies before and after it."""
    lo, hi = max(start, 0), min(start + size, n)
    return slice(lo, hi), (lo - start, start + size - hi)


def place(patch: Patch, base_texture: Tensor, scene, error: PlacementError, generator: torch.Generator,
          views: int | None = None, colour_model=None) -> Tensor:
    """``patch`` on ``base_texture`` as deployed with ``error``: one draw per view (V×3×Ht×Wt), or one
    deployment when ``views`` is None (3×Ht×Wt — a physical sign placed once, e.g. for every frame
    of a drive). Differentiable in the patch's parameters.

    ``colour_model`` (a ``physattack.printing.ColourModel``) prints the stickers before they are placed.
    """
    if not patch.cut_as_stickers:
        raise PatchError(f"Placement error moves stickers, but a {type(patch).__name__} is not cut into "
                         "stickers; use patch=sticker or turn placement error off.")
    texture = patch.apply(base_texture)
    if colour_model is not None:
        texture = colour_model.print_patch(texture, patch.mask)
    pieces = sticker_pieces(patch.mask)
    draw = error.sample(views or 1, len(pieces), generator)
    out = place_stickers(texture, patch.mask, base_texture, scene.face_mask, texels_per_mm(scene), draw, pieces)
    return out[0] if views is None else out


__all__ = ["DISTRIBUTIONS", "PlacementDraw", "PlacementError", "StickerPieces", "place", "place_stickers",
           "sticker_pieces", "texels_per_mm"]
