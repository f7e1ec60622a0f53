"""Where should stickers go? RP2's first stage (Eykholt et al. 2018): optimize a free, L1-penalized
perturbation of the whole face under EOT, then keep the cells where it grew most.

Cells are squares of the sticker size, entirely on the face, so the result is a set of printable
square stickers rather than scattered texels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.attack.objectives import backward
from physattack.patch.paint import PaintPatch


@dataclass(frozen=True)
class MaskSearch:
    """What the search looks for and how long: whole cells of ``cell_px`` texels covering about ``area``
    of the face, found by ``steps`` Adam steps (``lr``) of ``batch_size`` views on a free perturbation
    whose L1 norm is penalized by ``l1_weight``."""

    area: float
    cell_px: int
    steps: int
    batch_size: int
    lr: float = 0.05
    l1_weight: float = 0.2


def search_sticker_mask(*, scene, pipeline, sampler, adversarial: Callable, search: MaskSearch,
                        generator: torch.Generator) -> Tensor:
    """A 1×Ht×Wt mask of whole cells covering about ``search.area`` of the face where a free perturbation
    helps most.

    ``adversarial(views)`` is the attack's adversarial loss on the rendered views
    (``EOTAttack._adversarial``): either ``(loss, None)``, a scalar with its graph (one victim, a
    classifier ensemble's mean probability), or ``(loss, images_grad)``, a number and the gradient of
    the images (a detector ensemble's members, weighted and asked one at a time as in a step)."""
    free = PaintPatch(scene.face_mask, eps=1.0).to(scene.texture.device)
    opt = torch.optim.Adam(free.parameters(), lr=search.lr)
    face_texels = scene.face_mask.sum()
    for _ in range(search.steps):
        views = pipeline(scene, free.apply(scene.texture), sampler.sample(search.batch_size, generator))
        delta = free.eps * torch.tanh(free.theta) * free.mask
        adv, images_grad = adversarial(views)
        sparsity = search.l1_weight * delta.abs().sum() / face_texels
        opt.zero_grad(set_to_none=True)
        backward(sparsity if images_grad is not None else adv + sparsity, views.images, images_grad)
        opt.step()
    with torch.no_grad():
        change = (free.eps * torch.tanh(free.theta)).abs().sum(0, keepdim=True) * scene.face_mask
        return cells_covering(change, scene.face_mask, search.area, search.cell_px)


def cells_covering(score: Tensor, face_mask: Tensor, area: float, cell_px: int) -> Tensor:
    """The highest-scoring whole cells (``cell_px`` squares fully on the face) until ``area`` is reached."""
    _, h, w = face_mask.shape
    cell_score = F.avg_pool2d(score[None], cell_px)[0, 0]
    on_face = F.avg_pool2d(face_mask[None], cell_px)[0, 0] > 0.999
    cell_score = torch.where(on_face, cell_score, torch.full_like(cell_score, -1.0))
    n_cells = int(round(area * float(face_mask.sum()) / cell_px**2))
    n_cells = max(1, min(n_cells, int(on_face.sum())))
    chosen = torch.zeros(cell_score.numel(), device=score.device)
    chosen[cell_score.flatten().argsort(descending=True)[:n_cells]] = 1
    mask = F.interpolate(chosen.view(1, 1, *cell_score.shape), scale_factor=cell_px, mode="nearest")[0]
    return F.pad(mask, (0, w - mask.shape[-1], 0, h - mask.shape[-2])) * face_mask
