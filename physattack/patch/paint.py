"""Paint: a change to every texel of the face, bounded in L∞ (a coat of paint or a faded overprint)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from physattack.patch.base import Patch, PatchError
from physattack.scene.scene import Scene


class PaintPatch(Patch):
    """``texture = clip(base + eps·tanh(θ)·face_mask, 0, 1)``: each texel moves at most ``eps``.

    Args:
        face_mask: 1×Ht×Wt in {0, 1}, the texels that may change.
        eps: L∞ bound in (0, 1] units (16/255 by default).
    """

    def __init__(self, face_mask: Tensor, eps: float = 16 / 255):
        super().__init__()
        PatchError.check_range("patch.eps", eps, 0, 1, lo_open=True, why="the paint's L-infinity bound")
        self.register_buffer("mask", (face_mask > 0.5).float())
        self.eps = float(eps)
        self.theta = nn.Parameter(torch.zeros(3, *face_mask.shape[1:]))

    def apply(self, base_texture: Tensor) -> Tensor:
        return (base_texture + self.eps * torch.tanh(self.theta) * self.mask).clamp(0, 1)

    def colors(self) -> Tensor:
        """The paint's own colour contribution, for printability priors: the change, re-centred."""
        return (0.5 + torch.tanh(self.theta) * self.eps).clamp(0, 1)


def paint_for_scene(scene: Scene, eps: float = 16 / 255) -> PaintPatch:
    return PaintPatch(scene.face_mask, eps)
