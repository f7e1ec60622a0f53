"""A reprogramming frame: a bounded, smooth program printed around a window (Elsayed et al. 2018).

The paper's program is ``tanh(W ⊙ M)``; printed, it becomes colours ``0.5 + 0.5·tanh(W)`` on the
frame texels ``M``. Smoothness comes from parametrizing ``W`` on a coarse grid (``cell_px`` texels a
cell) upsampled bilinearly, so the printed program has no texel-level noise a printer would lose.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from physattack.patch.base import Patch, PatchError
from physattack.scene.scene import Scene


class FramePatch(Patch):
    """The program on the texels where ``mask`` is 1; everywhere else the base texture shows.

    Args:
        mask: 1×Ht×Wt frame texels. cell_px: texels per parameter cell. init_scale: std of the
            initial W (0 starts from mid-grey; the paper's random-program control uses a large one).
        generator: for a random initial program.
    """

    def __init__(self, mask: Tensor, cell_px: int = 8, init_scale: float = 0.0,
                 generator: torch.Generator | None = None):
        super().__init__()
        cell_px = PatchError.check_range("patch.cell_px", cell_px, 1, integer=True, why="texels per program cell")
        PatchError.check_range("patch.init_scale", init_scale, 0, why="the initial program's std")
        self.register_buffer("mask", (mask > 0.5).float())
        h, w = mask.shape[-2:]
        self.size, self.cell_px = (h, w), cell_px
        coarse = (max(2, -(-h // self.cell_px)), max(2, -(-w // self.cell_px)))
        self.weights = nn.Parameter(torch.randn(3, *coarse, generator=generator) * init_scale)

    def colors(self) -> Tensor:
        up = F.interpolate(self.weights[None], size=self.size, mode="bilinear", align_corners=False)[0]
        return 0.5 + 0.5 * torch.tanh(up)

    def apply(self, base_texture: Tensor) -> Tensor:
        """base 3×H×W or B×3×H×W (a window content per view) -> texture of the same shape."""
        return base_texture * (1 - self.mask) + self.colors() * self.mask


def frame_for_scene(scene: Scene, cell_px: int = 8, init_scale: float = 0.0, seed: int = 0) -> FramePatch:
    """The program on the scene's patchable texels (for reprogram_board: the card minus its window)."""
    return FramePatch(scene.face_mask, cell_px, init_scale, torch.Generator().manual_seed(seed))
